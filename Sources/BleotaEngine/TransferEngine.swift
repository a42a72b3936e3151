import BleotaCodec
import BleotaLink
import Logging
import Synchronization

/// How a protocol puts the engine's packets on the wire and reads the
/// receiver's feedback — the only protocol-specific part of a reliable transfer.
///
/// A vendor protocol with its own framing implements this and gets windowing,
/// selective resend, wrap-around, adaptive pacing and resume for free.
public protocol TransferWire: Sendable {
    /// Bytes a data packet adds to its payload (for link-size checks and statistics).
    var dataOverhead: Int { get }
    func encodeData(sequence: UInt16, payload: ArraySlice<UInt8>) -> [UInt8]
    /// Encodes packet `index` (absolute); by default as `encodeData(sequence:)` with the index modulo 2¹⁶.
    func encodeData(index: Int, payload: ArraySlice<UInt8>) -> [UInt8]
    /// The most packets the sender may have beyond the receiver's cumulative
    /// point, for headers whose sequence numbers wrap sooner than 2¹⁶; nil for no limit.
    var sequenceSpan: Int? { get }
    func encodeAckRequest() -> [UInt8]
    /// Asks the receiver to acknowledge every `interval` new packets from now
    /// on; nil when the receiver cannot be asked (the default).
    func encodeAckInterval(_ interval: Int) -> [UInt8]?
    func encodeAcknowledgement(nextExpected: UInt16, bitmap: [UInt8]) -> [UInt8]
    func encodeNegativeAcknowledgement(first: UInt16, count: UInt16, corrupt: Bool) -> [UInt8]
    /// Interprets a packet arriving during a transfer.
    func decodeTransferPacket(_ packet: [UInt8]) -> TransferPacket
}

extension TransferWire {
    public func encodeData(index: Int, payload: ArraySlice<UInt8>) -> [UInt8] {
        encodeData(sequence: SequenceNumber.wrap(index), payload: payload)
    }

    public var sequenceSpan: Int? { nil }

    public func encodeAckInterval(_ interval: Int) -> [UInt8]? { nil }
}

/// A packet seen during a transfer, as the engine understands it.
public enum TransferPacket: Sendable, Equatable {
    /// `payload` is a slice of the received packet: no copy per packet.
    case data(sequence: UInt16, payload: ArraySlice<UInt8>, intact: Bool)
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

