import BleotaLink
import BleotaTestSupport
import Testing

@testable import BleotaSimulator

/// `sim serve --link`: a preset's link model applied to another transport's messages.
@Suite struct ShapedLinkTests {
    struct Run: Sendable {
        var received: [[UInt8]]
        var answers: [[UInt8]]
        var elapsed: Duration
        var statistics: ShapedLink.Statistics
    }

    /// `count` messages of `size` bytes from a client through the shaped link; the device answers each.
    static func run(preset: String, loss: Double = 0, count: Int, size: Int, seed: UInt64 = 1) async throws -> Run {
        let model = try #require(LinkPreset.named(preset)).model
        var lossy = LinkFaults()
        lossy.writeLoss = loss
        let faults = lossy
        return try await SimulationRuntime.run { runtime in
            let clock = runtime.clock
            let (client, server) = LoopbackLink.pair(maximumPayload: 4096)
            let shaped = ShapedLink(inner: server, model: model, faults: faults, seed: seed, clock: clock)
            let started = clock.now
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await shaped.run() }
                async let device: [[UInt8]] = {
                    var received: [[UInt8]] = []
                    while let message = try? await shaped.receive() {
                        received.append(message)
                        try? await shaped.send([0xA0, UInt8(truncatingIfNeeded: received.count)])
                        if received.count + shaped.statistics.lostToDevice == count { break }
                    }
                    return received
                }()
                for index in 0..<count {
                    try await client.send([UInt8](repeating: UInt8(truncatingIfNeeded: index), count: size))
                }
                let received = await device
                var answers: [[UInt8]] = []
                while answers.count < received.count, let answer = try await client.receive(within: .seconds(1), clock: clock) {
                    answers.append(answer)
                }
                let elapsed = clock.now - started
                let statistics = shaped.statistics
                await shaped.close()
                await client.close()
                try await group.waitForAll()
                return Run(received: received, answers: answers, elapsed: elapsed, statistics: statistics)
            }
        }
    }

    /// Messages arrive whole and in order, no faster than the link's capacity allows, and
    /// within a connection event or two of it; the device's answers come back.
    @Test func messagesCrossAtTheLinksCapacity() async throws {
        let count = 100, size = 2048
        let result = try await Self.run(preset: "2m-dle", count: count, size: size)
        #expect(result.received.count == count)
        #expect(result.received.enumerated().allSatisfy { $0.element == [UInt8](repeating: UInt8($0.offset), count: size) })
        #expect(result.answers.count == count)
        let model = LinkPreset.named("2m-dle")!.model
        let bound = Double(count * size) / model.capacity(payload: model.maximumPayload)
        #expect(result.elapsed.seconds >= bound * 0.97, "\(result.elapsed) against \(bound) s")
        #expect(result.elapsed.seconds <= bound * 1.15 + 0.05, "\(result.elapsed) against \(bound) s")
    }

    /// A lost write loses its whole message; the same seed loses the same ones.
    @Test func aLostWriteLosesItsMessageDeterministically() async throws {
        let first = try await Self.run(preset: "2m-dle", loss: 0.05, count: 60, size: 1000, seed: testSeed("aLostWriteLosesItsMessage"))
        #expect(first.statistics.lostToDevice > 0)
        #expect(first.received.count + first.statistics.lostToDevice == 60)
        #expect(first.received.allSatisfy { $0.count == 1000 })
        let again = try await Self.run(preset: "2m-dle", loss: 0.05, count: 60, size: 1000, seed: testSeed("aLostWriteLosesItsMessage"))
        #expect(again.received == first.received)
    }

    /// A 23-byte MTU: a 240-byte message is 12 writes, and a 30 ms event carries 4 of them.
    @Test func aSmallMTUTakesManyEventsPerMessage() async throws {
        let result = try await Self.run(preset: "1m-no-dle-30ms", count: 4, size: 240)
        #expect(result.received.count == 4)
        // 48 writes at 4 per 30 ms event: at least 11 events.
        #expect(result.elapsed >= .milliseconds(330))
        #expect(result.statistics.connectionEvents >= 12)
    }
}
