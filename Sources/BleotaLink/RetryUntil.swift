/// Tries `attempt` until it succeeds or `deadline` (on `clock`) passes,
/// pausing between tries; throws the last attempt's error.
///
/// Every reconnect in bleota has this shape: a device that is rebooting, or a
/// link the kernel is still tearing down, refuses for a moment and then
/// answers. `attempt` gets the time left before the deadline, for its own
/// timeout.
public func retryUntil<T: Sendable>(
    deadline: Duration, clock: any BleotaClock, pause: Duration,
    _ attempt: (_ timeLeft: Duration) async throws(LinkError) -> T
) async throws(LinkError) -> T {
    var lastError = LinkError.unreachable("no attempt made")
    while clock.now < deadline {
        do {
            return try await attempt(deadline - clock.now)
        } catch {
            lastError = error
            do { try await clock.sleep(for: pause) } catch { throw .cancelled }
        }
    }
    throw lastError
}
