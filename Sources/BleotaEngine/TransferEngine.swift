import BleotaLink
import Logging

/// How a protocol puts the engine's packets on the wire and reads the
/// receiver's feedback — the only protocol-specific part of a reliable transfer.
///
/// A vendor protocol with its own framing implements this and gets windowing,
/// selective resend, wrap-around, adaptive pacing and resume for free.
public protocol TransferWire: Sendable {
    /// Bytes a data packet adds to its payload (for link-size checks and statistics).
    var dataOverhead: Int { get }
    func encodeData(sequence: UInt16, payload: ArraySlice<UInt8>) -> [UInt8]
    func encodeAckRequest() -> [UInt8]
    func encodeAcknowledgement(nextExpected: UInt16, bitmap: [UInt8]) -> [UInt8]
    func encodeNegativeAcknowledgement(first: UInt16, count: UInt16, corrupt: Bool) -> [UInt8]
    /// Interprets a packet arriving during a transfer.
    func decodeTransferPacket(_ packet: [UInt8]) -> TransferPacket
}

/// A packet seen during a transfer, as the engine understands it.
public enum TransferPacket: Sendable, Equatable {
    case data(sequence: UInt16, payload: [UInt8], intact: Bool)
    case acknowledgement(nextExpected: UInt16, bitmap: [UInt8])
    case negativeAcknowledgement(first: UInt16, count: UInt16)
    case ackRequest
    /// The peer reported an error; the transfer stops with this message.
    case failure(String)
    /// Anything else (left to the protocol; the engine ignores it).
    case other([UInt8])
}

/// Progress of one transfer, reported after every acknowledgement.
public struct TransferProgress: Sendable, Equatable, Codable {
    public var bytesAcknowledged: Int
    public var totalBytes: Int
    public var packetsSent: Int
    public var packetsResent: Int
    public var packetsLost: Int
    /// Link time since the transfer (not the whole update) began.
    public var elapsed: Duration
    public var window: Int
    public var interPacketDelay: Duration

    public var fraction: Double { totalBytes == 0 ? 1 : Double(bytesAcknowledged) / Double(totalBytes) }

    public init(bytesAcknowledged: Int, totalBytes: Int, packetsSent: Int, packetsResent: Int, packetsLost: Int,
                elapsed: Duration, window: Int, interPacketDelay: Duration) {
        self.bytesAcknowledged = bytesAcknowledged
        self.totalBytes = totalBytes
        self.packetsSent = packetsSent
        self.packetsResent = packetsResent
        self.packetsLost = packetsLost
        self.elapsed = elapsed
        self.window = window
        self.interPacketDelay = interPacketDelay
    }
}

/// Counters of a finished (or failed) transfer.
public struct TransferStatistics: Sendable, Equatable, Codable {
    public var packetsSent = 0
    public var packetsResent = 0
    public var packetsLost = 0
    public var negativeAcknowledgements = 0
    public var acknowledgements = 0
    public var ackTimeouts = 0
    public var bytesOnWire = 0
    public var reconnects = 0
    public var duplicatesReceived = 0
    public var corruptReceived = 0
    public init() {}
}

/// Sends a byte stream reliably over a ``/BleotaLink/Link``.
///
/// `BleotaEngine` is the protocol-independent core of bleota: the reliable
/// transfer (windowed selective repeat with per-packet CRCs, 16-bit wrapping
/// sequence numbers, acknowledgement timeouts, adaptive pacing), the resume
/// logic, and the update state machine. It knows nothing of Bluetooth: links
/// come from `BleotaLink`, wire formats from the protocol plug-ins (through
/// ``TransferWire``), time from an injected ``/BleotaLink/BleotaClock``. That is what lets
/// the same code be proven on the simulator's virtual clock and then run over
/// a real adapter.
///
/// One engine value sends one stream; it survives disconnects, so a caller can
/// reconnect, tell it what the device already holds (``resume(held:)``) and call
/// ``run(over:)`` again — only what is missing is sent.
public final class TransferEngine: @unchecked Sendable {
    public let stream: [UInt8]
    public let packetSize: Int
    public let wire: any TransferWire
    public private(set) var tuning: TransferTuning
    public let clock: any BleotaClock
    private let logger: Logger
    private var sender: SelectiveRepeatSender
    public private(set) var statistics = TransferStatistics()
    private var started: Duration?
    private var window: Double
    private var delay: Duration
    /// When each packet was last sent and how often, for round-trip samples
    /// (Karn's rule: only packets sent once give a sample).
    private var sentAt: [Duration]
    private var sends: [UInt8]
    /// Round-trip time from data packet to its acknowledgement.
    private var roundTrip = RoundTripEstimator()
    /// Adaptive mode looks at the loss rate over about two windows at a time:
    /// random loss of a few percent is not a reason to slow down, a
    /// receiver that overflows (most of a burst lost) is.
    private var recentSent = 0
    private var recentLost = 0
    /// Transmission count when the last acknowledgement request went out.
    private var requestMark: UInt32?
    private let onProgress: @Sendable (TransferProgress) -> Void

