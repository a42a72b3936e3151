/// The sending half of the reliable transfer, as a pure state machine.
///
/// It decides which packet goes next and what an acknowledgement means; the
/// ``TransferEngine`` around it does the I/O. Keeping the decisions free of
/// I/O lets tests drive every loss pattern as a table.
///
/// Loss detection relies on the one property every BLE bearer has: packets are
/// delivered in order or not at all. So when the receiver reports packet *k*
/// received, every packet *transmitted before* *k*'s latest transmission and not
/// reported is lost, and only those are resent (selective repeat). Packets sent
/// after *k* are merely in flight, which is why transmissions are numbered.
public struct SelectiveRepeatSender: Sendable {
    enum State: UInt8 { case unsent, inFlight, lost, acknowledged }

    public let packetCount: Int
    private var states: [State]
    /// Transmission number of each packet's latest send; orders sends in time.
    private var lastTransmission: [UInt32]
    private var transmissions: UInt32 = 0
    private var nextUnsent = 0
    /// Lowest packet not yet acknowledged (the receiver's cumulative point).
    public private(set) var base = 0
    private var lostQueue: [Int] = []
    public private(set) var inFlight = 0
    public private(set) var acknowledgedCount = 0

    /// The longest run of adjacent packets the latest acknowledgement showed lost:
    /// a receive queue that overflows drops the tail of a burst, radio noise
    /// drops packets here and there.
    public private(set) var longestLossRun = 0

    public private(set) var sentCount = 0
    public private(set) var resentCount = 0
    public private(set) var lostCount = 0

    public init(packetCount: Int) {
        self.packetCount = packetCount
        states = Array(repeating: .unsent, count: packetCount)
        lastTransmission = Array(repeating: 0, count: packetCount)
    }

    public var isComplete: Bool { acknowledgedCount == packetCount }
    /// True when every packet has been sent at least once and none waits to be resent.
    public var nothingToSend: Bool { nextUnsent >= packetCount && lostQueue.isEmpty }

    /// Marks packets the receiver already holds (from a resume) as acknowledged.
    public mutating func markHeld(_ isHeld: (Int) -> Bool) {
        for index in 0..<packetCount where states[index] != .acknowledged && isHeld(index) {
            acknowledge(index)
        }
        advanceBase()
        advanceNextUnsent()
    }

    /// After a reconnect: nothing is in flight any more; everything not
    /// acknowledged will be sent again, in order.
    public mutating func forgetInFlight() {
        for index in 0..<packetCount where states[index] == .inFlight || states[index] == .lost {
            states[index] = .unsent
        }
        lostQueue.removeAll()
        inFlight = 0
        nextUnsent = base
        advanceNextUnsent()
    }

    /// The next packet to transmit if the window allows one, marking it in flight.
    /// `newBelow` holds back packets never sent from that index on (resends still go).
    public mutating func nextPacket(window: Int, newBelow: Int = .max) -> Int? {
        while let lost = lostQueue.first {
            lostQueue.removeFirst()
            guard states[lost] == .lost else { continue }
            guard inFlight < window else {
                lostQueue.insert(lost, at: 0)
                return nil
            }
            transmit(lost)
            resentCount += 1
            return lost
        }
        guard inFlight < window, nextUnsent < packetCount, nextUnsent < newBelow else { return nil }
        // Never run more than the window ahead of the receiver's cumulative point,
        // or its sequence numbers could become ambiguous.
        guard nextUnsent - base < max(window, 1) * 4 + 64 else { return nil }
        let index = nextUnsent
        transmit(index)
        nextUnsent += 1
        advanceNextUnsent()
        return index
    }

    private mutating func transmit(_ index: Int) {
        transmissions &+= 1
        if states[index] == .unsent && lastTransmission[index] != 0 { resentCount += 1 }
        lastTransmission[index] = transmissions
        states[index] = .inFlight
        inFlight += 1
        sentCount += 1
    }

    /// What an acknowledgement changed.
    public struct AckOutcome: Sendable, Equatable {
        public var newlyAcknowledged = 0
        public var newlyLost = 0
        /// The newly acknowledged packet sent most recently (for round-trip samples).
        public var newest: Int?

