import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaProtocols
import BleotaSystem
import Foundation

/// Transfer tunables as command-line options; each maps to a field of
/// ``TransferTuning`` and its help says why you would change it. What each
/// means depends on the protocol (`bleota protocols` lists it); a knob the
/// protocol gives no meaning is refused rather than ignored.
struct TuningOptions: ParsableArguments {
    @Option(name: .long, help: "Payload bytes per data packet (default: the most the link allows; over SMP, data bytes per upload request).")
    var packetSize: Int?

    @Option(name: .long, help: "Packets in flight before waiting for an acknowledgement (1…250; over SMP, upload requests in flight). Lower it for devices with small buffers.")
    var window: Int?

    @Option(
        name: .long,
        help:
            "Time to wait after each packet, with its unit (2ms; default 0): where closed-loop pacing starts, fixed with --no-adaptive. Raise it when a slow device drops packets. A bare number is milliseconds until the next release, then seconds.",
        transform: TimeArgument.parse)
    var delay: TimeArgument?

    @Option(name: .long, help: "The device acknowledges every N packets (capped at half the window).")
    var ackInterval: Int?

    @Option(
        name: .long,
        help: "Time to wait for an acknowledgement before asking again, with its unit (750ms). A bare number is milliseconds until the next release, then seconds.",
        transform: TimeArgument.parse)
    var ackTimeout: TimeArgument?

    @Option(name: .long, help: "Acknowledgement timeouts in a row before giving up.")
    var retries: Int?

    @Flag(
        name: .long, inversion: .prefixedNo,
        help:
            "Closed-loop pacing (default on): window and gap follow the delivery rate and round trip the acknowledgements show, within the buffer the device advertises. --window and --delay are where it starts; --no-adaptive keeps them fixed."
    )
    var adaptive: Bool?

    @Option(name: .long, help: "Deflate the stream: auto (when the device supports it and it helps), on, off.")
    var compression: TransferTuning.Compression?

    @Flag(name: .long, help: "Ignore the setting `bleota tune` saved for this device.")
    var noSavedTuning = false

    /// True when the command line sets any of what a saved tuning would.
    var setsTuning: Bool { packetSize != nil || window != nil || delay != nil }

    /// The knobs given on the command line.
    var givenKnobs: Set<TuningKnob> {
        var knobs: Set<TuningKnob> = []
        if packetSize != nil { knobs.insert(.packetSize) }
        if window != nil { knobs.insert(.window) }
        if delay != nil { knobs.insert(.delay) }
        if ackInterval != nil { knobs.insert(.ackInterval) }
        if ackTimeout != nil { knobs.insert(.ackTimeout) }
        if retries != nil { knobs.insert(.retries) }
        if adaptive != nil { knobs.insert(.adaptive) }
        if compression != nil { knobs.insert(.compression) }
        return knobs
    }

    func validate() throws {
        if let window, !(1...TransferTuning.maximumWindow).contains(window) {
            throw ValidationError("--window \(window) is out of range: use 1…\(TransferTuning.maximumWindow)")
        }
        if let delay {
            guard delay.value >= 0 || !delay.value.isFinite else { throw ValidationError("--delay cannot be negative: use 0 or more, e.g. --delay 2ms") }
            _ = try delay.checkedSeconds(option: "--delay", range: 0...60, bare: .milliseconds)
            if let warning = delay.legacyMillisecondsWarning(option: "--delay") { Terminal.standardError.writeLine(warning) }
        }
        if let packetSize, packetSize < 1 { throw ValidationError("--packet-size \(packetSize) is out of range: use 1 or more (the link sets the maximum)") }
        if let ackInterval, !(1...TransferTuning.maximumWindow).contains(ackInterval) {
            throw ValidationError("--ack-interval \(ackInterval) is out of range: use 1…\(TransferTuning.maximumWindow)")
        }
        if let ackTimeout {
            _ = try ackTimeout.checkedSeconds(option: "--ack-timeout", range: 0.001...600, bare: .milliseconds)
            if let warning = ackTimeout.legacyMillisecondsWarning(option: "--ack-timeout") { Terminal.standardError.writeLine(warning) }
        }
        if let retries, !(0...10_000).contains(retries) { throw ValidationError("--retries \(retries) is out of range: use 0…10000") }
    }

    /// The tuning these options describe, starting from `base` (a saved or default tuning).
    func tuning(base: TransferTuning = TransferTuning()) -> TransferTuning {
        var tuning = base
        if let packetSize { tuning.packetSize = packetSize }
        if let window { tuning.window = window }
        if let delay { tuning.interPacketDelay = delay.duration(bare: .milliseconds) }
        if let ackInterval { tuning.ackInterval = ackInterval }
        if let ackTimeout { tuning.ackTimeout = ackTimeout.duration(bare: .milliseconds) }
        if let retries { tuning.maxRetries = retries }
        // A window or delay is where closed-loop pacing starts (so giving the default changes
        // nothing); --no-adaptive keeps them fixed.
        if let adaptive { tuning.adaptive = adaptive }
        if let compression { tuning.compression = compression }
        return tuning
    }