    public init(stream: [UInt8], packetSize: Int, wire: any TransferWire, tuning: TransferTuning,
                clock: any BleotaClock, logger: Logger = Logger(label: "bleota.engine"),
                onProgress: @escaping @Sendable (TransferProgress) -> Void = { _ in }) {
        self.stream = stream
        self.packetSize = max(1, packetSize)
        self.wire = wire
        self.tuning = tuning
        self.clock = clock
        self.logger = logger
        self.onProgress = onProgress
        sender = SelectiveRepeatSender(packetCount: (stream.count + self.packetSize - 1) / self.packetSize)
        window = Double(tuning.window)
        delay = tuning.interPacketDelay
        sentAt = Array(repeating: .zero, count: sender.packetCount)
        sends = Array(repeating: 0, count: sender.packetCount)
    }

    /// How long to wait before asking for an acknowledgement: three smoothed
    /// round trips once measured, never more than the configured timeout.
    private var probeDelay: Duration {
        roundTrip.scaled(by: 3, minimum: .milliseconds(20), maximum: tuning.ackTimeout, fallback: tuning.ackTimeout / 4)
    }

    public var packetCount: Int { sender.packetCount }
    public var isComplete: Bool { sender.isComplete }

    /// Stream bytes covered by acknowledged packets.
    public var bytesAcknowledged: Int {
        var bytes = sender.acknowledgedCount * packetSize
        if sender.packetCount > 0, sender.isAcknowledged(sender.packetCount - 1) {
            bytes -= sender.packetCount * packetSize - stream.count
        }
        return min(bytes, stream.count)
    }

    /// Before a (re)run: the byte ranges of the stream the receiver already holds.
    /// A packet counts as held only if all of its bytes are.
    public func resume(held: RangeSet) {
        sender.forgetInFlight()
        let size = packetSize, total = stream.count
        sender.markHeld { index in held.contains(index * size..<min((index + 1) * size, total)) }
    }

    private func payload(_ index: Int) -> ArraySlice<UInt8> {
        stream[(index * packetSize)..<min((index + 1) * packetSize, stream.count)]
    }

