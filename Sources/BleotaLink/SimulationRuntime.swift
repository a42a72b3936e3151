import Foundation
import Synchronization

/// Runs async code as a deterministic discrete-event simulation.
///
/// The engine, the ATT bearer and the protocols wait on a ``BleotaClock``; run
/// on this runtime's ``SimulationClock`` they are the real `async` code,
/// unchanged, on virtual time. It lives in `BleotaLink`, beside the clock seam,
/// so any layer's tests (ATT, engine) can use it without the simulator;
/// `BleotaSimulator` builds its BLE link model and simulated devices on it.
///
/// Determinism comes from this runtime: a `TaskExecutor` (SE-0417) that runs
/// every job of the simulation — child tasks, default actors, continuations —
/// on one dedicated thread in FIFO order. Time is virtual: when no job is
/// runnable, the clock jumps to the earliest timer (ties in creation order).
/// So a run depends only on its inputs and seed, never on the machine's load,
/// and a 30-second BLE transfer takes milliseconds of wall time.
public final class SimulationRuntime: TaskExecutor, @unchecked Sendable {
    private struct Timer {
        var deadline: Duration
        var sequence: UInt64
        var id: UInt64
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var jobs: [UnownedJob] = []
        var head = 0
        var timers: [Timer] = []
        var sequence: UInt64 = 0
        var now: Duration = .zero
        var finished = false
    }

    private let condition = NSCondition()
    private var state = State()
    /// Stops a runaway simulation (a bug, or a device that never finishes).
    public let maximumVirtualTime: Duration
    public private(set) var jobsRun = 0

    public init(maximumVirtualTime: Duration = .seconds(24 * 3600)) {
        self.maximumVirtualTime = maximumVirtualTime
    }

    /// The virtual clock of this runtime.
    public var clock: SimulationClock { SimulationClock(runtime: self) }

    public var now: Duration {
        condition.lock()
        defer { condition.unlock() }
        return state.now
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        condition.lock()
        state.jobs.append(unowned)
        condition.signal()
        condition.unlock()
    }

