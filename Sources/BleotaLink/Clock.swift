/// The time source every timeout, delay and rate in bleota is measured on.
///
/// Injected, never read from the system directly, so that the same engine code
/// runs on the wall clock against a real device and on the simulator's virtual
/// clock, where a 30-second BLE transfer takes milliseconds and happens
/// identically every time for a given seed. Instants are durations since the
/// clock's own origin, which keeps the protocol free of associated types.
public protocol BleotaClock: Sendable {
    /// Time elapsed since this clock's origin.
    var now: Duration { get }
    /// Suspends until `deadline` (measured from the origin). Throws
    /// `CancellationError` when the task is cancelled, promptly and without
    /// leaving a timer behind.
    func sleep(until deadline: Duration) async throws

    /// Where a task that code on this clock starts on its own (a link's background read) must
    /// run: the simulation's executor, whose virtual time moves only when none of its jobs can;
    /// nil, the default, for the system's.
    var taskExecutor: (any TaskExecutor)? { get }
}

extension BleotaClock {
    public var taskExecutor: (any TaskExecutor)? { nil }

    public func sleep(for duration: Duration) async throws {
        try await sleep(until: now + duration)
    }
}

/// The wall clock (monotonic), for real devices.
public struct SystemClock: BleotaClock {
    private let origin: ContinuousClock.Instant

    public init() { origin = ContinuousClock.now }

    public var now: Duration { ContinuousClock.now - origin }

    public func sleep(until deadline: Duration) async throws {
        try await ContinuousClock().sleep(until: origin + deadline, tolerance: nil)
    }
}

/// Thrown by ``withDeadline(_:clock:operation:)`` when time runs out first.
public struct DeadlineExceeded: Error, Sendable, Equatable {
    public var after: Duration
    public init(after: Duration) { self.after = after }
}

/// Runs `operation`, cancelling it and throwing ``DeadlineExceeded`` if it has not
/// finished within `timeout` on `clock`.
///
/// The operation must honour cancellation (every ``Link/receive()`` does), since
/// the race is settled by cancelling the loser.
public func withDeadline<T: Sendable>(
    _ timeout: Duration, clock: any BleotaClock, operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await clock.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next() else { throw DeadlineExceeded(after: timeout) }
        guard let value = first else { throw DeadlineExceeded(after: timeout) }
        return value
    }
}