    /// Refuses knobs `updateProtocol` gives no meaning, naming the ones it has.
    func check(against updateProtocol: any UpdateProtocol) throws {
        let meaningless = givenKnobs.filter { updateProtocol.tuningKnobs[$0] == nil }.map { "--" + $0.rawValue }.sorted()
        guard meaningless.isEmpty else {
            let meaningful = updateProtocol.tuningKnobs.keys.map { "--" + $0.rawValue }.sorted()
            throw CommandFailure(
                .usage,
                "\(meaningless.joined(separator: ", ")) \(meaningless.count == 1 ? "has" : "have") no meaning for \(updateProtocol.identity.displayName): drop \(meaningless.count == 1 ? "it" : "them")"
                    + (meaningful.isEmpty ? "" : " (it takes \(meaningful.joined(separator: ", ")))"))
        }
    }
}

extension TransferTuning.Compression: ExpressibleByArgument {}

/// Options every command that talks to a device shares.
struct DeviceOptions: ParsableArguments {
    @Option(name: .long, help: "The device: sim://PRESET?key=value (built-in simulator), ble://AA:BB:CC:DD:EE:FF[?type=random], udp://HOST[:PORT], serial:///dev/ttyACM0.")
    var device: DeviceAddress

    @Option(
        name: .customLong("connect-timeout"),
        help:
            "Time to wait for the device to connect and answer, in seconds or with a unit (500ms; 0.1…3600 s, default 10 s); the wait for it to come back after a reboot is this, and at least 30 s (a swap takes time).",
        transform: TimeArgument.parse)
    var connectTime = TimeArgument(seconds: 10)
    var connectTimeout: Double { connectTime.seconds() }

    @Flag(name: .long, help: "No progress output (errors still go to stderr).")
    var quiet = false

    @OptionGroup var pairing: PairingOptions

    func validate() throws {
        _ = try connectTime.checkedSeconds(option: "--connect-timeout", range: 0.1...3600)
    }

    var timeouts: StepTimeouts {
        StepTimeouts(connect: .milliseconds(Int64(connectTimeout * 1000)), reboot: .milliseconds(Int64(max(connectTimeout, 30) * 1000)))
    }
}

extension TransferError {
    /// How each kind of failure exits the process (see ``ExitStatus``). A failure
    /// after which the device was found running the new image unconfirmed, or
    /// could not be reached, exits with its own status: the device changed, or may have.
    var exitStatus: ExitStatus {
        switch outcome {
        case .newImageUnconfirmed?: return .newImageUnconfirmed
        case .unknown?: return .deviceStateUnknown
        default: break
        }
        switch code {
        case .invalidTuning, .unsupported: return .usage
        case .badInput: return .badInput
        case .deviceRefused, .protocolViolation, .confirmFailed: return .deviceError
        case .verificationFailed: return .verificationFailed
        case .linkLost, .timeout: return .linkLost
        }
    }

    /// A load failure (a bad image, before any device is involved) is its message alone.
    var commandFailure: CommandFailure {
        CommandFailure(exitStatus, step == .load ? message : description, details: FailureDetails(self))
    }
}

/// Reads a whole input file (a file to push, an MCUboot image, a key) through
/// ``InputFile``, as images are read: only regular files, so a FIFO or a device
/// is refused with what it is instead of hanging or reading forever.
func readInputFile(_ path: String) throws -> [UInt8] {
    do { return try ImageFiles.read(path) } catch { throw error.commandFailure }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// flushed, then renamed over the target — so `path` is either the old file or
/// the complete new one, never half-written.
func writeFileAtomically(_ bytes: [UInt8], to path: String) throws {
    try checkOutputPath(path)
    do {
        try AtomicFile.write(bytes, to: path)
    } catch {
        throw CommandFailure(.failure, "\(path): write failed: \(String(cString: strerror(error.code))); nothing was changed")
    }
}

/// Refuses an output path that could never be written (empty, in a missing
/// directory, or a directory itself). Commands call it before they connect,
/// so a typo costs nothing rather than a whole transfer or tuning run.
func checkOutputPath(_ path: String) throws {
    guard !path.isEmpty else { throw CommandFailure(.usage, "the output path is empty: give a file name, e.g. -o hello.txt") }
    let url = URL(fileURLWithPath: path)
    let directory = url.deletingLastPathComponent()
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
        throw CommandFailure(.badInput, "\(path): the directory \(directory.path) does not exist: create it first")
    }
    if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
        throw CommandFailure(.badInput, "\(path) is a directory: give a file name inside it")
    }
}
