/// The receiving half of the reliable transfer, as a pure state machine: which
/// packets arrived, what to acknowledge, which gaps to report.
///
/// Used by the device half of a protocol for `flash`/`push` and by the host for
/// `pull`, so both directions follow the same rules.
public struct ReceiverWindow: Sendable {
    public let packetCount: Int
    private var received: [Bool]
    /// Lowest packet not yet received: the cumulative acknowledgement point.
    public private(set) var nextExpected = 0
    /// Highest packet index seen so far in this session (−1 for none); a packet
    /// beyond `highestSeen + 1` reveals a gap, a lower one is a resend.
    public private(set) var highestSeen = -1
    public private(set) var receivedCount = 0
    public private(set) var duplicateCount = 0
    /// Packets received since the last acknowledgement was produced.
    public private(set) var sinceAcknowledgement = 0

    public init(packetCount: Int) {
        self.packetCount = packetCount
        received = Array(repeating: false, count: packetCount)
    }

    public var isComplete: Bool { receivedCount == packetCount }

    /// Marks packets already held (a resumed transfer).
    public mutating func markHeld(_ isHeld: (Int) -> Bool) {
        for index in 0..<packetCount where !received[index] && isHeld(index) {
            received[index] = true
            receivedCount += 1
        }
        advance()
    }

    /// A new session on the same transfer (after a reconnect): forget the order
    /// of the previous session, keep what was received.
    public mutating func restartSession() {
        highestSeen = nextExpected - 1
        sinceAcknowledgement = 0
    }

    public enum Receipt: Sendable, Equatable {
        /// A packet not seen before; store its payload. `gap` lists packets
        /// skipped over that should be reported at once (NACK).
        case new(index: Int, gap: Range<Int>?)
        /// Already held: drop it (but it still proves the sender is alive).
        case duplicate(index: Int)
        /// A sequence number that cannot belong to this transfer's window.
        case outOfWindow
    }

    /// Unwraps `sequence` against the window and records it.
    public mutating func receive(sequence: UInt16) -> Receipt {
        let index = SequenceNumber.unwrap(sequence, near: nextExpected)
        guard index >= 0, index < packetCount,
            index < nextExpected + 4 * TransferTuning.maximumWindow + 64
        else { return .outOfWindow }
        if received[index] {
            duplicateCount += 1
            return .duplicate(index: index)
        }
        received[index] = true
        receivedCount += 1
        sinceAcknowledgement += 1
        var gap: Range<Int>?
        if index > highestSeen + 1 {
            let first = max(highestSeen + 1, nextExpected)
            if first < index { gap = first..<index }
        }
        highestSeen = max(highestSeen, index)
        advance()
        return .new(index: index, gap: gap)
    }

    /// The acknowledgement to send now: the cumulative point and a bitmap of the
    /// packets after it (up to `bitmapBytes` × 8 of them).
    public mutating func acknowledgement(bitmapBytes: Int = 32) -> (nextExpected: UInt16, bitmap: [UInt8]) {
        sinceAcknowledgement = 0
        var bitmap: [UInt8] = []
        let start = nextExpected + 1
        let end = min(packetCount, start + bitmapBytes * 8, max(start, highestSeen + 1))
        if start < end {
            bitmap = Array(repeating: 0, count: (end - start + 7) / 8)
            for index in start..<end where received[index] {
                bitmap[(index - start) / 8] |= 1 << ((index - start) % 8)
            }
        }
        return (SequenceNumber.wrap(nextExpected), bitmap)
    }

    public func isReceived(_ index: Int) -> Bool { index >= 0 && index < packetCount && received[index] }

    private mutating func advance() {
        while nextExpected < packetCount && received[nextExpected] { nextExpected += 1 }
    }
}
