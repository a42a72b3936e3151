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
