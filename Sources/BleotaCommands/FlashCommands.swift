import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSystem
import Foundation
import Logging
import Synchronization

/// Which protocol to speak, for commands that work over several.
struct ProtocolChoice: ParsableArguments {
    @Option(
        name: .customLong("protocol"),
        help: "The device's update protocol (default: what the address, the image or the device says). `bleota protocols` lists them.")
    var explicit: String?

    @Option(
        name: .customLong("protocol-file"),
        help: ArgumentHelp(
            "A protocol description (YAML, protocols/description-format.md) to speak, as --protocol would name it; protocols/ has Telink's and STM32WB's.", valueName: "FILE"))
    var file: String?

    /// The protocol named, by --protocol or by the description --protocol-file gave (registered before the arguments were parsed).
    var name: String? { explicit ?? describedName }

    func validate() throws {
        if let explicit, let described = describedName, described != explicit {
            throw ValidationError("--protocol \(explicit) and --protocol-file (which describes \(described)) disagree: give one of them")
        }
    }

    /// The name of the protocol --protocol-file describes.
    private var describedName: String? {
        guard let file else { return nil }
        return CommandContext.registry.protocols.lazy.compactMap { $0 as? DescribedProtocol }.first { $0.description.source == file }?.name
    }
}

/// Options of `flash` beyond transfer tuning.
struct FlashOptions: ParsableArguments {
    @Option(name: .long, help: "How far to go: test-and-confirm, test, confirm or upload-only (the protocol says which it supports).")
    var mode: FlashMode?

    @Option(name: .long, help: "Public or private key (PEM or DER; ECDSA P-256 or Ed25519) the image must be signed with; checked before connecting.")
    var key: String?

    @Option(
        name: .customLong("protocol-option"),
        help: ArgumentHelp("A key of the protocol's host half (repeatable; bleota protocols lists them), e.g. bootloader-name=DfuNew.", valueName: "KEY=VALUE"))
    var protocolOptions: [String] = []

    /// The protocol options, parsed into `updateProtocol`'s typed values.
    func hostOptions(for updateProtocol: any UpdateProtocol) throws -> ProtocolOptions {
        try parsedHostOptions(protocolOptions, for: updateProtocol)
    }
}

/// `--protocol-option KEY=VALUE` pairs (the command line's, a device list's, a campaign's)
/// parsed once into `updateProtocol`'s typed host options: a malformed pair or an unknown key
/// is a usage error, and so is a value the option refuses, each in one line.
func parsedHostOptions(_ pairs: [String], for updateProtocol: any UpdateProtocol) throws -> ProtocolOptions {
    let text = try keyValueOptions(
        pairs, option: "--protocol-option", example: "bootloader-name=DfuNew",
        accepted: updateProtocol.hostOptions.map(\.key), owner: updateProtocol.identity.displayName)
    do { return try ProtocolOptions(parsing: text, updateProtocol.hostOptions) } catch {
        throw CommandFailure(.usage, "--protocol-option \(error)")
    }
}

/// `KEY=VALUE` options given with `option` (repeatable), each key checked against
/// what `owner` accepts (any key when `accepted` is nil: the owner is not known yet);
/// a malformed pair or an unknown key is a one-line usage error.
func keyValueOptions(_ pairs: [String], option: String, example: String, accepted: [String]?, owner: String) throws -> ProtocolOptionText {
    var options = ProtocolOptionText()
    for pair in pairs {
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw CommandFailure(.usage, "\(option) '\(pair)' is not KEY=VALUE: write e.g. \(option) \(example)")
        }
        let key = String(parts[0])
        if let accepted, !accepted.contains(key) {
            throw CommandFailure(
                .usage,
                "\(option) \(key) is not a key \(owner) takes: "
                    + (accepted.isEmpty ? "it takes none" : "use one of \(accepted.joined(separator: ", "))"))
        }
        options[key] = String(parts[1])
    }
    return options
}

extension FlashMode: ExpressibleByArgument {}

/// `flash --base OLD [--delta auto|always|never]`: a delta patch instead of the whole image.
struct DeltaOptions: ParsableArguments {
    @Option(
        name: .customLong("base"),
        help: ArgumentHelp(
            "The image the device runs, read as the image is (.bin, .hex, …): a protocol that can sends a delta patch against it when the device runs it (default: the copy bleota kept when it flashed that image; protocols/delta.md).",
            valueName: "FILE"))
    var basePath: String?
    @Option(
        name: .customLong("delta"),
        help: "auto (a patch when the device takes one, bleota holds the image it runs, and the patch saves 10 % or more), always (a patch or an error), never.")
    var policy: DeltaPolicy = .auto
    @OptionGroup var imageStore: ImageStoreOption

