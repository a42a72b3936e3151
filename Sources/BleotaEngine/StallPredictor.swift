/// Learns where in the stream a receiver stops to erase flash, so the sender
/// can keep its flight within the receiver's buffer across each erase.
///
/// A device that writes as it receives erases a flash page when data first
/// reaches it; for tens of milliseconds it takes nothing from its receive
/// queue, and every packet that arrives meanwhile beyond what the queue holds
/// is dropped. The stalls are periodic in the stream: flash pages are a power
/// of two bytes (256 B to 128 KiB) and the device erases the next one when a
/// packet first touches it. So the sender watches acknowledgements for gaps far
/// longer than its round trip, notes which packet was the first unacknowledged
/// one at each gap, and looks for the largest power of two that puts a page
/// start inside every such packet's acknowledgement interval. Once one fits two
/// or more stalls, the packet holding each next page start is known in advance.
///
/// Nordic's DFU libraries reach the same end with a fixed delay after each 4 KiB
/// object is created; this learns the page from the device instead.
public struct StallPredictor: Sendable {
    /// Payload bytes per packet (packet *i* carries bytes i·size ..< (i+1)·size).
    public let packetSize: Int
    /// The receiver acknowledges every this many packets: how far the first
    /// unacknowledged packet at a stall may sit before the one that caused it.
    public private(set) var ackInterval: Int
    /// Stream offsets where stalls began: [first unacknowledged packet's start,
    /// that plus an acknowledgement interval of packets).
    private var stalls: [Range<Int>] = []
    /// The page size that fits every stall seen; nil until two stalls agree.
    public private(set) var pageSize: Int?
    private var durations: [Duration] = []

    /// Flash pages are powers of two from 256 bytes to 128 KiB.
    static let pageSizes: [Int] = (8...17).reversed().map { 1 << $0 }
    /// A stall is an acknowledgement gap this many times the shortest round trip.
    static let stallFactor = 3
    /// A page must be this many times a stall's uncertainty (an acknowledgement
    /// interval of packets) for a chance fit to be unlikely: 1 in 4 per stall.
    static let pageToUncertainty = 4
    /// Stalls remembered: enough to reject a period that fits by chance.
    static let remembered = 12

    public init(packetSize: Int, ackInterval: Int) {
        self.packetSize = max(1, packetSize)
        self.ackInterval = max(1, ackInterval)
    }

    /// The usual time between acknowledgements (smoothed, stalls excluded).
    public private(set) var usualGap: Duration?

    /// The receiver now acknowledges every `interval` packets: the usual gap
    /// between acknowledgements scales with it, so the longer gaps that follow
    /// a raise are not taken for stalls.
    public mutating func ackIntervalChanged(to interval: Int) {
        let interval = max(1, interval)
        guard interval != ackInterval else { return }
        usualGap = usualGap.map { $0 * (Double(interval) / Double(ackInterval)) }
        ackInterval = interval
    }

    /// Whether a gap of `gap` between acknowledgements, with data in flight, is
    /// a stall: several times both the shortest round trip and the usual gap
    /// (a receiver that acknowledges every 16 packets is not stalling between them).
    public func isStall(gap: Duration, shortestRoundTrip: Duration) -> Bool {
        gap > max(shortestRoundTrip * Self.stallFactor, (usualGap ?? .zero) * Self.stallFactor, .milliseconds(30))
    }

    /// An acknowledgement came `gap` after the previous one, with data in flight;
    /// returns whether that was a stall, which is then recorded.
    public mutating func acknowledgement(after gap: Duration, shortestRoundTrip: Duration, firstUnacknowledged: Int) -> Bool {
        guard isStall(gap: gap, shortestRoundTrip: shortestRoundTrip) else {
            usualGap = usualGap.map { $0 * 0.875 + gap * 0.125 } ?? gap
            return false
        }
        observeStall(firstUnacknowledged: firstUnacknowledged, gap: gap)
        return true
    }

    /// An acknowledgement came `gap` after the previous one, while packet
    /// `firstUnacknowledged` was the lowest not yet acknowledged.
    public mutating func observeStall(firstUnacknowledged: Int, gap: Duration) {
        guard firstUnacknowledged > 0 else { return }
        durations.append(gap)
        if durations.count > Self.remembered { durations.removeFirst(durations.count - Self.remembered) }
        let start = firstUnacknowledged * packetSize
        stalls.append(start..<(start + ackInterval * packetSize))
        if stalls.count > Self.remembered { stalls.removeFirst(stalls.count - Self.remembered) }
        // A page not much wider than a stall's uncertainty fits anything; the largest page
        // that fits all but an occasional stray stall (a lost acknowledgement,
        // a radio fade) is the device's.
        let width = ackInterval * packetSize
        pageSize = Self.pageSizes.first { page in
            guard page >= width * Self.pageToUncertainty else { return false }
            var pages = Set<Int>()
            var misses = 0
            for stall in stalls {
                // The first page start at or after the stall's lower bound must fall inside it.
                let boundary = (stall.lowerBound + page - 1) / page * page
                if stall.contains(boundary) { pages.insert(boundary) } else { misses += 1 }
            }
            return pages.count >= 2 && misses <= stalls.count / 4
        }
    }

    /// How long a stall usually lasts: the median of those remembered (a
    /// blackout mistaken for a stall must not stretch every later wait).
    public var typicalStall: Duration {
        guard !durations.isEmpty else { return .zero }
        return durations.sorted()[durations.count / 2]
    }

    /// The packet that will make the receiver stall next, at or after `packet`; nil while no period is known.
    public func nextStall(atOrAfter packet: Int) -> Int? {
        guard let pageSize else { return nil }
        let start = packet * packetSize
        let boundary = (start + pageSize - 1) / pageSize * pageSize
        return boundary / packetSize
    }
}