    /// Runs `body` to completion in a new simulation and returns its result.
    public static func run<T: Sendable>(
        maximumVirtualTime: Duration = .seconds(24 * 3600),
        _ body: @escaping @Sendable (SimulationRuntime) async throws -> T
    ) async throws -> T {
        let runtime = SimulationRuntime(maximumVirtualTime: maximumVirtualTime)
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let thread = Thread {
                let result = Mutex<Result<T, any Error>?>(nil)
                Task(executorPreference: runtime) {
                    let outcome: Result<T, any Error>
                    do { outcome = .success(try await body(runtime)) } catch { outcome = .failure(error) }
                    result.withLock { $0 = outcome }
                    runtime.markFinished()
                }
                let failure = runtime.drive()
                runtime.abandonTimers()
                if let failure {
                    continuation.resume(throwing: failure)
                    return
                }
                continuation.resume(with: result.withLock { $0! })
            }
            thread.name = "bleota-simulation"
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    /// Ends the sleeps still pending when the simulation is over (connection
    /// event loops, a rebooting device), so no continuation is leaked.
    private func abandonTimers() { endTimers(throwing: CancellationError()) }

    /// Resumes every pending sleep with `error`; returns how many there were.
    @discardableResult
    private func endTimers(throwing error: any Error) -> Int {
        let timers = condition.withLock {
            defer { state.timers = [] }
            return state.timers
        }
        for timer in timers { timer.continuation.resume(throwing: error) }
        return timers.count
    }

    /// Runs the next queued job, if there is one, on this thread.
    private func runNextJob() -> Bool {
        condition.lock()
        guard state.head < state.jobs.count else {
            condition.unlock()
            return false
        }
        let job = state.jobs[state.head]
        state.head += 1
        if state.head > 1024 && state.head * 2 > state.jobs.count {
            state.jobs.removeFirst(state.head)
            state.head = 0
        }
        condition.unlock()
        jobsRun += 1
        job.runSynchronously(on: asUnownedTaskExecutor())
        return true
    }

    private func markFinished() {
        condition.lock()
        state.finished = true
        condition.signal()
        condition.unlock()
    }

    /// The event loop; returns an error if the simulation cannot proceed.
    private func drive() -> SimulationError? {
        while true {
            if runNextJob() { continue }
            condition.lock()
            if state.finished {
                condition.unlock()
                return nil
            }
            if let index = earliestTimerIndex() {
                let timer = state.timers.remove(at: index)
                if timer.deadline > state.now { state.now = timer.deadline }
                let now = state.now
                condition.unlock()
                if now > maximumVirtualTime {
                    // Every sleep ends with the error, this one and those still pending, and the code
                    // that waited runs on to its end: no continuation is left unresumed, no task hangs.
                    let overrun = SimulationError("the simulation ran past \(maximumVirtualTime) of virtual time without finishing")
                    timer.continuation.resume(throwing: overrun)
                    endTimers(throwing: overrun)
                    return unwind(after: overrun)
                }
                timer.continuation.resume()
                continue
            }
            // Nothing runnable and no timer: something outside may still enqueue; wait a little.
            let woke = condition.wait(until: Date().addingTimeInterval(2))
            let stuck = !woke && state.head >= state.jobs.count && state.timers.isEmpty && !state.finished
            let now = state.now
            condition.unlock()
            if stuck {
                return SimulationError("simulation deadlocked at t=\(now): no runnable task and no timer")
            }
        }
    }

    /// Runs the jobs the overrun's errors start until the simulated code has ended, for at most
    /// ``unwindingJobLimit`` jobs (code that catches the error and goes on never ends). A sleep
    /// begun meanwhile ends with the error too, once the jobs before it have run: never at once,
    /// so a loop that catches it still yields, and the limit can stop it.
    private func unwind(after overrun: SimulationError) -> SimulationError {
        var run = 0
        while run < Self.unwindingJobLimit {
            if runNextJob() {
                run += 1
                continue
            }
            let done = condition.withLock { state.finished }
            if endTimers(throwing: overrun) == 0 || done { break }
        }
        return overrun
    }

    /// Jobs run after an overrun before the runtime stops regardless.
    static let unwindingJobLimit = 100_000

    private func earliestTimerIndex() -> Int? {
        guard !state.timers.isEmpty else { return nil }
        var best = 0
        for index in 1..<state.timers.count {
            let a = state.timers[index], b = state.timers[best]
            if a.deadline < b.deadline || (a.deadline == b.deadline && a.sequence < b.sequence) { best = index }
        }
        return best
    }

    private func nextTimerID() -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        state.sequence += 1
        return state.sequence
    }

    func sleep(until deadline: Duration) async throws {
        let id = nextTimerID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                condition.lock()
                if Task.isCancelled {
                    condition.unlock()
                    continuation.resume(throwing: CancellationError())
                    return
                }
                state.timers.append(Timer(deadline: deadline, sequence: id, id: id, continuation: continuation))
                condition.unlock()
            }
        } onCancel: {
            condition.lock()
            let index = state.timers.firstIndex { $0.id == id }
            let timer = index.map { state.timers.remove(at: $0) }
            condition.unlock()
            timer?.continuation.resume(throwing: CancellationError())
        }
    }
}

/// The virtual clock of a ``SimulationRuntime``.
public struct SimulationClock: BleotaClock {
    let runtime: SimulationRuntime
    public var now: Duration { runtime.now }
    public func sleep(until deadline: Duration) async throws {
        try await runtime.sleep(until: deadline)
    }
    public var taskExecutor: (any TaskExecutor)? { runtime }
}

/// The simulation itself failed (deadlock, runaway time).
public struct SimulationError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// SplitMix64: small, fast, and the same sequence on every machine for a seed.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    /// An independent stream for one purpose (a fault, a direction), so turning
    /// one fault on does not shift another's draws.
    public init(seed: UInt64, stream: String) {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in stream.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        state = seed ^ hash
        _ = next()
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    public mutating func nextDouble() -> Double { Double(next() >> 11) / Double(1 << 53) }

    /// True with probability `p`; draws nothing when `p` is 0 so a disabled
    /// fault leaves the stream untouched.
    public mutating func chance(_ p: Double) -> Bool {
        guard p > 0 else { return false }
        return nextDouble() < p
    }
}
