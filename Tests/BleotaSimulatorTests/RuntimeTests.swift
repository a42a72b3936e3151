import BleotaLink
import Synchronization
import Testing

@testable import BleotaSimulator

/// A lock-protected list that tasks can share.
final class SharedLog: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite struct RuntimeTests {
    /// Three sleepers and a producer/consumer pair, logging virtual times.
    static func interleaving() async throws -> [String] {
        try await SimulationRuntime.run { runtime in
            let clock = runtime.clock
            let log = SharedLog()
            let mailbox = Mailbox<Int>()
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<3 {
                    group.addTask {
                        for step in 0..<4 {
                            try? await clock.sleep(for: .milliseconds(10 + worker))
                            log.append("w\(worker).\(step)@\(clock.now)")
                        }
                    }
                }
                group.addTask {
                    for value in 0..<5 {
                        try? await clock.sleep(for: .milliseconds(7))
                        mailbox.put(value)
                    }
                    mailbox.close()
                }
                group.addTask {
                    while let value = try? await mailbox.take() {
                        log.append("got\(value)@\(clock.now)")
                    }
                }
            }
            return log.all
        }
    }

    @Test func sameProgramGivesTheSameInterleavingEveryTime() async throws {
        let first = try await Self.interleaving()
        for _ in 0..<5 { #expect(try await Self.interleaving() == first) }
        #expect(first.count == 17)
        #expect(first.first == "got0@0.007 seconds")
    }

    @Test func virtualTimeAdvancesOnlyThroughTimers() async throws {
        let (before, after) = try await SimulationRuntime.run { runtime in
            let before = runtime.clock.now
            try await runtime.clock.sleep(for: .seconds(3600))
            return (before, runtime.clock.now)
        }
        #expect(before == .zero)
        #expect(after == .seconds(3600))
    }

    @Test func cancelledSleepEndsAtOnceAndLeavesNoTimer() async throws {
        let (elapsed, threw) = try await SimulationRuntime.run { runtime in
            let clock = runtime.clock
            let task = Task(executorPreference: runtime) { () -> Bool in
                do {
                    try await clock.sleep(for: .seconds(100))
                    return false
                } catch { return true }
            }
            try await clock.sleep(for: .seconds(1))
            task.cancel()
            let threw = await task.value
            return (clock.now, threw)
        }
        #expect(threw)
        #expect(elapsed == .seconds(1))
    }

    @Test func deadlineOnTheVirtualClock() async throws {
        let result = try await SimulationRuntime.run { runtime -> String in
            let mailbox = Mailbox<Int>()
            do {
                _ = try await withDeadline(.milliseconds(250), clock: runtime.clock) { try await mailbox.take() }
                return "no timeout"
            } catch is DeadlineExceeded {
                return "timeout at \(runtime.clock.now)"
            }
        }
        #expect(result == "timeout at 0.25 seconds")
    }

    @Test func deadlockIsReportedNotHung() async {
        let error = await #expect(throws: SimulationError.self) {
            try await SimulationRuntime.run { _ in
                await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
            }
        }
        #expect(error?.description.hasPrefix("simulation deadlocked at t=") == true)
    }

    @Test func runawaySimulationStopsAtTheVirtualTimeCap() async {
        let error = await #expect(throws: SimulationError.self) {
            try await SimulationRuntime.run(maximumVirtualTime: .seconds(10)) { runtime in
                while true { try await runtime.clock.sleep(for: .seconds(1)) }
            }
        }
        #expect(error?.description.contains("ran past") == true)
    }

    /// Past the cap every sleep ends with the overrun's error — the one that crossed it and
    /// those still pending in other tasks — and the simulated code runs on to its end:
    /// cleanup runs, and no continuation is left unresumed (which Swift reports as a misuse).
    @Test func anOverrunEndsEverySleepAndLetsTheCodeUnwind() async {
        let unwound = SharedLog()
        let error = await #expect(throws: SimulationError.self) {
            try await SimulationRuntime.run(maximumVirtualTime: .seconds(10)) { runtime in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        do { try await runtime.clock.sleep(for: .seconds(3600)) } catch {
                            unwound.append("pending sleep: \(type(of: error))")
                            throw error
                        }
                    }
                    group.addTask {
                        defer { unwound.append("loop") }
                        while true { try await runtime.clock.sleep(for: .seconds(1)) }
                    }
                    try await group.waitForAll()
                }
            }
        }
        #expect(error?.description.contains("ran past 10.0 seconds") == true)
        #expect(unwound.all.sorted() == ["loop", "pending sleep: SimulationError"])
    }

    /// Code that catches the overrun's error and sleeps again gets it again at once, and the
    /// runtime still ends (within its unwinding limit), with the overrun as the result.
    @Test func codeThatIgnoresTheOverrunStillEnds() async {
        let tries = SharedLog()
        let error = await #expect(throws: SimulationError.self) {
            try await SimulationRuntime.run(maximumVirtualTime: .seconds(5)) { runtime in
                while true {
                    do { try await runtime.clock.sleep(for: .seconds(1)) } catch { tries.append("caught") }
                }
            }
        }
        #expect(error?.description.contains("ran past") == true)
        #expect(tries.all.count > 1)
    }

    @Test func seededRandomIsStableAndStreamsAreIndependent() {
        var a = SeededRandom(seed: 7), b = SeededRandom(seed: 7), c = SeededRandom(seed: 8)
        let first = (0..<5).map { _ in a.next() }
        let second = (0..<5).map { _ in b.next() }
        let other = (0..<5).map { _ in c.next() }
        #expect(first == second)
        #expect(first != other)
        var loss = SeededRandom(seed: 7, stream: "writeLoss"), corrupt = SeededRandom(seed: 7, stream: "corruption")
        let lossDraw = loss.next(), corruptDraw = corrupt.next()
        #expect(lossDraw != corruptDraw)
        // A probability of zero draws nothing, so a disabled fault never shifts the stream.
        var never = SeededRandom(seed: 1)
        var copy = never
        let fired = never.chance(0)
        let afterChance = never.next(), untouched = copy.next()
        #expect(!fired)
        #expect(afterChance == untouched)
    }
}
