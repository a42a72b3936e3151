import BleotaEngine
import BleotaLink
import Foundation
import Glibc
import Logging
import Synchronization

/// One log file per device of a fleet (`--log-dir`): what happened to that
/// device alone — its tries and adapters, steps, waits for a transfer place,
/// progress every 10 %, notes, failures and the back-off before the next try,
/// how it ended — and its update's own log messages down to debug level. When
/// one device of three hundred fails, this is the file to read or attach.
///
/// A file is named after the device's label (or address), with characters a
/// file name should not hold replaced by `_`, and `-2`, `-3`, … when two
/// devices would share a name. Lines are appended as they happen (opened for
/// appending per line, so hundreds of devices hold no descriptors), each
/// stamped with the wall-clock time and the time since the fleet began on its
/// clock (virtual time for simulated devices).
public final class FleetDeviceLogs: Sendable {
    public let directory: String
    private let clock: any BleotaClock
    private let began: Duration
    /// Each device's file by address, and the file names taken.
    private let files = Mutex<(paths: [String: String], taken: Set<String>)>(([:], []))
    /// The last 10 % step of progress written, by address.
    private let progressDecile = Mutex<[String: Int]>([:])
    private let writing = Mutex(())

    /// Creates `directory` if needed and names the files of `devices` (in their order; devices
    /// met later, as a campaign worker claims them, are named when first written to).
    public init(directory: String, devices: [FleetDevice] = [], clock: any BleotaClock) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        self.clock = clock
        began = clock.now
        for device in devices { _ = path(address: device.address, label: device.label) }
    }

    /// The device's file, named on first use.
    public func path(address: String, label: String) -> String {
        files.withLock { files in
            if let known = files.paths[address] { return known }
            let base = Self.fileName(label)
            var name = base
            var copy = 1
            while files.taken.contains(name) {
                copy += 1
                name = "\(base)-\(copy)"
            }
            files.taken.insert(name)
            let path = (directory as NSString).appendingPathComponent(name + ".log")
            files.paths[address] = path
            return path
        }
    }

    /// A file name from a label or address: letters, digits, `.`, `-` and `_` kept, the rest `_`.
    public static func fileName(_ label: String) -> String {
        let kept = String(
            label.unicodeScalars.map { scalar -> Character in
                let allowed = scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || "._-".unicodeScalars.contains(scalar))
                return allowed ? Character(scalar) : "_"
            })
        let trimmed = kept.drop { $0 == "." }
        return trimmed.isEmpty ? "device" : String(trimmed.prefix(120))
    }

    /// Appends one line to the device's file.
    public func write(_ device: FleetDevice, _ text: String) {
        write(address: device.address, label: device.label, text)
    }

    func write(address: String, label: String, _ text: String) {
        let path = path(address: address, label: label)
        let stamp = Date().ISO8601Format()
        let line = "\(stamp) +\(String(format: "%.3f", (clock.now - began).seconds))s \(text)\n"
        writing.withLock { _ in
            let descriptor = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else { return }
            defer { Glibc.close(descriptor) }
            let bytes = Array(line.utf8)
            var written = 0
            while written < bytes.count {
                let result = bytes[written...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
                if result < 0 && errno == EINTR { continue }
                guard result > 0 else { return }
                written += result
            }
        }
    }

    /// Writes what `event` says about its device (events about no device are not written).
    public func record(_ event: FleetEvent) {
        switch event {
        case .started(let device, let adapter, let attempt):
            progressDecile.withLock { $0[device.address] = nil }
            write(device, "try \(attempt) of \(device.address) through \(adapter)")
        case .step(let device, let step):
            write(device, "step \(step)")
        case .progress(let device, let acknowledged, let total, let rate, let resends):
            guard total > 0 else { return }
            let decile = min(10, acknowledged * 10 / total)
            let due = progressDecile.withLock { written -> Bool in
                guard decile > (written[device.address] ?? 0) else { return false }
                written[device.address] = decile
                return true
            }
            if due {
                write(device, "progress \(decile * 10) % (\(acknowledged) of \(total) bytes, \(String(format: "%.1f", rate / 1024)) KiB/s, \(resends) resent)")
            }
        case .queued(let device):
            write(device, "queued: ready, waiting for a transfer place on its adapter")
        case .note(let device, let text):
            write(device, "note: \(text)")
        case .retrying(let device, let error, let delay):
            write(device, "try failed at \(error.step): \(error.message); next try in \(String(format: "%.0f", delay.seconds)) s")
        case .finished(let result):
            var text = "finished: \(result.outcome.rawValue)"
            if let before = result.versionBefore, let after = result.versionAfter { text += ", \(before) → \(after)" }
            text += String(format: ", %.1f s, ", result.seconds) + "\(result.bytes) bytes, \(result.resends) resent, \(result.attempts) tries"
            if let error = result.error { text += "; failed at \(result.step ?? "?"): \(error)" }
            if let state = result.deviceState { text += " (device: \(state))" }
            write(address: result.device, label: result.label, text)
        case .stopping:
            break
        }
    }

    /// A logger for the device's update: `base`'s messages go where they went (at its level), and
    /// every message at debug level or above is also written to the device's file.
    public func logger(for device: FleetDevice, base: Logger) -> Logger {
        let file = DeviceFileLogHandler(logs: self, device: device)
        return Logger(label: base.label) { _ in MultiplexLogHandler([base.handler, file]) }
    }
}

/// The swift-log handler that writes one device's messages to its fleet log.
struct DeviceFileLogHandler: LogHandler {
    let logs: FleetDeviceLogs
    let device: FleetDevice
    var logLevel: Logger.Level = .debug
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        let extra = merged.isEmpty ? "" : " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        logs.write(device, "\(event.level): \(event.message)\(extra)")
    }
}
