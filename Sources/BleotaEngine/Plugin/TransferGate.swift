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

    struct State {
        var holders = 0
        var waiters: [(id: UInt64, continuation: CheckedContinuation<Bool, Never>)] = []
        var nextID: UInt64 = 0
        /// Waits cancelled before they could queue.
        var cancelled: Set<UInt64> = []
    }
    private let state = Mutex(State())

    public init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Transfers holding a place now.
    public var holding: Int { state.withLock { $0.holders } }
    /// Updates waiting for a place.
    public var waiting: Int { state.withLock { $0.waiters.count } }
    /// Whether a wait now would queue.
    public var isFull: Bool { state.withLock { $0.holders >= capacity || !$0.waiters.isEmpty } }

    /// Waits for a place, in arrival order. False when the task was cancelled first (no place is held then).
    func acquire() async -> Bool {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        defer { _ = state.withLock { $0.cancelled.remove(id) } }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let immediate: Bool? = state.withLock { state in
                    if state.cancelled.contains(id) { return false }
                    if state.holders < capacity && state.waiters.isEmpty {
                        state.holders += 1
                        return true
                    }
                    state.waiters.append((id, continuation))
                    return nil
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                if let index = state.waiters.firstIndex(where: { $0.id == id }) { return state.waiters.remove(at: index).continuation }
                state.cancelled.insert(id)
                return nil
            }
            waiter?.resume(returning: false)
        }
    }

    /// Gives a place back; the longest waiter gets it.
    func release() {
        let next = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            if !state.waiters.isEmpty { return state.waiters.removeFirst().continuation }
            state.holders = max(0, state.holders - 1)
            return nil
        }
        next?.resume(returning: true)
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
    private let held = Mutex(false)
    private let onQueue: @Sendable () -> Void

    /// `onQueue` is called when a wait finds every place taken (for a live table's "queued").
    public init(gate: TransferGate, maximumWait: Duration? = nil, onQueue: @escaping @Sendable () -> Void = {}) {
        self.gate = gate
        self.maximumWait = maximumWait
        self.onQueue = onQueue
    }

    /// Whether this update holds a place now.
    public var isHeld: Bool { held.withLock { $0 } }

    /// Waits for a place unless one is held, at most ``maximumWait`` on `clock`. True when a place is
    /// held afterwards; false when the wait ran out or the task was cancelled (the caller goes on
    /// without one).
    @discardableResult
    public func wait(clock: any BleotaClock) async -> Bool {
        guard !isHeld else { return true }
        if gate.isFull { onQueue() }
        let acquired: Bool
        if let maximumWait {
            acquired = await withTaskGroup(of: Bool.self) { group in
                group.addTask { await self.gate.acquire() }
                group.addTask {
                    try? await clock.sleep(for: maximumWait)
                    return false
                }
                let first = await group.next() ?? false
                // Whichever ended first, the other is stopped; a place granted meanwhile still counts.
                group.cancelAll()
                var any = first
                while let result = await group.next() { any = any || result }
                return any
            }
        } else {
            acquired = await gate.acquire()
        }
        if acquired { held.withLock { $0 = true } }
        return acquired
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
