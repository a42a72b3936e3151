/// Thrown by ``retryingUntil(deadline:clock:pause:isolation:isFinal:attempt:)`` when
/// the deadline passed with no attempt succeeding.
public struct RetryTimedOut<Failure: Error>: Error {
    /// What the last attempt threw; nil if the deadline had passed before the first one.
    public var lastError: Failure?
    /// How many attempts were made.
    public var attempts: Int

    public init(lastError: Failure?, attempts: Int) {
        self.lastError = lastError
        self.attempts = attempts
    }
}

/// Calls `attempt` until it succeeds or `deadline` (on `clock`) has passed,
/// pausing `pause` after each failure.
///
/// Connecting is retried rather than tried once because the peer is often
/// briefly absent for ordinary reasons: a device rebooting into its bootloader
/// or swapping images stops advertising for a while, and a link the kernel is
/// still tearing down refuses a new one for a moment. Every connect-and-retry
/// loop in bleota is this one function, so they all agree on the rules:
///
/// - `attempt` gets the time left until the deadline, to use as its own timeout;
///   an attempt that starts before the deadline runs to its end even if that is later.
/// - The pause keeps a device that answers at once with a refusal from being
///   hammered; a pause of zero retries at once (for attempts that take time of
///   their own, such as a connect that waits for an advertisement). The pause is
///   not cut short by cancellation: the loop ends at the deadline regardless.
/// - When time runs out it throws ``RetryTimedOut`` with the last attempt's error,
///   which the caller turns into its own message — the last error is usually the
///   one that says what is wrong.
///
/// On the simulator's virtual clock the pauses take no wall time, so the same
/// loop is tested deterministically (see `RetryingTests`).
public func retryingUntil<T, Failure: Error>(
    deadline: Duration, clock: any BleotaClock, pause: Duration,
    isolation: isolated (any Actor)? = #isolation,
    isFinal: (Failure) -> Bool = { _ in false },
    attempt: (_ remaining: Duration) async throws(Failure) -> T
) async throws(RetryTimedOut<Failure>) -> T {
    var lastError: Failure?
    var attempts = 0
    while clock.now < deadline {
        attempts += 1
        do {
            return try await attempt(deadline - clock.now)
        } catch {
            lastError = error
            // A failure that another attempt cannot cure ends the loop at once.
            if isFinal(error) { break }
        }
        if pause > .zero { try? await clock.sleep(for: pause) }
    }
    throw RetryTimedOut(lastError: lastError, attempts: attempts)
}

/// ``retryingUntil(deadline:clock:pause:isolation:isFinal:attempt:)`` for connecting:
/// when time runs out, the last attempt's ``LinkError`` is the error (it says
/// what is wrong: not advertising, refused, …). A ``LinkError/security(_:)``
/// failure ends it at once: a pairing that failed fails again.
public func retryUntil<T>(
    deadline: Duration, clock: any BleotaClock, pause: Duration,
    isolation: isolated (any Actor)? = #isolation,
    _ attempt: (_ remaining: Duration) async throws(LinkError) -> T
) async throws(LinkError) -> T {
    do {
        return try await retryingUntil(
            deadline: deadline, clock: clock, pause: pause,
            isFinal: { error in
                if case .security = error { return true }
                return false
            }, attempt: attempt)
    } catch {
        throw error.lastError ?? .unreachable("no attempt made before the deadline")
    }
}
