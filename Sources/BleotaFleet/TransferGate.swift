import BleotaEngine
import BleotaLink
import Synchronization

/// How many transfers may run at once among updates that share one radio (a
/// fleet's adapter), while the others connect, reboot, verify and confirm
/// beside them.
///
/// Why a gate on the transfer step rather than on whole updates: an update
/// spends a good part of its time with its link idle (connecting, a reboot into
/// the bootloader or after activation, the confirmation). Limiting whole
/// updates leaves the radio idle for those parts; limiting transfers lets the
/// next device get ready while others transfer, and keeps the number of busy
/// links at the one that fills the radio best (`protocols/link-model.md`,
/// "Several connections on one adapter"). Places are given first come, first
/// served.
public final class TransferGate: Sendable {
    /// Transfers allowed at once.
    public let capacity: Int

    /// How a wait for a place ended.
    public enum Grant: Sendable, Hashable {
        /// A place is held.
        case placed
        /// The waiting task was cancelled (no place is held).
        case cancelled
        /// The wait was ended by ``withdrawNewestWaiter()``: a place is free
        /// elsewhere, and the update should start again there (no place is held).
        case withdrawn
    }

    struct Waiter {
        var id: UInt64
        var movable: Bool
        var holder: Holder?
        var continuation: CheckedContinuation<Grant, Never>
    }

    /// Who holds a place, told whenever what ``hasLastTransfer`` looks at changes (the last transfer on
    /// the radio changes its link's interval: ``TransferTurn``).
    struct Holder {
        var key: ObjectIdentifier
        var onShareChange: @Sendable () -> Void
    }

    struct State {
        var holders = 0
        /// The holders that asked to be told (``TransferTurn``s); anonymous places count in ``holders`` only.
        var known: [ObjectIdentifier: Holder] = [:]
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        /// Waits cancelled before they could queue.
        var cancelled: Set<UInt64> = []
        /// Turns made for this gate that have not yet held a place nor ended: transfers still to come.
        var expected = 0
        /// Whether updates not yet started may still come here (a fleet with devices left to start).
        var openToNewcomers = true
    }
    private let state = Mutex(State())
    private let onPlaceFree: @Sendable () -> Void

    /// `onPlaceFree` is called (outside the gate's lock) when a place is given back and no
    /// one was waiting for it: a fleet then looks for a device queued at a busier adapter.
    public init(capacity: Int, onPlaceFree: @escaping @Sendable () -> Void = {}) {
        self.capacity = max(1, capacity)
        self.onPlaceFree = onPlaceFree
    }

    /// Transfers holding a place now.
    public var holding: Int { state.withLock { $0.holders } }
    /// Whether one transfer holds a place and will keep the radio to itself: no other holds or waits
    /// for one, no update already under way here is still to transfer, and no new one may come.
    public var hasLastTransfer: Bool {
        state.withLock { $0.holders == 1 && $0.waiters.isEmpty && $0.expected == 0 && !$0.openToNewcomers }
    }

    /// Places no transfer is on or on its way to: the capacity less the transfers placed and the
    /// turns made whose device has not reached its transfer yet (it is connecting, getting ready,
    /// or waiting here). A campaign worker claims devices for these first.
    public var unpromisedPlaces: Int { state.withLock { max(0, capacity - $0.holders - $0.expected) } }

    /// Whether every place holds a transfer: a device that gets ready now on another connection
    /// is ready when one ends.
    public var allPlacesTransferring: Bool { state.withLock { $0.holders >= capacity } }

    /// Updates waiting for a place.
    public var waiting: Int { state.withLock { $0.waiters.count } }
    /// Whether a wait now would queue.
    public var isFull: Bool { state.withLock { $0.holders >= capacity || !$0.waiters.isEmpty } }
    /// Places free now that no one waits for.
    public var freePlaces: Int { state.withLock { $0.waiters.isEmpty ? max(0, capacity - $0.holders) : 0 } }
    /// Waiters that may be sent to another gate.
    public var movableWaiters: Int { state.withLock { $0.waiters.filter(\.movable).count } }

    /// Says whether updates not yet started may still come to this gate; a fleet closes it when it has
    /// no device left to start. Open until told otherwise.
    public func setOpenToNewcomers(_ open: Bool) {
        changeTellingHolders { state in
            guard state.openToNewcomers != open else { return false }
            state.openToNewcomers = open
            return true
        }
    }

    /// A turn was made for this gate: its transfer is to come.
    func expectArrival() {
        changeTellingHolders { state in
            state.expected += 1
            return true
        }
    }

    /// A turn made for this gate held its first place, or ended without one.
    func arrivalEnded() {
        changeTellingHolders { state in
            state.expected = max(0, state.expected - 1)
            return true
        }
    }

