/// The sending half of a transfer whose receiver acknowledges cumulatively, as a pure state
/// machine: go-back-N.
///
/// ``SelectiveRepeatSender`` serves a wire that says which packets arrived; many wires say only
/// how far the receiver got — Espressif's sector acknowledgements, a described protocol's
/// `next-index` — and a receiver that writes only what comes next in order
/// drops whatever follows a gap. On such a wire the sender keeps up to a window of units
/// (sectors, packets) beyond the receiver's point, and after a gap or a silence it goes back and
/// sends again from where the receiver is. The decisions are this value's; the protocol's host
/// frames each unit, reads each acknowledgement and does the I/O, so a host can differ in what
/// a unit is and what an answer says while the going back is written once, and tested as a table.
/// A wire whose requests differ in size and are answered one by one with an offset (SMP's) is
/// ``GoBackRangeSender``'s.
///
/// Units are numbered from 0 to `unitCount`. The window may change between sends (a host that
/// grows its flight on acknowledgements, halves it on loss).
public struct GoBackSender: Sendable, Hashable {
    /// Units in the whole transfer.
    public let unitCount: Int
    /// The receiver's point: the first unit not acknowledged.
    public private(set) var base: Int
    /// The next unit to send.
    public private(set) var next: Int
    /// One past the furthest unit sent so far: a unit below it is sent again.
    public private(set) var highest: Int
    /// Units that may be out beyond ``base``.
    public var window: Int
    /// Waits in a row that brought no acknowledgement.
    public private(set) var silentWaits = 0

    /// Units sent, and of those sent again.
    public private(set) var sentCount = 0
    public private(set) var resentCount = 0
    /// Units that had been sent and were sent again after a gap the receiver reported.
    public private(set) var lostCount = 0

    /// `start`: units the receiver already holds (a resumed transfer).
    public init(unitCount: Int, start: Int = 0, window: Int) {
        self.unitCount = max(0, unitCount)
        base = min(max(0, start), self.unitCount)
        next = base
        highest = base
        self.window = window
    }

    /// Every unit acknowledged.
    public var isComplete: Bool { base >= unitCount }
    /// Every unit has been sent at least once (after which the receiver may have everything and
    /// act on it, even if its acknowledgement is lost).
    public var sentEveryUnit: Bool { highest >= unitCount }

    /// The unit to send now, or nil when the window is full or everything is out.
    public var unitToSend: Int? { next < min(unitCount, base + max(1, window)) ? next : nil }

    /// ``unitToSend`` went out; returns whether it had been sent before.
    @discardableResult
    public mutating func sent() -> Bool {
        let resend = next < highest
        sentCount += 1
        if resend { resentCount += 1 }
        next += 1
        highest = max(highest, next)
        return resend
    }

    /// The receiver holds every unit before `point`. Returns whether that moved its point on;
    /// an acknowledgement behind the point, or past the last unit, changes nothing.
    @discardableResult
    public mutating func acknowledged(before point: Int) -> Bool {
        silentWaits = 0
        guard point > base, point <= unitCount else { return false }
        base = point
        next = max(next, base)
        highest = max(highest, base)
        return true
    }

    /// An answer came that acknowledges nothing (it still shows the receiver is there).
    public mutating func answered() { silentWaits = 0 }

    /// The receiver reported that it misses `unit` and what follows: sending goes back there.
    /// Returns the units in flight that are now counted lost, or nil when the report is stale
    /// (a unit already acknowledged, or one not out now).
    @discardableResult
    public mutating func missing(from unit: Int) -> Int? {
        silentWaits = 0
        guard unit >= base, unit < next else { return nil }
        let lost = next - unit
        lostCount += lost
        next = unit
        return lost
    }

    /// A wait brought nothing: sending goes back to the receiver's point. Returns the waits in a
    /// row now silent, for the host's limit.
    @discardableResult
    public mutating func waitedInVain() -> Int {
        silentWaits += 1
        next = base
        return silentWaits
    }

    /// After a reconnection: the receiver holds every unit before `point` and nothing is in flight.
    public mutating func resume(at point: Int) {
        base = min(max(0, point), unitCount)
        next = base
        silentWaits = 0
    }
}