        public init(newlyAcknowledged: Int = 0, newlyLost: Int = 0, newest: Int? = nil) {
            self.newlyAcknowledged = newlyAcknowledged
            self.newlyLost = newlyLost
            self.newest = newest
        }
    }

    /// Applies a cumulative + selective acknowledgement. `nextExpected` and the
    /// bitmap's packets are absolute indexes (the engine unwraps them).
    public mutating func acknowledge(nextExpected: Int, received: [Int]) -> AckOutcome {
        var outcome = AckOutcome()
        let before = acknowledgedCount
        let cumulative = min(max(nextExpected, base), packetCount)
        var newest: UInt32 = 0
        for index in base..<cumulative where states[index] != .acknowledged {
            if lastTransmission[index] > newest {
                newest = lastTransmission[index]
                outcome.newest = index
            }
            acknowledge(index)
        }
        for index in received where index >= 0 && index < packetCount && states[index] != .acknowledged {
            if lastTransmission[index] > newest {
                newest = lastTransmission[index]
                outcome.newest = index
            }
            acknowledge(index)
        }
        advanceBase()
        // A receiver may acknowledge packets not sent yet (or not since a
        // reconnect): they need not be sent, and nothing unsent lies below base.
        advanceNextUnsent()
        // In-order delivery: anything transmitted before the newest packet this
        // acknowledgement covers, yet not covered, was lost.
        longestLossRun = 0
        if newest > 0 {
            var index = base
            var run = 0
            let limit = min(packetCount, base + 4 * TransferTuning.maximumWindow + 64)
            while index < limit {
                if states[index] == .inFlight && lastTransmission[index] < newest {
                    markLost(index)
                    outcome.newlyLost += 1
                    run += 1
                    longestLossRun = max(longestLossRun, run)
                } else if states[index] != .lost {
                    run = 0
                }
                index += 1
            }
        }
        outcome.newlyAcknowledged = acknowledgedCount - before
        return outcome
    }

    /// The receiver says `count` packets from `first` are missing; resend the
    /// ones still in flight (not ones already queued or acknowledged).
    public mutating func negativeAcknowledge(first: Int, count: Int) -> Int {
        var lost = 0
        let upper = min(packetCount, first + max(0, min(count, 4 * TransferTuning.maximumWindow)))
        guard first < upper, first >= 0 else { return 0 }
        for index in first..<upper where states[index] == .inFlight {
            markLost(index)
            lost += 1
        }
        return lost
    }

    /// Whether any packet is known lost and waits to be sent again.
    public var hasLost: Bool { lostQueue.contains { states[$0] == .lost } }

    /// Transmissions so far; mark a moment to compare later sends against.
    public var transmissionCount: UInt32 { transmissions }

    /// The receiver answered a request for acknowledgement sent after
    /// transmission `mark`: with in-order delivery it has seen everything sent
    /// up to then, so packets still in flight from before the mark are lost.
    public mutating func markLost(sentUpTo mark: UInt32) -> Int {
        var lost = 0
        for index in base..<min(packetCount, nextUnsent) where states[index] == .inFlight && lastTransmission[index] <= mark {
            markLost(index)
            lost += 1
        }
        return lost
    }

    /// An acknowledgement timeout: everything in flight is presumed lost.
    public mutating func timeoutAllInFlight() -> Int {
        var lost = 0
        for index in base..<min(packetCount, nextUnsent) where states[index] == .inFlight {
            markLost(index)
            lost += 1
        }
        return lost
    }

    private mutating func markLost(_ index: Int) {
        states[index] = .lost
        inFlight -= 1
        lostCount += 1
        lostQueue.append(index)
    }

    private mutating func acknowledge(_ index: Int) {
        if states[index] == .inFlight { inFlight -= 1 }
        states[index] = .acknowledged
        acknowledgedCount += 1
    }

    private mutating func advanceBase() {
        while base < packetCount && states[base] == .acknowledged { base += 1 }
    }

    private mutating func advanceNextUnsent() {
        while nextUnsent < packetCount && states[nextUnsent] != .unsent { nextUnsent += 1 }
    }

    /// The transmission number of packet `index`'s latest send (0: never sent).
    public func latestTransmission(of index: Int) -> UInt32 { lastTransmission[index] }

    /// Whether packet `index` has been acknowledged.
    public func isAcknowledged(_ index: Int) -> Bool { states[index] == .acknowledged }
}