    /// Sends until every packet is acknowledged. Throws ``/BleotaLink/LinkError`` when the
    /// link drops (call ``resume(held:)`` and run again) and ``TransferError``
    /// when the device fails the transfer or stops answering.
    public func run(over link: any Link) async throws {
        if started == nil { started = clock.now }
        let inbox = Mailbox<Result<[UInt8], LinkError>>()
        let wire = self.wire
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while true {
                    do {
                        inbox.put(.success(try await link.receive()))
                    } catch {
                        inbox.put(.failure((error as? LinkError) ?? .cancelled))
                        return
                    }
                }
            }
            defer { group.cancelAll() }
            try await self.sendLoop(link: link, inbox: inbox, wire: wire)
        }
    }

    private func sendLoop(link: any Link, inbox: Mailbox<Result<[UInt8], LinkError>>, wire: any TransferWire) async throws {
        var timeouts = 0
        var probed = false
        reportProgress()
        while !sender.isComplete {
            // Take in whatever feedback has arrived before deciding what to send.
            while let item = inbox.poll() {
                if try handle(item) { timeouts = 0; probed = false }
            }
            if sender.isComplete { break }
            if let index = sender.nextPacket(window: max(1, Int(window))) {
                let packet = wire.encodeData(sequence: SequenceNumber.wrap(index), payload: payload(index))
                try await link.send(packet)
                sentAt[index] = clock.now
                sends[index] &+= 1
                recentSent += 1
                statistics.bytesOnWire += packet.count
                if delay > .zero { try await clock.sleep(for: delay) }
                continue
            }
            // Window full or all sent: wait for feedback. When the window has
            // shrunk below the receiver's acknowledgement interval, it will not
            // acknowledge on its own: ask at once. Otherwise ask early once (a
            // lost tail has no later packet to reveal it), then wait out the
            // full timeout.
            if !probed && Int(window) < tuning.effectiveAckInterval && sender.inFlight > 0 {
                probed = true
                requestMark = sender.transmissionCount
                try await link.send(wire.encodeAckRequest())
            }
            let wait = probed ? max(probeDelay * 2, min(tuning.ackTimeout, probeDelay * 4)) : probeDelay
            logger.trace("waiting \(wait): window \(Int(window)) in flight \(sender.inFlight) acked \(sender.acknowledgedCount)/\(sender.packetCount) at \(clock.now)")
            let item: Result<[UInt8], LinkError>?
            do {
                item = try await withDeadline(wait, clock: clock) { try await inbox.take() }
            } catch is DeadlineExceeded {
                item = nil
            }
            if let item {
                if try handle(item) { timeouts = 0; probed = false }
                continue
            }
            if probed {
                timeouts += 1
                statistics.ackTimeouts += 1
                if timeouts > tuning.maxRetries {
                    throw TransferError(.timeout, step: .transfer,
                                        "the device stopped acknowledging (\(timeouts) timeouts of \(tuning.ackTimeout)): check it is in range and powered, or raise --ack-timeout")
                }
                logger.debug("acknowledgement timeout \(timeouts); asking again")
                if timeouts >= 2 { statistics.packetsLost += sender.timeoutAllInFlight(); slowDown() }
            }
            probed = true
            requestMark = sender.transmissionCount
            try await link.send(wire.encodeAckRequest())
        }
        reportProgress()
    }

    /// Applies one inbox item; true if it showed the receiver is alive and progressing.
    private func handle(_ item: Result<[UInt8], LinkError>) throws -> Bool {
        let packet: [UInt8]
        switch item {
        case .failure(let error): throw error
        case .success(let bytes): packet = bytes
        }
        switch wire.decodeTransferPacket(packet) {
        case .acknowledgement(let next, let bitmap):
            statistics.acknowledgements += 1
            let nextIndex = SequenceNumber.unwrap(next, near: sender.base)
            var received: [Int] = []
            for bit in 0..<(bitmap.count * 8) where bitmap[bit / 8] & (1 << (bit % 8)) != 0 {
                received.append(nextIndex + 1 + bit)
            }
            var outcome = sender.acknowledge(nextExpected: nextIndex, received: received)
            if let mark = requestMark {
                // Most likely the answer to our request: it has seen everything sent before it.
                requestMark = nil
                outcome.newlyLost += sender.markLost(sentUpTo: mark)
            }
            statistics.packetsLost += outcome.newlyLost
            recentLost += outcome.newlyLost
            if let newest = outcome.newest, sends[newest] == 1 {
                roundTrip.add(clock.now - sentAt[newest])
            }
            adapt()
            if outcome.newlyAcknowledged > 0 { reportProgress() }
            return outcome.newlyAcknowledged > 0 || outcome.newlyLost > 0
        case .negativeAcknowledgement(let first, let count):
            statistics.negativeAcknowledgements += 1
            let firstIndex = SequenceNumber.unwrap(first, near: sender.base)
            let lost = sender.negativeAcknowledge(first: firstIndex, count: Int(count))
            statistics.packetsLost += lost
            recentLost += lost
            return lost > 0
        case .failure(let message):
            throw TransferError(.deviceRefused, step: .transfer, message)
        case .data, .ackRequest, .other:
            return false
        }
    }

    /// Adaptive pacing: every two windows of packets, compare the loss rate
    /// with two thresholds. Above 15 % the receiver is overflowing: halve the
    /// window and add (or grow) a gap between packets. Below 3 %: grow the
    /// window by one and shrink the gap. In between, hold.
    private func adapt() {
        guard tuning.adaptive, recentSent >= max(8, 2 * Int(window)) else { return }
        let rate = Double(recentLost) / Double(recentSent)
        if rate > 0.15 {
            window = max(2, (window / 2).rounded(.down))
            delay = delay == .zero ? .microseconds(500) : min(delay * 2, .milliseconds(20))
            logger.debug("loss \(Int(rate * 100)) %: window \(Int(window)), delay \(delay) at \(clock.now)")
        } else if rate < 0.03 {
            window = min(Double(tuning.window), window + 1)
            if delay > .zero {
                delay = delay * 0.75
                if delay < .microseconds(100) { delay = .zero }
            }
        }
        recentSent = 0
        recentLost = 0
    }

    private func slowDown() {
        guard tuning.adaptive else { return }
        window = max(2, (window / 2).rounded(.down))
    }

    private func reportProgress() {
        statistics.packetsSent = sender.sentCount
        statistics.packetsResent = sender.resentCount
        onProgress(TransferProgress(
            bytesAcknowledged: bytesAcknowledged, totalBytes: stream.count, packetsSent: sender.sentCount,
            packetsResent: sender.resentCount, packetsLost: statistics.packetsLost,
            elapsed: clock.now - (started ?? clock.now), window: Int(window), interPacketDelay: delay))
    }
}
