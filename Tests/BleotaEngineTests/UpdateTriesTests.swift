import BleotaEngine
import BleotaLink
import Testing

/// The one retry policy of host halves, as a table: what each sequence of try
/// endings makes of the update, and what the device is said to run.
@Suite struct UpdateTriesTests {
    /// Runs tries that end as `endings` say (nil: the try succeeds), recording what the policy did.
    static func run(limit: Int, _ endings: [TryFailure?]) async -> (result: Result<Int, TransferError>, log: [String]) {
        var tries = UpdateTries(limit: limit)
        var log: [String] = []
        var ran = 0
        do throws(TransferError) {
            let value = try await tries.run { (attempt: Int) async throws(TryFailure) -> Int in
                log.append("try \(attempt)")
                ran += 1
                if let ending = endings[ran - 1] { throw ending }
                return attempt
            } between: { (retry: TryFailure.Retry) async throws(TransferError) in
                log.append("between: \(retry.reason)")
            } exhausted: { retry, attempts in
                log.append("exhausted after \(attempts): \(retry.reason)")
                return TransferError(retry.linkDropped ? .linkLost : .verificationFailed, step: .transfer, retry.reason)
            }
            return (.success(value), log)
        } catch {
            return (.failure(error), log)
        }
    }

    @Test func aRetryThatSucceedsNextTimeEndsTheTriesWithItsValue() async throws {
        let (result, log) = await Self.run(limit: 3, [.retry("lost a block"), nil])
        #expect(try result.get() == 2)
        #expect(log == ["try 1", "between: lost a block", "try 2"])
    }

    @Test func triesRunOutWithTheLastReasonAndTheOldImage() async {
        let (result, log) = await Self.run(limit: 2, [.retry("first"), .retry("second", linkDropped: true)])
        #expect(log == ["try 1", "between: first", "try 2", "exhausted after 2: second"])
        guard case .failure(let error) = result else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.code == .linkLost && error.message == "second")
        #expect(error.outcome == .oldImage("its old image"))
    }

    /// A try the host made better by itself (fewer packets between receipts) is not counted:
    /// with a limit of 2, two such tries and two counted ones run before the tries run out.
    @Test func aTryThatDoesNotCountLeavesTheLimitWhereItWas() async {
        let (result, log) = await Self.run(
            limit: 2, [.retry("lost 1", counts: false), .retry("lost 2", counts: false), .retry("third"), .retry("fourth"), nil])
        #expect(
            log == [
                "try 1", "between: lost 1", "try 1", "between: lost 2", "try 1", "between: third", "try 2", "exhausted after 2: fourth",
            ])
        guard case .failure(let error) = result else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.message == "fourth")
    }

    /// A package's parts each get the limit: a try that delivered a part before it failed counts
    /// as the first try of the next part, so with a limit of 2 a second part may fail once more
    /// after the try that took the first part, and a third failure without progress ends it.
    @Test func aTryThatProgressedStartsTheCountOfWhatIsLeft() async {
        let (result, log) = await Self.run(
            limit: 2, [.retry("part 1 lost"), .retry("part 2 lost", progressed: true), .retry("part 2 lost again"), nil])
        #expect(log == ["try 1", "between: part 1 lost", "try 2", "between: part 2 lost", "try 2", "exhausted after 2: part 2 lost again"])
        guard case .failure(let error) = result else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.message == "part 2 lost again")
        // Without the progress, the same endings run out one try sooner.
        let (_, plain) = await Self.run(limit: 2, [.retry("part 1 lost"), .retry("part 2 lost"), nil])
        #expect(plain == ["try 1", "between: part 1 lost", "try 2", "exhausted after 2: part 2 lost"])
    }

    /// A device whose bootloader boots what its banks hold after a failed try: running out of
    /// tries names nothing, unless a try may have activated the image (then it is unknown).
    @Test(arguments: [(false, DeviceOutcome?.none), (true, DeviceOutcome.unknown)])
    func triesThatMayNotKeepTheOldImageNameNoneOfIt(mayHaveActivated: Bool, outcome: DeviceOutcome?) async {
        var tries = UpdateTries(limit: 2, exhaustionKeepsTheOldImage: false)
        do throws(TransferError) {
            try await tries.run { (_: Int) async throws(TryFailure) in
                throw .retry("lost", mayHaveActivated: mayHaveActivated)
            } between: { (_: TryFailure.Retry) async throws(TransferError) in
            } exhausted: { retry, _ in
                TransferError(.verificationFailed, step: .transfer, retry.reason)
            }
            Issue.record("expected a failure")
        } catch {
            #expect(error.outcome == outcome && error.message == "lost")
        }
    }

    /// Once a try may have activated the image, no later failure says the old image runs.
    @Test func aPossibleActivationMakesEveryLaterEndingUnknown() async {
        let exhausted = await Self.run(limit: 2, [.retry("END unanswered", mayHaveActivated: true), .retry("no answer")])
        guard case .failure(let ranOut) = exhausted.result else {
            Issue.record("expected a failure")
            return
        }
        #expect(ranOut.outcome == .unknown)

        let refused = TransferError(.deviceRefused, step: .transfer, "refused")
        let final = await Self.run(limit: 3, [.retry("END unanswered", mayHaveActivated: true), .final(refused)])
        guard case .failure(let error) = final.result else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.code == .deviceRefused && error.outcome == .unknown)
        #expect(final.log == ["try 1", "between: END unanswered", "try 2"])

        // Without one, a final failure says nothing changed on the device.
        let plain = await Self.run(limit: 3, [.final(refused)])
        guard case .failure(let untouched) = plain.result else {
            Issue.record("expected a failure")
            return
        }
        #expect(untouched.outcome == nil && plain.log == ["try 1"])
    }

    @Test func anOutcomeTheHostNamesIsKept() async {
        var tries = UpdateTries(limit: 1)
        do throws(TransferError) {
            _ = try await tries.run { (_: Int) async throws(TryFailure) -> Int in
                throw .retry("came back in its bootloader", mayHaveActivated: true)
            } between: { (_: TryFailure.Retry) async throws(TransferError) in
            } exhausted: { retry, _ in
                var error = TransferError(.verificationFailed, step: .transfer, retry.reason)
                error.outcome = .inBootloader
                return error
            }
            Issue.record("expected a failure")
        } catch {
            #expect(error.outcome == .inBootloader)
        }
    }
}