    public init(
        bytesAcknowledged: Int, totalBytes: Int, packetsSent: Int, packetsResent: Int, packetsLost: Int,
        elapsed: Duration, window: Int, interPacketDelay: Duration
    ) {
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
///
/// ## A value core in a class shell
/// What the engine decides is decided by value types, each a pure state
/// machine tested as a table without a link or a clock:
/// ``SelectiveRepeatSender`` (which packet goes next, what an acknowledgement
/// or a gap report settles, what is sent again), ``PacingController`` (the
/// window and the gap between packets, from delivery-rate and round-trip
/// samples), ``StallPredictor`` (where the receiver stops to erase flash),
/// ``RoundTripEstimator``, ``ReceiverWindow`` (the receiving end) and
/// ``SequenceNumber``. This class is the shell that does what they decide: it
/// reads the stream, sends on the link, waits on the clock and feeds back what
/// arrives.
///
/// The shell is a class rather than an actor because one task drives it at a
/// time — ``run(over:)`` is awaited by the host half that owns the engine, and
/// a second run while one is going is refused — so an actor's isolation would
/// guard nothing, while every packet of the send loop would pay for a hop onto
/// it. That exclusivity is what its `@unchecked Sendable` stands on; what it
/// reports while running goes out through `onProgress`, never through shared state.
public final class TransferEngine: @unchecked Sendable {
    /// What is sent: read packet by packet, so an image on disk is never held whole.
    public let source: any ByteSource
    public let packetSize: Int
    public let wire: any TransferWire
    public private(set) var tuning: TransferTuning
    public let clock: any BleotaClock
    private let logger: Logger
    private var sender: SelectiveRepeatSender
    public private(set) var statistics = TransferStatistics()
    private var started: Duration?
    /// Closed-loop pacing (``TransferTuning/adaptive``); nil sends with the tuning's fixed window and delay.
    private var pacer: PacingController?
    private var window: Int { pacer?.window ?? tuning.window }
    private var delay: Duration { pacer?.gap ?? tuning.interPacketDelay }
    /// What was known when each recent transmission went out, by transmission
    /// number: round-trip samples (Karn's rule: only packets sent once give
    /// one) and delivery-rate samples. A ring, because only transmissions still
    /// in flight can be acknowledged; one per packet would not stream.
    private var sendRecords: [SendRecord]
    /// Round-trip time from data packet to its acknowledgement.
    private var roundTrip = RoundTripEstimator()
    /// Where the receiver stops to erase flash (closed-loop pacing with a known receiver buffer).
    private var stalls: StallPredictor?
    private let receiverBuffer: Int?
    /// How often the receiver acknowledges: what START asked of it, or what
    /// the engine asked since (``linkBoundAckInterval``).
    private var ackInterval: Int
    /// What START asks of the receiver (again after every reconnection).
    private let requestedAckInterval: Int
    /// A wait for an acknowledgement ran out while the receiver acknowledged
    /// less often than START asked: acknowledgements get lost on this link, and
    /// the longer interval is not asked for again.
    private var longerAckIntervalFailed = false
    private var lastAcknowledgementAt: Duration?
    /// The transmission count when an acknowledgement interval was last asked of the receiver
    /// (nil: not since START, which carries one itself); that request can be lost.
    private var ackIntervalAskedAt: UInt32?
    /// The receiver showed that it did not take the last interval asked: ask it again.
    private var resendAckInterval = false
    /// Whether an acknowledgement not asked for arrived since the interval was last asked: the
    /// receiver took it.
    private var acknowledgedUnpromptedSinceAckInterval = false
    /// Whether an acknowledgement request went out since the last acknowledgement
    /// (then a long gap was a wait for a lost packet, not the device pausing).
    private var askedSinceAcknowledgement = false

    /// Transmission count when the last acknowledgement request went out.
    private var requestMark: UInt32?
    private let onProgress: @Sendable (TransferProgress) -> Void
    /// Whether ``run(over:)`` is under way: a second, concurrent one is refused.
    private let running = Mutex(false)

    /// `receiverBuffer` is the number of packets the receiver says it can queue
    /// (nil if it did not say); closed-loop pacing keeps the flight within it
    /// unless the round trip needs more, and then spaces the packets.
    public convenience init(
        stream: [UInt8], packetSize: Int, wire: any TransferWire, tuning: TransferTuning,
        clock: any BleotaClock, receiverBuffer: Int? = nil, logger: Logger = Logger(label: "bleota.engine"),
        onProgress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) {
        self.init(
            source: stream, packetSize: packetSize, wire: wire, tuning: tuning, clock: clock,
            receiverBuffer: receiverBuffer, logger: logger, onProgress: onProgress)
    }

    public init(
        source: any ByteSource, packetSize: Int, wire: any TransferWire, tuning: TransferTuning,
        clock: any BleotaClock, receiverBuffer: Int? = nil, logger: Logger = Logger(label: "bleota.engine"),
        onProgress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) {
        self.source = source
        self.packetSize = max(1, packetSize)
        self.wire = wire
        self.tuning = tuning
        self.clock = clock
        self.logger = logger
        self.onProgress = onProgress
        sender = SelectiveRepeatSender(packetCount: (source.count + self.packetSize - 1) / self.packetSize)
        sendRecords = Array(repeating: SendRecord(), count: Self.sendRecordCount)
        self.receiverBuffer = receiverBuffer
        ackInterval = tuning.ackInterval(receiverBuffer: receiverBuffer)
        requestedAckInterval = ackInterval
        if tuning.adaptive {
            if receiverBuffer != nil {
                stalls = StallPredictor(packetSize: self.packetSize, ackInterval: ackInterval)
            }
            pacer = PacingController(
                .init(
                    initialWindow: tuning.window, receiverBuffer: receiverBuffer,
                    ackInterval: ackInterval,
                    initialGap: tuning.interPacketDelay))
        }
    }

    /// What the engine knew when it sent one transmission.
    struct SendRecord {
        var transmission: UInt32 = 0
        var sentAt: Duration = .zero
        var firstSend = false
        var deliveredAtSend = 0
        var deliveredTimeAtSend: Duration = .zero
        var flightStartAtSend: Duration = .zero
    }

    /// The acknowledgement interval asked of a receiver that can change it,
    /// once closed-loop pacing has left startup without the receiver ever
    /// showing it sets the pace (no burst lost to its queue, no stall).
    ///
    /// On a link packed to its last microsecond an acknowledgement costs a data
    /// packet: `1m-dle-7.5ms` fits three 244-byte packets in each 7.5 ms event,
    /// and an event that also carries an acknowledgement back fits two. Every 16
    /// packets (what START asks, half a 32-packet buffer) that is 6 % of the
    /// link; every 48 it is 2 %. Measured there with a 256 KiB image: every 16,
    /// 91.4 % of capacity; 24, 93.3 %; 32, 94.2 %; 48, 95.3 %; 64, 95.5 % (and a
    /// flight of 96). A receiver that drains as fast as the link delivers holds
    /// no more for it, and its flight grows by the interval.
    public static let linkBoundAckInterval = 48

    /// Packets at most this share of the largest the link carries are short: a connection event
    /// brings a burst of them faster than a device takes them, so pacing holds each event to the
    /// device's buffer (``PacingController/connectionIntervalChanged(to:)``). Longer ones take long
    /// enough on air that a device drains as the event goes: on `slow-flash` holding 239-byte
    /// packets to 4 an event cost 10 % (26.8 → 24.1 KiB/s), where 1- to 20-byte packets lost
    /// one in five to the buffer without it.
    static let shortPacketShare = 4

    /// Adjacent packets lost together that mean a receive queue overflowed:
    /// at 5 % random loss three in a row happen about once in 8 000 packets.
    static let overflowRun = 3

    /// Transmissions remembered; more than the largest window can hold in flight.
    static let sendRecordCount = 1024

    private func record(transmission: UInt32, first: Bool, at now: Duration) {
        let snapshot = pacer?.snapshot ?? (delivered: 0, at: now, flightStart: now)
        sendRecords[Int(transmission % UInt32(Self.sendRecordCount))] = SendRecord(
            transmission: transmission, sentAt: now, firstSend: first,
            deliveredAtSend: snapshot.delivered, deliveredTimeAtSend: snapshot.at, flightStartAtSend: snapshot.flightStart)
    }

    private func sendRecord(_ transmission: UInt32) -> SendRecord? {
        let record = sendRecords[Int(transmission % UInt32(Self.sendRecordCount))]
        return record.transmission == transmission && transmission != 0 ? record : nil
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
            bytes -= sender.packetCount * packetSize - source.count
        }
        return min(bytes, source.count)
    }

    /// Before a (re)run: the byte ranges of the stream the receiver already holds.
    /// A packet counts as held only if all of its bytes are.
    public func resume(held: RangeSet) {
        sender.forgetInFlight()
        let size = packetSize, total = source.count
        sender.markHeld { index in held.contains(index * size..<min((index + 1) * size, total)) }
    }

    private func payload(_ index: Int) throws(TransferError) -> ArraySlice<UInt8> {
        do {
            return try source.bytes(in: (index * packetSize)..<min((index + 1) * packetSize, source.count))
        } catch {
            throw TransferError(.badInput, step: .transfer, "\(error): nothing more was sent, and the device keeps its old image")
        }
    }

    /// Sends until every packet is acknowledged. Throws ``/BleotaLink/LinkError`` when the
    /// link drops (call ``resume(held:)`` and run again) and ``TransferError``
    /// when the device fails the transfer or stops answering.
    public func run(over link: any Link) async throws {
        let claimed = running.withLock { busy -> Bool in
            guard !busy else { return false }
            busy = true
            return true
        }
        guard claimed else {
            throw TransferError(
                .protocolViolation, step: .transfer, "this transfer is already running: an engine sends over one link at a time, so wait for run(over:) to return")
        }
        defer { running.withLock { $0 = false } }
        if started == nil { started = clock.now }
        // Each (re)start of the transfer asks the receiver for the requested interval again.
        setAckInterval(requestedAckInterval)
        ackIntervalAskedAt = nil
        resendAckInterval = false
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
        var nextSendAt = clock.now
        var probed = false
        var progress = (acknowledged: sender.acknowledgedCount, at: clock.now)
        reportProgress()
        while !sender.isComplete {
            // Take in whatever feedback has arrived before deciding what to send.
            while let item = inbox.poll() {
                if try handle(item) {
                    timeouts = 0
                    probed = false
                }
            }
            if sender.isComplete { break }
            if sender.acknowledgedCount > progress.acknowledged {
                progress = (sender.acknowledgedCount, clock.now)
            } else if clock.now - progress.at > progressLimit {
                throw noProgress(since: progress.at)
            }
            try await adjustAckInterval(link: link)
            if let intervalControl = link as? any ConnectionIntervalControl, packetSize * Self.shortPacketShare <= link.parameters.maximumPayload {
                pacer?.connectionIntervalChanged(to: intervalControl.connectionInterval)
            }
            let resentBefore = sender.resentCount
            let idle = sender.inFlight == 0
            if let index = sender.nextPacket(window: max(1, window), newBelow: newPacketLimit) {
                let packet = wire.encodeData(index: index, payload: try payload(index))
                let sendStarted = clock.now
                if idle { pacer?.sendingIdle(now: sendStarted) }
                try await link.send(packet)
                record(transmission: sender.latestTransmission(of: index), first: sender.resentCount == resentBefore, at: sendStarted)
                statistics.bytesOnWire += packet.count
                if delay > .zero {
                    // Paced by a schedule, not a sleep after each packet: a send that waited
                    // for room on the link has already spent (part of) its gap.
                    nextSendAt = max(nextSendAt, sendStarted) + delay
                    let now = clock.now
                    if now < nextSendAt { try await clock.sleep(for: nextSendAt - now) }
                }
                continue
            }
            // Window full or all sent: wait for feedback. When the window has
            // shrunk below the receiver's acknowledgement interval, it will not
            // acknowledge on its own: ask at once. Otherwise ask early once (a
            // lost tail has no later packet to reveal it), then wait out the
            // full timeout.
            if !probed && window < ackInterval && sender.inFlight > 0 {
                probed = true
                requestMark = sender.transmissionCount
                try await link.send(wire.encodeAckRequest())
                askedSinceAcknowledgement = true
            }
            var wait = probed ? max(probeDelay * 2, min(tuning.ackTimeout, probeDelay * 4)) : probeDelay
            if eraseLimit < sender.packetCount, let stalls {
                // Holding back for an erase: the device answers when it is over, not before.
                wait = max(wait, min(tuning.ackTimeout, stalls.typicalStall * 1.5))
            }
            logger.trace("waiting \(wait): window \(window) in flight \(sender.inFlight) acked \(sender.acknowledgedCount)/\(sender.packetCount) at \(clock.now)")
            let item: Result<[UInt8], LinkError>?
            do {
                item = try await withDeadline(wait, clock: clock) { try await inbox.take() }
            } catch is DeadlineExceeded {
                item = nil
            }
            if let item {
                if try handle(item) {
                    timeouts = 0
                    probed = false
                }
                continue
            }
            if ackInterval != requestedAckInterval && !sender.isComplete && sender.inFlight > 0 {
                // Waited in vain with the longer interval: an acknowledgement was lost, and
                // with one every 48 packets each loss stalls the flight. Back for good.
                longerAckIntervalFailed = true
                logger.debug("no acknowledgement within \(wait) while acknowledged every \(ackInterval): back to \(requestedAckInterval)")
            }
            if probed {
                timeouts += 1
                statistics.ackTimeouts += 1
                if timeouts > tuning.maxRetries {
                    throw TransferError(
                        .timeout, step: .transfer,
                        "the device stopped acknowledging (\(timeouts) timeouts of \(tuning.ackTimeout)): check it is in range and powered, or raise --ack-timeout")
                }
                logger.debug("acknowledgement timeout \(timeouts); asking again")
                if timeouts >= 2 {
                    statistics.packetsLost += sender.timeoutAllInFlight()
                    pacer?.stalled()
                }
            }
            probed = true
            requestMark = sender.transmissionCount
            try await link.send(wire.encodeAckRequest())
            askedSinceAcknowledgement = true
        }
        reportProgress()
    }

    /// The longest a transfer goes on without a packet newly acknowledged: as many acknowledgement
    /// timeouts as a silent device is given (`maxRetries` + 1). A device that answers but takes
    /// nothing — every acknowledgement reporting only loss, which resets the timeout count — is
    /// given no longer than a silent one, so every transfer ends within a bound its options set.
    var progressLimit: Duration { tuning.ackTimeout * (tuning.maxRetries + 1) }

    private func noProgress(since: Duration) -> TransferError {
        let acknowledged = String(format: "%.0f%%", 100 * Double(bytesAcknowledged) / Double(max(1, source.count)))
        let limit = String(format: "%.1f s", progressLimit.seconds)
        return TransferError(
            .timeout, step: .transfer,
            "no new data acknowledged for \(limit) (\(tuning.maxRetries + 1) acknowledgement timeouts of \(Int((tuning.ackTimeout.seconds * 1000).rounded())) ms) "
                + "at \(acknowledged) of the stream, \(sender.resentCount) of \(sender.sentCount) packets resent: the device drops what is sent; "
                + "try a larger --packet-size or a smaller --window, or raise --ack-timeout or --retries to wait longer")
    }

    /// The acknowledgement interval the receiver should use now: the requested
    /// one until pacing knows the link sets the pace, then
    /// ``linkBoundAckInterval``, and the requested one again for good if the
    /// receiver later shows it is the bottleneck or a wait for an acknowledgement
    /// runs out (acknowledgements get lost: each costs three times the flight). A wire whose sequence numbers limit the
    /// flight to under two such intervals (compact headers: 40 packets) keeps the
    /// requested one: there the flight, not the acknowledgements, is short (at
    /// 5 % loss on `1m-no-dle-30ms`, 20 instead of 16 cost 3.7 points).
    private var wantedAckInterval: Int {
        guard let pacer, pacer.phase == .steady, !pacer.receiverLimited, !longerAckIntervalFailed,
            (wire.sequenceSpan ?? .max) >= 2 * Self.linkBoundAckInterval
        else { return requestedAckInterval }
        return max(requestedAckInterval, Self.linkBoundAckInterval)
    }

    /// Tells the receiver a new acknowledgement interval when the wanted one
    /// changed and the wire can say so. A lost request costs only speed: a
    /// receiver acknowledging less often than believed is asked (ACK_REQUEST)
    /// once the window fills, one acknowledging more often costs air time.
    private func adjustAckInterval(link: any Link) async throws {
        let wanted = wantedAckInterval
        guard wanted != ackInterval || resendAckInterval, let message = wire.encodeAckInterval(wanted) else { return }
        try await link.send(message)
        if wanted == ackInterval {
            logger.debug("asked the receiver again to acknowledge every \(wanted) packets: it did not acknowledge on its own")
        } else {
            logger.debug("asked the receiver to acknowledge every \(wanted) packets (was \(ackInterval))")
        }
        ackIntervalAskedAt = sender.transmissionCount
        resendAckInterval = false
        acknowledgedUnpromptedSinceAckInterval = false
        setAckInterval(wanted)
    }

    private func setAckInterval(_ interval: Int) {
        guard interval != ackInterval else { return }
        ackInterval = interval
        stalls?.ackIntervalChanged(to: interval)
        pacer?.ackIntervalChanged(to: interval)
    }

    /// New packets go only below this index: across a predicted erase the flight
    /// stops at what the receiver's buffer holds behind the packet that starts it.
    private var newPacketLimit: Int {
        let spanLimit = wire.sequenceSpan.map { sender.base + $0 } ?? .max
        return min(spanLimit, eraseLimit)
    }

    private var eraseLimit: Int {
        guard let stalls, let buffer = receiverBuffer, window > buffer,
            var stall = stalls.nextStall(atOrAfter: sender.base)
        else { return .max }
        while stall < sender.packetCount && sender.isAcknowledged(stall) {
            guard let next = stalls.nextStall(atOrAfter: stall + 1) else { return .max }
            stall = next
        }
        return stall + buffer
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
            let now = clock.now
            // A gap counts as a stall only with nothing lost: after a loss the first
            // unacknowledged packet says where the loss was, not where the device paused.
            if let previous = lastAcknowledgementAt, sender.inFlight > 0, !sender.hasLost, !askedSinceAcknowledgement,
                let floor = pacer?.shortestRoundTrip,
                stalls?.acknowledgement(after: now - previous, shortestRoundTrip: floor, firstUnacknowledged: sender.base) == true
            {
                pacer?.receiverStalled()
                logger.debug("receiver stalled \(now - previous) with packet \(sender.base) first unacknowledged; page \(stalls?.pageSize.map(String.init) ?? "not known yet")")
            }
            lastAcknowledgementAt = now
            let answersARequest = askedSinceAcknowledgement
            askedSinceAcknowledgement = false
            var received: [Int] = []
            for bit in 0..<(bitmap.count * 8) where bitmap[bit / 8] & (1 << (bit % 8)) != 0 {
                received.append(nextIndex + 1 + bit)
            }
            var outcome = sender.acknowledge(nextExpected: nextIndex, received: received)
            if !answersARequest {
                acknowledgedUnpromptedSinceAckInterval = true
            } else if let asked = ackIntervalAskedAt, !acknowledgedUnpromptedSinceAckInterval,
                outcome.newlyAcknowledged > ackInterval, Int(sender.transmissionCount &- asked) >= 2 * ackInterval
            {
                // More than an interval's packets waited for our request, and the receiver has not
                // acknowledged on its own over two intervals' packets sent since the interval was
                // asked: it missed that message (a full queue drops it as it drops data), and each
                // round would wait for a probe. (A lost acknowledgement looks the same once, but
                // others arrive unprompted.)
                resendAckInterval = true
            }
            if let mark = requestMark, outcome.newlyAcknowledged == 0 {
                // An acknowledgement that adds nothing after our request is its answer: the
                // receiver has seen everything sent before the request. One that adds
                // something may be an ordinary acknowledgement still queued behind data
                // (a device erasing flash answers late), and inferring loss from it would
                // resend packets that are only waiting; the next answer settles them.
                requestMark = nil
                outcome.newlyLost += sender.markLost(sentUpTo: mark)
                logger.trace("answer to an acknowledgement request: \(outcome.newlyLost) lost, base \(sender.base), in flight \(sender.inFlight)")
            }
            statistics.packetsLost += outcome.newlyLost
            var sample: PacingController.RateSample?
            var roundTripSample: Duration?
            var newestSentAt: Duration?
            if let newest = outcome.newest, let sent = sendRecord(sender.latestTransmission(of: newest)) {
                newestSentAt = sent.sentAt
                if sent.firstSend {
                    roundTripSample = now - sent.sentAt
                    roundTrip.add(now - sent.sentAt)
                }
                if let pacer {
                    // Delivery rate (draft-cheng-iccrg-delivery-rate-estimation §3): packets delivered
                    // since the newest one was sent, over the longer of the time they took to be
                    // acknowledged and the time they took to be sent — acknowledgements that arrive
                    // bunched (two in one connection event) must not read as a faster receiver.
                    sample = .init(
                        delivered: pacer.delivered + outcome.newlyAcknowledged - sent.deliveredAtSend,
                        interval: max(now - sent.deliveredTimeAtSend, sent.sentAt - sent.flightStartAtSend),
                        deliveredAtSend: sent.deliveredAtSend)
                }
            }
            if sender.longestLossRun >= Self.overflowRun { pacer?.burstLost() }
            pacer?.acknowledged(
                now: now, newlyDelivered: outcome.newlyAcknowledged, sample: sample, roundTrip: roundTripSample,
                newestSentAt: newestSentAt)
            if outcome.newlyAcknowledged > 0 { reportProgress() }
            return outcome.newlyAcknowledged > 0 || outcome.newlyLost > 0
        case .negativeAcknowledgement(let first, let count):
            statistics.negativeAcknowledgements += 1
            let firstIndex = SequenceNumber.unwrap(first, near: sender.base)
            let lost = sender.negativeAcknowledge(first: firstIndex, count: Int(count))
            statistics.packetsLost += lost
            if lost >= Self.overflowRun { pacer?.burstLost() }
            return lost > 0
        case .failure(let message):
            throw TransferError(.deviceRefused, step: .transfer, message)
        case .data, .ackRequest, .other:
            return false
        }
    }

    private func reportProgress() {
        statistics.packetsSent = sender.sentCount
        statistics.packetsResent = sender.resentCount
        onProgress(
            TransferProgress(
                bytesAcknowledged: bytesAcknowledged, totalBytes: source.count, packetsSent: sender.sentCount,
                packetsResent: sender.resentCount, packetsLost: statistics.packetsLost,
                elapsed: clock.now - (started ?? clock.now), window: window, interPacketDelay: delay))
    }
}