    /// The images kept by earlier flashes; nil with --no-image-store.
    var store: ImageStore? { imageStore.store }

    /// The base: --base read like the image, else the store of flashed images; nil for a protocol
    /// that cannot send patches (refused with --base or --delta always) or with --delta never.
    func base(for updateProtocol: any UpdateProtocol, request: ImageRequest) throws -> DeltaBase? {
        guard let basePath else {
            guard updateProtocol.capabilities.contains(.deltaFlash), policy != .never else {
                if policy == .always {
                    throw CommandFailure(.usage, "--delta always: \(updateProtocol.identity.displayName) sends whole images only: drop --delta")
                }
                return nil
            }
            guard let store else {
                if policy == .always { throw CommandFailure(.usage, "--delta always with --no-image-store needs --base FILE, the image the device runs") }
                return nil
            }
            return DeltaBase(origin: .store(store), policy: policy)
        }
        guard updateProtocol.capabilities.contains(.deltaFlash) else {
            throw CommandFailure(.usage, "--base: \(updateProtocol.identity.displayName) sends whole images only: drop --base")
        }
        var baseRequest = request
        baseRequest.path = basePath
        baseRequest.keyPath = nil
        let prepared: PreparedImage
        do { prepared = try updateProtocol.prepareImage(baseRequest) } catch { throw error.commandFailure }
        guard let bytes = prepared.wholeInMemory else {
            throw CommandFailure(.usage, "--base \(basePath): a base is one image held in memory (under 16 MiB)")
        }
        return DeltaBase(bytes: bytes, policy: policy, source: "--base \(basePath)")
    }

    /// After a flash that took: a copy of the image for the next flash's patch, when the protocol
    /// sends patches and the image is one part held in memory. A copy that cannot be kept is a
    /// warning, never a failure: the device has its image.
    func keep(_ image: PreparedImage, for updateProtocol: any UpdateProtocol, logger: Logger) {
        guard let store, updateProtocol.capabilities.contains(.deltaFlash), let bytes = image.wholeInMemory else { return }
        do {
            let removed = try store.add(bytes)
            logger.debug("kept a copy of the image in \(store.directory) for delta patches; removed \(removed.count) older")
        } catch {
            Terminal.standardError.writeLine("warning: \(error): the next flash of this device sends the whole image unless given --base")
        }
    }
}

extension DeltaPolicy: ExpressibleByArgument {}

