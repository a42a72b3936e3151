import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Foundation
import Logging

/// `bleota flash`: the main job.
struct FlashCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flash",
        abstract: "Update a device's firmware: transfer, verify, activate and confirm.",
        discussion: """
            Steps: connect → enter bootloader → reconnect → transfer → verify → activate → reconnect → confirm. \
            Loss is detected per packet and only what was lost is resent; a dropped link is resumed. \
            The device activates the image only after verifying its CRC-32 and SHA-256.
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var tuningOptions: TuningOptions
    @OptionGroup var input: ImageInputOptions
    @OptionGroup var smp: SMPOptions

    @Option(name: .customLong("version-label"), help: "The version the device must report after the update (default: the image's SHA-256 prefix).")
    var versionLabel: String?

    @Argument(help: "The image: .bin, .hex or .srec (an MCUboot-signed .bin for SMP devices).") var image: String

    func run() async throws {
        let logger = global.makeLogger("bleota.flash")
        let target = try DeviceTarget(parsing: deviceOptions.device)
        var deviceProtocol = try smp.deviceProtocol.resolved(for: target)
        if smp.deviceProtocol == .auto, case .ble(let text) = target {
            // Ask the device what it offers; an MCUboot image goes over SMP when it can.
            let header = try input.leadingBytes(image, count: 4)
            let isMCUboot = MCUbootImage.startsWithMagic(header)
            deviceProtocol = try await detectBLEProtocol(text, preferSMP: isMCUboot, timeout: deviceOptions.timeouts.connect)
            logger.info("\(text) offers \(deviceProtocol == .smp ? "MCUmgr's SMP" : "bleota's native") service: using it")
        }
        if deviceProtocol == .smp {
            try await flashSMP(logger: logger)
            return
        }
        // The native protocol carries the image's size in 32 bits.
        let bytes = try input.loadFlattened(image, limit: Int(UInt32.max))
        guard !bytes.isEmpty else { throw CommandFailure(.badInput, "\(image): the image is empty: nothing to flash") }
        let label = versionLabel ?? "sha256:" + String(SHA256Digest.hash(bytes).hexString.prefix(12))
        let outcome = try await withNativeUpdater(global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
            try await $0.flash(image: bytes, version: label)
        }
        try printReport(outcome, json: global.json) { report in
            "flashed \(formatBytes(report.bytes)) to \(report.device): \(summary(report)); device now runs '\(report.versionAfter ?? "?")' (was '\(report.versionBefore ?? "?")')"
        }
    }

    /// MCUmgr/MCUboot: the image is checked (hash, and signature with --key) before anything connects.
    func flashSMP(logger: Logger) async throws {
        let bytes = try readInputFile(image)
        let checked = try checkedMCUbootImage(bytes, path: image, keyPath: smp.key)
        logger.info("MCUboot image \(checked.version), hash \(checked.hashTLV?.hexString ?? "?")")
        let mode = smp.mode
        let outcome = try await withSMPUpdater(global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
            try await $0.upgrade(imageBytes: bytes, mode: mode)
        }
        try printReport(outcome, json: global.json) { report in
            let what = mode == .upload ? "uploaded" : "flashed"
            return "\(what) \(formatBytes(report.bytes)) to \(report.device) over SMP (\(mode.rawValue)): \(summary(report)); device now runs \(report.versionAfter ?? "?") (was \(report.versionBefore ?? "?"))"
        }
    }
}

/// `bleota push`: put a file into the device's file store.
struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Store a file on the device (kept only if it verifies).")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var tuningOptions: TuningOptions

    @OptionGroup var protocolOption: ProtocolOption
    @Option(name: .long, help: "Name on the device (default: the file's name; over SMP, relative names go under /lfs/).") var name: String?
    @Argument(help: "The file to send.") var file: String

    func run() async throws {
        let logger = global.makeLogger("bleota.push")
        let bytes = try readInputFile(file)
        let remoteName = name ?? URL(fileURLWithPath: file).lastPathComponent
        guard !remoteName.isEmpty, remoteName.utf8.count <= 255 else {
            throw ValidationError("--name must be 1…255 bytes of UTF-8")
        }
        let outcome: SessionOutcome<UpdateReport>
        if try protocolOption.resolved(deviceOptions) == .smp {
            outcome = try await withSMPUpdater(global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
                try await $0.push(file: bytes, name: remoteName)
            }
        } else {
            outcome = try await withNativeUpdater(global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
                try await $0.push(file: bytes, name: remoteName)
            }
        }
        try printReport(outcome, json: global.json) { report in
            "pushed '\(remoteName)' (\(formatBytes(report.bytes))) to \(report.device): \(summary(report))"
        }
    }
}

/// `bleota pull`: fetch a file from the device's file store.
struct PullCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull",
        abstract: "Fetch a file from the device; written atomically and only after its hash verifies.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var tuningOptions: TuningOptions

    @OptionGroup var protocolOption: ProtocolOption
    @Option(name: [.short, .customLong("output")], help: "Where to write the file.") var output: String
    @Argument(help: "The file's name on the device (over SMP, relative names are under /lfs/).") var name: String

    func run() async throws {
        let logger = global.makeLogger("bleota.pull")
        let name = self.name
        let outcome: SessionOutcome<PulledFile>
        if try protocolOption.resolved(deviceOptions) == .smp {
            outcome = try await withSMPUpdater(global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
                let (file, report) = try await $0.pull(name: name)
                return PulledFile(bytes: file, report: report)
            }
        } else {
            outcome = try await withNativeUpdater(global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
                let (file, report) = try await $0.pull(name: name)
                return PulledFile(bytes: file, report: report)
            }
        }
        try writeFileAtomically(outcome.value.bytes, to: output)
        let pulled = SessionOutcome(value: outcome.value.report, linkCapacity: outcome.linkCapacity, linkModel: outcome.linkModel,
                                    connection: outcome.connection)
        try printReport(pulled, json: global.json) { report in
            "pulled '\(name)' (\(formatBytes(report.bytes))) from \(report.device) to \(output): \(summary(report))"
        }
    }
}

/// Opens the device named by `--device`, runs `operation` with a native-protocol
/// updater reporting progress to the terminal, and closes the progress line.
func withNativeUpdater<T: Sendable>(global: GlobalOptions, device: DeviceOptions, tuning: TuningOptions, logger: Logger,
                                    _ operation: @escaping @Sendable (NativeUpdater) async throws -> T) async throws -> SessionOutcome<T> {
    let target = try DeviceTarget(parsing: device.device)
    let reporter = ProgressReporter.automatic(json: global.json, quiet: device.quiet)
    let (tuning, source) = effectiveTuning(tuning, device: device.device)
    if let source, !global.json, !device.quiet { Terminal.standardError.writeLine(source) }
    let timeouts = device.timeouts
    let outcome = try await target.session(logger: logger) { connector, clock in
        try await operation(NativeUpdater(connector: connector, clock: clock, tuning: tuning, timeouts: timeouts, logger: logger) {
            reporter.handle($0)
        })
    }
    reporter.finish()
    return outcome
}

/// The tuning a transfer uses: the command line's options over the setting
/// `bleota tune` saved for this device (unless --no-saved-tuning), over the
/// defaults. The second value says where the setting came from, for the user.
func effectiveTuning(_ options: TuningOptions, device: String,
                     store: TuningStore = TuningStore()) -> (TransferTuning, String?) {
    guard !options.noSavedTuning, let saved = store.saved(for: DeviceIdentity(device)) else {
        return (options.tuning(), nil)
    }
    let base = saved.point.apply(to: TransferTuning())
    let overridden = options.setsTuning ? " (options given on the command line take precedence)" : ""
    return (options.tuning(base: base),
            "using the tuning saved for this device: \(saved.point)\(overridden); --no-saved-tuning ignores it (\(store.path))")
}

struct PulledFile: Sendable {
    var bytes: [UInt8]
    var report: UpdateReport
}

func summary(_ report: UpdateReport) -> String {
    var parts = ["\(formatDuration(report.transferSeconds)) transfer (\(formatBytes(Int(report.goodput)))/s"]
    if let capacity = report.linkCapacity, capacity > 0 {
        parts[0] += String(format: ", %.0f%% of the link's %@/s", 100 * report.goodput / capacity, formatBytes(Int(capacity)))
    }
    parts[0] += ")"
    parts.append("\(formatDuration(report.totalSeconds)) in all")
    parts.append("\(report.statistics.packetsSent) packets, \(report.statistics.packetsResent) resent")
    if report.statistics.reconnects > 0 { parts.append("\(report.statistics.reconnects) reconnects") }
    if report.compressed { parts.append("compressed to \(formatBytes(report.streamBytes))") }
    return parts.joined(separator: ", ")
}

func printReport(_ outcome: SessionOutcome<UpdateReport>, json: Bool, text: (UpdateReport) -> String) throws {
    var report = outcome.value
    report.linkCapacity = outcome.linkCapacity
    report.linkModel = outcome.linkModel
    report.connection = outcome.connection
    if json {
        Terminal.standardOutput.writeLine(try JSONOutput.string(report))
    } else {
        var line = text(report)
        if let connection = report.connection, !connection.summary.isEmpty { line += "; link \(connection.summary)" }
        Terminal.standardOutput.writeLine(line)
        for note in report.connection?.notes ?? [] { Terminal.standardError.writeLine("note: \(note)") }
    }
}
