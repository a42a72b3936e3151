import Testing

@testable import BleotaLink

/// An attempt's failure, numbered so the test can tell which one came back.
struct Refused: Error, Equatable {
    var attempt: Int
}

/// What one run of ``retryingUntil(deadline:clock:pause:isolation:attempt:)`` did, on virtual time.
struct RetryRun: Sendable {
    var value: String?
    var lastError: Refused?
    var attempts: Int?
    /// The time left that each attempt was given.
    var remaining: [Duration]
    /// When each attempt began.
    var started: [Duration]
    var end: Duration
}

/// Retries an attempt that takes `cost` of virtual time and succeeds on attempt
/// `succeedOn` (never if nil), with `deadline` and `pause`.
func retryRun(deadline: Duration, pause: Duration, cost: Duration, succeedOn: Int?) async throws -> RetryRun {
    try await SimulationRuntime.run { runtime in
        let clock = runtime.clock
        var remaining: [Duration] = []
        var started: [Duration] = []
        do throws(RetryTimedOut<Refused>) {
            let value = try await retryingUntil(deadline: deadline, clock: clock, pause: pause) { left throws(Refused) -> String in
                remaining.append(left)
                started.append(clock.now)
                try? await clock.sleep(for: cost)
                if remaining.count == succeedOn { return "connected on attempt \(remaining.count)" }
                throw Refused(attempt: remaining.count)
            }
            return RetryRun(value: value, remaining: remaining, started: started, end: clock.now)
        } catch {
            return RetryRun(lastError: error.lastError, attempts: error.attempts, remaining: remaining, started: started, end: clock.now)
        }
    }
}

@Suite struct RetryingTests {
    @Test func givesUpAtTheDeadlineWithTheLastAttemptsError() async throws {
        let run = try await retryRun(deadline: .seconds(1), pause: .milliseconds(250), cost: .milliseconds(100), succeedOn: nil)
        #expect(run.value == nil)
        // Attempts at 0, 0.35 and 0.7 s; the third ends at 0.8 s and its pause at 1.05 s, past the deadline.
        #expect(run.started == [.zero, .milliseconds(350), .milliseconds(700)])
        #expect(run.remaining == [.seconds(1), .milliseconds(650), .milliseconds(300)])
        #expect(run.lastError == Refused(attempt: 3))
        #expect(run.attempts == 3)
        #expect(run.end == .milliseconds(1050))
    }

    @Test func succeedsOnTheNthAttemptAndStopsThere() async throws {
        let run = try await retryRun(deadline: .seconds(2), pause: .milliseconds(250), cost: .zero, succeedOn: 3)
        #expect(run.value == "connected on attempt 3")
        #expect(run.lastError == nil)
        #expect(run.started == [.zero, .milliseconds(250), .milliseconds(500)])
        #expect(run.remaining == [.seconds(2), .milliseconds(1750), .milliseconds(1500)])
        #expect(run.end == .milliseconds(500))
    }

    @Test func aZeroPauseRetriesAtOnce() async throws {
        let run = try await retryRun(deadline: .milliseconds(300), pause: .zero, cost: .milliseconds(100), succeedOn: nil)
        #expect(run.started == [.zero, .milliseconds(100), .milliseconds(200)])
        #expect(run.lastError == Refused(attempt: 3))
        #expect(run.end == .milliseconds(300))
    }

    @Test func aDeadlineAlreadyPastMakesNoAttempt() async throws {
        let run = try await retryRun(deadline: .zero, pause: .milliseconds(250), cost: .zero, succeedOn: 1)
        #expect(run.value == nil)
        #expect(run.attempts == 0)
        #expect(run.lastError == nil)
        #expect(run.started.isEmpty)
    }
}