/// `bleota flash`: the main job.
struct FlashCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flash",
        abstract: "Update a device's firmware: transfer, verify, activate and confirm.",
        discussion: """
            Steps: connect → enter bootloader → reconnect → transfer → verify → activate → reconnect → confirm, \
            as far as the protocol and --mode go. The protocol comes from --protocol, the address, the image \
            or what the device offers; the image is checked (and with --key its signature verified) before \
            anything connects. A failure after the activation may have reached the device is followed by a \
            reconnect that finds out what the device runs, which the message, --json and the exit status say.
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var tuningOptions: TuningOptions
    @OptionGroup var input: ImageInputOptions
    @OptionGroup var span: SpanOption
    @OptionGroup var protocolOption: ProtocolChoice
    @OptionGroup var flashOptions: FlashOptions
    @OptionGroup(title: "Delta patches") var deltaOptions: DeltaOptions

    @Option(name: .customLong("version-label"), help: "The version the device must report after the update, when the image carries none (default: the image's SHA-256 prefix).")
    var versionLabel: String?

    @Flag(
        name: .customLong("no-downgrade"),
        help: "Refuse to send an image that is not newer than the one the device runs; the device is asked to refuse it too (SMP's upload 'upgrade' flag).")
    var noDowngrade = false

    @Option(
        name: .customLong("image"),
        help:
            "On a device with several images (cores), the one to update: 0 the application core, 1 an nRF5340's network core (MCUboot's image number, 0…15; a package's own image only, with a package)."
    )
    var imageNumber: Int?

    @Option(
        name: .customLong("xip-pair"), parsing: .upToNextOption,
        help: ArgumentHelp(
            "For MCUboot's direct-XIP: the two variants of the image, each linked for one slot (imgtool --rom-fixed); bleota sends the one for the slot the device does not run. In place of IMAGE.",
            valueName: "A B"))
    var xipPair: [String] = []

    @Argument(help: "The image: .bin, .hex, .srec, or the protocol's own format (an MCUboot-signed .bin, …).") var image: String?

    func validate() throws {
        switch (image, xipPair.count) {
        case (nil, 0): throw ValidationError("give the image to flash (or --xip-pair A B)")
        case (_?, 1...): throw ValidationError("give either IMAGE or --xip-pair A B, not both")
        case (nil, 2): break
        case (nil, _): throw ValidationError("--xip-pair takes two images, one linked for each slot: got \(xipPair.count)")
        default: break
        }
    }

    func run() async throws {
        let logger = global.makeLogger("bleota.flash")
        let device = deviceOptions.device
        let updateProtocol = try await device.resolveProtocol(
            explicit: protocolOption.name, image: ImageFiles.probe(image ?? xipPair[0]), needs: .flash,
            timeout: deviceOptions.timeouts.connect, pairing: deviceOptions.pairing.policy, logger: logger)
        let mode = flashOptions.mode ?? updateProtocol.flashModes.first ?? .testAndConfirm
        guard updateProtocol.flashModes.contains(mode) else {
            throw CommandFailure(
                .usage, "--mode \(mode.rawValue): \(updateProtocol.identity.displayName) supports \(updateProtocol.flashModes.map(\.rawValue).joined(separator: ", "))")
        }
        try tuningOptions.check(against: updateProtocol)
        if noDowngrade, !updateProtocol.capabilities.contains(.refuseDowngrade) {
            throw CommandFailure(
                .usage, "--no-downgrade: \(updateProtocol.identity.displayName) cannot ask the device to refuse an older image: drop --no-downgrade")
        }
        if !xipPair.isEmpty, !updateProtocol.capabilities.contains(.multipleImages) {
            throw CommandFailure(.usage, "--xip-pair: \(updateProtocol.identity.displayName) has no direct-XIP slots to pick between: give one image")
        }
        if let imageNumber {
            guard (0...15).contains(imageNumber) else { throw CommandFailure(.usage, "--image \(imageNumber): MCUboot numbers images 0…15: give one of those") }
            guard updateProtocol.capabilities.contains(.multipleImages) else {
                throw CommandFailure(
                    .usage, "--image: \(updateProtocol.identity.displayName) updates one image per device: drop --image")
            }
        }
        let request = ImageRequest(
            path: image ?? xipPair[0], keyPath: flashOptions.key, versionLabel: versionLabel,
            inputFormat: input.inputFormat?.rawValue, baseAddress: input.baseAddress, fill: input.fill, maximumSpan: span.maximumSpan,
            imageNumber: imageNumber, xipVariants: xipPair)
        var preparing: PreparedImage
        do { preparing = try updateProtocol.prepareImage(request) } catch { throw error.commandFailure }
        logger.info("\(preparing.summary)")
        preparing.deltaBase = try deltaOptions.base(for: updateProtocol, request: request)
        preparing.refusesDowngrade = noDowngrade
        let prepared = preparing
        let hostOptions = try flashOptions.hostOptions(for: updateProtocol)
        let outcome = try await withHost(
            updateProtocol, global: global, device: deviceOptions, tuning: tuningOptions, options: hostOptions,
            activates: true, logger: logger
        ) {
            try await $0.flash(prepared, mode: mode)
        }
        if mode != .upload { deltaOptions.keep(prepared, for: updateProtocol, logger: logger) }
        let via = updateProtocol.flashModes.count > 1 ? " over \(updateProtocol.identity.displayName) (\(mode.rawValue))" : ""
        try printReport(outcome, json: global.json) { report in
            var line = "\(mode == .upload ? "uploaded" : "flashed") \(formatBytes(report.bytes)) to \(report.device)\(via): \(summary(report))"
            switch (report.versionAfter, report.versionBefore) {
            case (let after?, let before?): line += "; device now runs '\(after)' (was '\(before)')"
            case (let after?, nil): line += "; device now runs '\(after)'"
            case (nil, _): line += "; the device did not say what it runs now"
            }
            return line
        }
    }
}

/// Opens the device named by `--device`, runs `operation` with `protocol`'s host
/// half reporting progress to the terminal, and closes the progress line.
func withHost<T: Sendable>(
    _ updateProtocol: any UpdateProtocol, global: GlobalOptions, device: DeviceOptions, tuning: TuningOptions,
    options: ProtocolOptions = ProtocolOptions(), activates: Bool = false,
    logger: Logger, _ operation: @escaping @Sendable (any ProtocolHost) async throws -> T
) async throws -> SessionOutcome<T> {
    let reporter = ProgressReporter.automatic(json: global.json, quiet: device.quiet)
    let (effective, knobs, source) = effectiveTuning(tuning, device: device.device.text, for: updateProtocol)
    if let source, !global.json, !device.quiet { Terminal.standardError.writeLine(source) }
    let timeouts = device.timeouts
    let name = updateProtocol.name
    let address = device.device
    let pairing = device.pairing.policy
    let work = Task {
        try await address.session(protocol: updateProtocol, logger: logger, pairing: pairing) { connector, clock in
            let context = HostContext(
                protocolName: name, connector: connector, clock: clock, tuning: effective, explicitKnobs: knobs,
                timeouts: timeouts, logger: logger, options: options
            ) { reporter.handle($0) }
            return try await operation(updateProtocol.makeHost(context))
        }
    }
    // The first Ctrl-C (or SIGTERM) stops the operation and says where it was and what the
    // device runs; a second one ends the process at once, saying what is then unknown.
    let interrupted = Mutex(false)
    ProcessSignals.interceptNextInterrupt {
        interrupted.withLock { $0 = true }
        work.cancel()
    } endingAtOnce: {
        reporter.finish()
        let said = endedAtOnce(at: reporter.position, activates: activates)
        Terminal.standardError.writeLine("error: \(said)")
        // --json promises one document, failures included: ending at once is one too.
        if global.json, let json = try? JSONOutput.string(FailureReport(CommandFailure(.interrupted, said))) {
            Terminal.standardOutput.writeLine(json)
        }
    }
    defer { ProcessSignals.stopInterceptingInterrupts() }
    do {
        let outcome = try await withTaskCancellationHandler {
            try await work.value
        } onCancel: {
            work.cancel()
        }
        reporter.finish()
        return outcome
    } catch {
        reporter.finish()
        if interrupted.withLock({ $0 }) { throw interruption(at: reporter.position, activates: activates) }
        throw error
    }
}

/// What a second Ctrl-C, which ends the process before the operation could stop, tells the user:
/// the step it was in, and what that leaves unknown.
func endedAtOnce(at position: (step: UpdateStep?, progress: TransferProgress?), activates: Bool) -> String {
    let step = position.step ?? .connect
    let said = "interrupted again while \(ProgressReporter.label(step)), so bleota ended at once"
    guard activates else { return "\(said): nothing was stored or written; run the command again" }
    if [.activate, .confirm].contains(step) {
        return "\(said): whether the device runs the new image or the old one is unknown; `bleota image state` or a new `bleota flash` finds out"
    }
    return "\(said): nothing was activated, so the device keeps its old image (a transfer left halfway resumes or starts again); flash again to update it"
}

/// What a Ctrl-C during a transfer tells the user: the step and how far it got, and what the
/// device runs. Before the activation nothing was activated, so the device keeps its old image
/// (a device never activates what it did not verify); from the activation on it may run either.
func interruption(at position: (step: UpdateStep?, progress: TransferProgress?), activates: Bool) -> CommandFailure {
    let step = position.step ?? .connect
    var whereItWas = "interrupted while \(ProgressReporter.label(step))"
    if step == .transfer, let progress = position.progress {
        whereItWas += String(format: " (%.0f%% of %@ sent)", 100 * progress.fraction, formatBytes(progress.totalBytes))
    }
    let lateSteps: Set<UpdateStep> = [.activate, .confirm]
    guard activates else {
        return CommandFailure(
            .interrupted, "\(whereItWas): nothing was stored or written; run the command again",
            details: FailureDetails(step: step.rawValue, code: "interrupted", deviceState: nil))
    }
    if lateSteps.contains(step) {
        return CommandFailure(
            .interrupted,
            "\(whereItWas): the activation may have reached the device, so it runs the new image or the old one; "
                + "`bleota image state` or a new `bleota flash` finds out",
            details: FailureDetails(step: step.rawValue, code: "interrupted", deviceState: "unknown"))
    }
    return CommandFailure(
        .interrupted, "\(whereItWas): nothing was activated, so the device keeps its old image; flash again to update it",
        details: FailureDetails(step: step.rawValue, code: "interrupted", deviceState: "old-image"))
}

/// The tuning a transfer uses: the command line's options over the setting
/// `bleota tune` saved for this device (unless --no-saved-tuning, and only the
/// knobs the protocol gives a meaning), over the defaults. Also returns which
/// knobs were given, and a line saying where the setting came from.
func effectiveTuning(
    _ options: TuningOptions, device: String, for updateProtocol: any UpdateProtocol,
    store: TuningStore = TuningStore()
) -> (TransferTuning, Set<TuningKnob>, String?) {
    // A saved setting's knobs that mean something to this protocol (legacy DFU has no delay): tune
    // saves only those it measured, and flash takes them.
    let savedKnobs = Set<TuningKnob>([.packetSize, .window, .delay]).intersection(updateProtocol.tuningKnobs.keys)
    guard !options.noSavedTuning, !savedKnobs.isEmpty,
        let saved = store.saved(for: DeviceIdentity(device, protocolName: updateProtocol.name))
    else {
        return (options.tuning(), options.givenKnobs, nil)
    }
    let base = saved.point.apply(to: TransferTuning())
    let overridden = options.setsTuning ? " (options given on the command line take precedence)" : ""
    return (
        options.tuning(base: base), options.givenKnobs.union(savedKnobs),
        "using the tuning saved for this device: \(saved.point)\(overridden); --no-saved-tuning ignores it (\(store.path))"
    )
}

func summary(_ report: UpdateReport) -> String {
    var parts = ["\(formatDuration(report.transferSeconds)) transfer (\(formatBytes(Int(report.goodput)))/s"]
    if let device = report.deviceCapacity, device > 0, let link = report.linkCapacity {
        // A device slower than its link: the share that means something is of what the device can take.
        parts[0] += String(
            format: ", %.0f%% of the %@/s this device can write; the link carries %@/s",
            100 * report.goodput / device, formatBytes(Int(device)), formatBytes(Int(link)))
    } else if let capacity = report.linkCapacity, capacity > 0 {
        if report.streamBytes > 0, report.streamBytes < report.bytes, report.transferSeconds > 0 {
            // Compressed or a delta: the image arrives faster than the link carries bytes, so the
            // share of the link is of what was sent ("142 % of the link" said nothing true).
            let sent = Double(report.streamBytes) / report.transferSeconds
            parts[0] += String(
                format: " of image; %@/s sent, %.0f%% of the link's %@/s", formatBytes(Int(sent)), 100 * sent / capacity, formatBytes(Int(capacity)))
        } else {
            parts[0] += String(format: ", %.0f%% of the link's %@/s", 100 * report.goodput / capacity, formatBytes(Int(capacity)))
        }
    }
    parts[0] += ")"
    parts.append("\(formatDuration(report.totalSeconds)) in all")
    parts.append("\(report.statistics.packetsSent) packets, \(report.statistics.packetsResent) resent")
    if report.statistics.reconnects > 0 { parts.append("\(report.statistics.reconnects) reconnects") }
    if report.compressed { parts.append("compressed to \(formatBytes(report.streamBytes))") }
    if report.delta == true { parts.append("sent as a \(formatBytes(report.streamBytes)) delta patch") }
    return parts.joined(separator: ", ")
}

func printReport(_ outcome: SessionOutcome<UpdateReport>, json: Bool, text: (UpdateReport) -> String) throws {
    var report = outcome.value
    report.linkCapacity = outcome.linkCapacity
    report.deviceCapacity = outcome.deviceCapacity
    report.linkModel = outcome.linkModel
    report.connection = outcome.connection
    report.security = outcome.security
    if json {
        Terminal.standardOutput.writeLine(try JSONOutput.string(report))
    } else {
        var line = text(report)
        if let connection = report.connection, !connection.summary.isEmpty { line += "; link \(connection.summary)" }
        if let security = report.security { line += "; security \(security)" }
        Terminal.standardOutput.writeLine(line)
        for note in report.connection?.notes ?? [] { Terminal.standardError.writeLine("note: \(note)") }
    }
}
