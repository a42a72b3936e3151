import BleotaLink
import Synchronization

/// A clock that moves only when a test steps it, and then only as far as its next sleeper's
/// deadline, for code whose other half runs in real time (a real database).
///
/// ``ManualClock`` ends every sleep at once; ``SimulationRuntime`` moves time when every task
/// is idle, which a task waiting on a database query looks like. Neither suits a campaign
/// worker: its leases are kept in the database's time, and time that jumps while a query is in
/// flight expires them under the worker. This clock moves when the test calls ``step()``: that
/// waits until some task sleeps on the clock (the worker between its rounds), then moves to the
/// earliest sleeper's deadline and wakes it, and tells `onAdvance` how far it moved (the
/// database's clock moves with it). A sleeper registers only between rounds, so time never moves
/// further than one round's sleep while a round is in flight.
public final class SteppedClock: BleotaClock, Sendable {
    private struct Sleeper {
        var deadline: Duration
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Duration = .zero
        var sleepers: [UInt64: Sleeper] = [:]
        var nextID: UInt64 = 0
        /// Sleeps cancelled before they registered.
        var cancelled: Set<UInt64> = []
        /// A ``step()`` waiting for a sleeper to register.
        var stepper: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())
    private let onAdvance: @Sendable (Duration) -> Void

    public init(onAdvance: @escaping @Sendable (Duration) -> Void = { _ in }) {
        self.onAdvance = onAdvance
    }

    public var now: Duration { state.withLock { $0.now } }

    public func sleep(until deadline: Duration) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Registration { case due, cancelled, waiting(CheckedContinuation<Void, Never>?) }
                let registration = state.withLock { state -> Registration in
                    if state.cancelled.remove(id) != nil { return .cancelled }
                    if deadline <= state.now { return .due }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    defer { state.stepper = nil }
                    return .waiting(state.stepper)
                }
                switch registration {
                case .due: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .waiting(let stepper): stepper?.resume()
                }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let sleeper = state.sleepers.removeValue(forKey: id) else {
                    state.cancelled.insert(id)
                    return nil
                }
                return sleeper
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Waits for a sleeper, then moves to the earliest deadline and wakes every sleeper due by
    /// then. Returns how far the clock moved. One ``step()`` at a time.
    /// A cancelled step returns at once, moving nothing.
    @discardableResult
    public func step() async -> Duration {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { state -> Bool in
                    guard state.sleepers.isEmpty, !Task.isCancelled else { return true }
                    state.stepper = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            let stepper = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.stepper = nil }
                return state.stepper
            }
            stepper?.resume()
        }
        if Task.isCancelled { return .zero }
        let (moved, due) = state.withLock { state -> (Duration, [Sleeper]) in
            guard let earliest = state.sleepers.values.map(\.deadline).min() else { return (.zero, []) }
            let moved = max(.zero, earliest - state.now)
            state.now = max(state.now, earliest)
            let due = state.sleepers.filter { $0.value.deadline <= state.now }
            for id in due.keys { state.sleepers[id] = nil }
            return (moved, Array(due.values))
        }
        if moved > .zero { onAdvance(moved) }
        for sleeper in due { sleeper.continuation.resume() }
        return moved
    }
}

/// Waits until a condition over shared state holds, woken by whoever changes that state: a test
/// waits on what happened, not on time.
public final class AsyncCondition: Sendable {
    private struct Waiter {
        var holds: @Sendable () -> Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    private let waiters = Mutex<[Waiter]>([])

    public init() {}

    /// Returns once `holds` is true: at once, or at the ``changed()`` after which it is.
    public func wait(until holds: @escaping @Sendable () -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let already = waiters.withLock { waiters -> Bool in
                if holds() { return true }
                waiters.append(Waiter(holds: holds, continuation: continuation))
                return false
            }
            if already { continuation.resume() }
        }
    }

    /// The state changed: every waiter whose condition holds now goes on.
    public func changed() {
        let ready = waiters.withLock { waiters -> [Waiter] in
            // One look at each condition: it is resumed exactly when it is taken out.
            var ready: [Waiter] = []
            var still: [Waiter] = []
            for waiter in waiters {
                if waiter.holds() { ready.append(waiter) } else { still.append(waiter) }
            }
            waiters = still
            return ready
        }
        for waiter in ready { waiter.continuation.resume() }
    }
}
