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
        var continuation: CheckedContinuation<Grant, Never>
    }

    struct State {
        var holders = 0
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        /// Waits cancelled before they could queue.
        var cancelled: Set<UInt64> = []
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
    /// Updates waiting for a place.
    public var waiting: Int { state.withLock { $0.waiters.count } }
    /// Whether a wait now would queue.
    public var isFull: Bool { state.withLock { $0.holders >= capacity || !$0.waiters.isEmpty } }
    /// Places free now that no one waits for.
    public var freePlaces: Int { state.withLock { $0.waiters.isEmpty ? max(0, capacity - $0.holders) : 0 } }
    /// Waiters that may be sent to another gate.
    public var movableWaiters: Int { state.withLock { $0.waiters.filter(\.movable).count } }

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

    /// Waits for a place, in arrival order.
    func acquire(movable: Bool = false) async -> Grant {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        defer { _ = state.withLock { $0.cancelled.remove(id) } }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Grant, Never>) in
                let immediate: Grant? = state.withLock { state in
                    if state.cancelled.contains(id) { return .cancelled }
                    if state.holders < capacity && state.waiters.isEmpty {
                        state.holders += 1
                        return .placed
                    }
                    state.waiters.append(Waiter(id: id, movable: movable, continuation: continuation))
                    return nil
                }
                if let immediate { continuation.resume(returning: immediate) }
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

    /// Gives a place back; the longest waiter gets it.
    func release() {
        let next = state.withLock { state -> CheckedContinuation<Grant, Never>? in
            if !state.waiters.isEmpty { return state.waiters.removeFirst().continuation }
            state.holders = max(0, state.holders - 1)
            return nil
        }
        if let next { next.resume(returning: .placed) } else { onPlaceFree() }
    }
}

/// One update's claim on a ``TransferGate``: waited for when the update enters
/// its transfer step (``OperationRecorder/enterTransfer()``), given back when it
/// leaves it, and in any case when the update ends. Waiting again after giving
/// it back (a protocol that sends several parts with reboots between) queues
/// again.
public final class TransferTurn: Sendable {
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

    /// `onQueue` is called when a wait finds every place taken (for a live table's "queued").
    public init(gate: TransferGate, maximumWait: Duration? = nil, movable: Bool = false, onQueue: @escaping @Sendable () -> Void = {}) {
        self.gate = gate
        self.maximumWait = maximumWait
        self.movable = movable
        self.onQueue = onQueue
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
        if gate.isFull { onQueue() }
        let grant: TransferGate.Grant
        let movable = self.movable
        if let maximumWait {
            grant = await withTaskGroup(of: TransferGate.Grant.self) { group in
                group.addTask { await self.gate.acquire(movable: movable) }
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
            grant = await gate.acquire(movable: movable)
        }
        switch grant {
        case .placed: held.withLock { $0 = true }
        case .withdrawn: withdrawn.withLock { $0 = true }
        case .cancelled: break
        }
        return grant == .placed
    }

    /// Gives the place back, if one is held (any number of calls).
    public func release() {
        let wasHeld = held.withLock { held in
            defer { held = false }
            return held
        }
        if wasHeld { gate.release() }
    }
}