    /// Applies `change` and, when it says it changed something, tells the known holders.
    private func changeTellingHolders(_ change: (inout State) -> Bool) {
        tell(state.withLock { state in change(&state) ? Array(state.known.values) : [] })
    }

    /// Ends the wait of the newest movable waiter with ``Grant/withdrawn``; false when there is none.
    /// The newest, because the oldest gets this gate's next place soonest.
    @discardableResult
    public func withdrawNewestWaiter() -> Bool {
        let waiter = state.withLock { state -> CheckedContinuation<Grant, Never>? in
            guard let index = state.waiters.lastIndex(where: \.movable) else { return nil }
            return state.waiters.remove(at: index).continuation
        }
        waiter?.resume(returning: .withdrawn)
        return waiter != nil
    }

    /// Tells known holders that what ``hasLastTransfer`` looks at changed (outside the lock; each looks
    /// at the gate again, so calls that cross still leave each with the gate's latest state).
    private func tell(_ holders: [Holder]) {
        for holder in holders { holder.onShareChange() }
    }

    /// Waits for a place, in arrival order. `holder`, when given, is told of every change that may
    /// make it the last transfer or end that, while it holds the place, until ``release(_:)`` with its key.
    /// `onQueued` is called when the caller finds every place taken and waits (decided under the
    /// gate's lock, so two callers arriving together cannot both miss it).
    func acquire(movable: Bool = false, holder: Holder? = nil, onQueued: @Sendable () -> Void = {}) async -> Grant {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        defer { _ = state.withLock { $0.cancelled.remove(id) } }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Grant, Never>) in
                let (immediate, told): (Grant?, [Holder]) = state.withLock { state in
                    if state.cancelled.contains(id) { return (.cancelled, []) }
                    if state.holders < capacity && state.waiters.isEmpty {
                        state.holders += 1
                        if let holder { state.known[holder.key] = holder }
                        return (.placed, Array(state.known.values))
                    }
                    state.waiters.append(Waiter(id: id, movable: movable, holder: holder, continuation: continuation))
                    return (nil, [])
                }
                tell(told)
                if let immediate { continuation.resume(returning: immediate) } else { onQueued() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Grant, Never>? in
                if let index = state.waiters.firstIndex(where: { $0.id == id }) { return state.waiters.remove(at: index).continuation }
                state.cancelled.insert(id)
                return nil
            }
            waiter?.resume(returning: .cancelled)
        }
    }

    /// Gives a place back (that of the holder with `key`, when it was given one); the longest waiter gets it.
    func release(_ key: ObjectIdentifier? = nil) {
        let (next, told) = state.withLock { state -> (CheckedContinuation<Grant, Never>?, [Holder]) in
            let leaving = key.flatMap { state.known.removeValue(forKey: $0) }
            if !state.waiters.isEmpty {
                let waiter = state.waiters.removeFirst()
                if let holder = waiter.holder { state.known[holder.key] = holder }
                // The same number of holders: only the one leaving and the one arriving need to look.
                return (waiter.continuation, [leaving, waiter.holder].compactMap { $0 })
            }
            state.holders = max(0, state.holders - 1)
            return (nil, Array(state.known.values) + [leaving].compactMap { $0 })
        }
        tell(told)
        if let next { next.resume(returning: .placed) } else { onPlaceFree() }
    }
}

/// One update's claim on a ``TransferGate``, the fleet's ``/BleotaEngine/TransferTurn``: waited
/// for when the update enters its transfer step (``/BleotaEngine/OperationRecorder/enterTransfer(closing:)``),
/// given back when it leaves it, and in any case when the update ends. Waiting again after giving
/// it back (a protocol that sends several parts with reboots between) queues again.
public final class GatedTransferTurn: TransferTurn {
    public let gate: TransferGate
    /// The longest a device waits, connected and idle, before it transfers without a place (over
    /// the gate's limit): a bootloader may give up on an idle connection (Nordic's Secure DFU
    /// bootloader resets after 120 s by default), and one transfer too many costs less than a
    /// device that must start again. Nil waits as long as it takes.
    public let maximumWait: Duration?
    /// Whether ``TransferGate/withdrawNewestWaiter()`` may end this turn's wait (a fleet
    /// device not tied to its adapter).
    public let movable: Bool
    private let held = Mutex(false)
    private let withdrawn = Mutex(false)
    private let onQueue: @Sendable () -> Void
    /// Whether the last transfer on the radio asks for the shortest connection interval.
    public let shortensAloneLinks: Bool
    /// The update's newest link that can change its interval, and the interval last asked of it.
    private let radioLink = Mutex<(link: (any ConnectionIntervalControl)?, asked: Duration?)>((nil, nil))
    /// Whether the gate still counts this turn's transfer as one to come.
    private let expected = Mutex(true)

    /// `onQueue` is called when a wait finds every place taken and queues (for a live table's
    /// "queued"; the gate decides it as it queues the wait, so devices starting together are each told).
    /// `shortensAloneLinks`: while this turn's transfer is the last on its gate
    /// (``TransferGate/hasLastTransfer``), its link (a ``/BleotaLink/ConnectionIntervalControl``; see
    /// ``adopt(_:)``) is asked for ``/BleotaLink/LEConnectionInterval/shortest``, and for its opening
    /// interval again when that ends (another transfer takes or waits for a place, a new turn is made,
    /// the gate reopens to newcomers) or this one gives its place back.
    public init(
        gate: TransferGate, maximumWait: Duration? = nil, movable: Bool = false, shortensAloneLinks: Bool = true,
        onQueue: @escaping @Sendable () -> Void = {}
    ) {
        self.gate = gate
        self.maximumWait = maximumWait
        self.movable = movable
        self.shortensAloneLinks = shortensAloneLinks
        self.onQueue = onQueue
        gate.expectArrival()
    }

    /// Tells the gate this turn's transfer has come (or will not), once.
    private func arrived() {
        if expected.withLock({ was in
            defer { was = false }
            return was
        }) {
            gate.arrivalEnded()
        }
    }

    /// Takes `link` as the update's link to the device (the newest replaces any earlier: a device has
    /// one connection at a time). Links that cannot change their interval are ignored. A
    /// ``/BleotaEngine/HostContext`` with a turn does this for every link its connector opens.
    public func adopt(_ link: any Link) {
        guard shortensAloneLinks, let link = link as? any ConnectionIntervalControl else { return }
        radioLink.withLock { $0 = (link, nil) }
        shareChanged()
    }

    /// The interval the adopted link should have now: the shortest while this turn's transfer is the
    /// gate's last, else the one it opened with.
    private func wantedInterval(for link: any ConnectionIntervalControl) -> Duration {
        isHeld && gate.hasLastTransfer ? LEConnectionInterval.shortest : link.openingConnectionInterval
    }

    /// Looks at the gate and asks the link for the interval that fits, when it differs from the last
    /// asked (the first time: from the one in force).
    private func shareChanged() {
        radioLink.withLock { current in
            guard let link = current.link else { return }
            let wanted = wantedInterval(for: link)
            guard wanted != (current.asked ?? link.connectionInterval) else { return }
            current.asked = wanted
            link.requestConnectionInterval(wanted)
        }
    }

    private var holder: TransferGate.Holder {
        TransferGate.Holder(key: ObjectIdentifier(self)) { [weak self] in self?.shareChanged() }
    }

    /// Whether this update holds a place now.
    public var isHeld: Bool { held.withLock { $0 } }
    /// Whether the last wait was withdrawn: the update should end and start again on another adapter.
    public var wasWithdrawn: Bool { withdrawn.withLock { $0 } }

    /// Waits for a place unless one is held, at most ``maximumWait`` on `clock`. True when a place is
    /// held afterwards; false when the wait ran out or the task was cancelled (the caller goes on
    /// without one).
    @discardableResult
    public func wait(clock: any BleotaClock) async -> Bool {
        guard !isHeld else { return true }
        withdrawn.withLock { $0 = false }
        let grant: TransferGate.Grant
        let movable = self.movable
        let onQueue = self.onQueue
        if let maximumWait {
            grant = await withTaskGroup(of: TransferGate.Grant.self) { group in
                group.addTask { await self.gate.acquire(movable: movable, holder: self.holder, onQueued: onQueue) }
                group.addTask {
                    try? await clock.sleep(for: maximumWait)
                    return .cancelled
                }
                let first = await group.next() ?? .cancelled
                // Whichever ended first, the other is stopped; a place granted meanwhile still counts.
                group.cancelAll()
                var grants = [first]
                while let result = await group.next() { grants.append(result) }
                return grants.contains(.placed) ? .placed : grants.contains(.withdrawn) ? .withdrawn : .cancelled
            }
        } else {
            grant = await gate.acquire(movable: movable, holder: holder, onQueued: onQueue)
        }
        switch grant {
        case .placed:
            held.withLock { $0 = true }
            arrived()
            shareChanged()
        case .withdrawn: withdrawn.withLock { $0 = true }
        case .cancelled: break
        }
        return grant == .placed
    }

    /// Gives the place back, if one is held (any number of calls). A fleet calls it when the update
    /// ends, which also tells the gate that this turn's transfer will not come if it never did.
    public func release() {
        defer { arrived() }
        let wasHeld = held.withLock { held in
            defer { held = false }
            return held
        }
        if wasHeld {
            gate.release(ObjectIdentifier(self))
            shareChanged()
        }
    }
}
