import BleotaLink
import Testing

@testable import BleotaSimulator

/// The host changing a simulated connection's interval while it is open (an LE Connection Update).
@Suite struct ConnectionUpdateTests {
    /// Floods full packets to a sink for `seconds` and counts what arrived in each half: the link asks
    /// for `interval` (when given) as the second half starts.
    static func flood(
        asking interval: Duration?, seconds: Int = 2
    ) async throws
        -> (first: Int, second: Int, inForce: Duration, updates: Int, opening: Duration)
    {
        var model = LinkPreset.named("2m-dle")!.model
        model.deviceProcessingPerPacket = .zero
        model.deviceProcessingPerByte = .zero
        let size = model.maximumPayload
        return try await SimulationRuntime.run { [model] runtime in
            let world = SimulatedWorld(runtime: runtime, model: model, seed: 1)
            let sink = SinkPeripheral()
            await world.add(sink)
            let link = try await world.connect(to: "AA:00:00:00:00:01", timeout: .seconds(1))
            let half = runtime.clock.now + .seconds(seconds)
            let end = half + .seconds(seconds)
            var asked = false
            var firstHalf = 0
            while runtime.clock.now < end {
                if !asked, runtime.clock.now >= half {
                    asked = true
                    firstHalf = sink.received.withLock { $0.count }
                    if let interval { link.requestConnectionInterval(interval) }
                }
                try await link.send([UInt8](repeating: 0x5A, count: size))
            }
            let total = sink.received.withLock { $0.count }
            let result = (
                firstHalf, total - firstHalf, link.connectionInterval, link.statistics.connectionUpdates,
                link.openingConnectionInterval
            )
            await link.close()
            return result
        }
    }

    /// `2m-dle` carries at most 8 packets per event: 8 per 15 ms, while 10 would fit in the air. On
    /// 7.5 ms events the same link carries 5 per event (all the air time allows), 10 per 15 ms.
    @Test func aShorterIntervalLetsAnEventLimitedLinkFillTheAir() async throws {
        let unchanged = try await Self.flood(asking: nil)
        #expect(unchanged.updates == 0)
        #expect(unchanged.inForce == .milliseconds(15))
        // 8 packets every 15 ms, within the partial first and last events.
        #expect(abs(unchanged.second - 2000 / 15 * 8) <= 16, "\(unchanged)")

        let shortened = try await Self.flood(asking: LEConnectionInterval.shortest)
        #expect(shortened.updates == 1)
        #expect(shortened.inForce == .microseconds(7_500))
        #expect(shortened.opening == .milliseconds(15))
        #expect(shortened.first == unchanged.first)
        // Six events at 15 ms before the instant, then 5 packets every 7.5 ms.
        let expected = 6 * 8 + (2000 - 6 * 15) * 10 / 15
        #expect(abs(shortened.second - expected) <= 16, "\(shortened) against \(expected)")
        #expect(Double(shortened.second) > Double(unchanged.second) * 1.2)
    }

    @Test func anIntervalOutsideTheAllowedRangeIsIgnored() async throws {
        let result = try await Self.flood(asking: .milliseconds(5), seconds: 1)
        #expect(result.updates == 0)
        #expect(result.inForce == .milliseconds(15))
    }

    /// On a shared radio the adapter learns the new anchors: a connection placed after the update
    /// goes between the 7.5 ms link's anchors, not on one of them.
    @Test func theAdapterPlacesLaterConnectionsAroundTheNewInterval() async throws {
        let phase = try await SimulationRuntime.run { runtime -> Duration in
            let adapter = SimulatedAdapter(name: "sim0")
            let model = LinkPreset.named("2m-dle")!.model
            let world = SimulatedWorld(runtime: runtime, model: model, seed: 1)
            world.use(adapter: adapter)
            await world.add(SinkPeripheral(address: "AA:00:00:00:00:01"))
            await world.add(SinkPeripheral(address: "AA:00:00:00:00:02"))
            let first = try await world.connect(to: "AA:00:00:00:00:01", timeout: .seconds(1))
            first.requestConnectionInterval(LEConnectionInterval.shortest)
            // Data makes the events run, so the instant comes.
            for _ in 0..<200 { try await first.send([0x01]) }
            try await runtime.clock.sleep(for: .milliseconds(200))
            #expect(first.connectionInterval == .microseconds(7_500))
            let second = try await world.connect(to: "AA:00:00:00:00:02", timeout: .seconds(1))
            try await runtime.clock.sleep(for: .milliseconds(50))
            let anchors = adapter.anchorPhases
            await first.close()
            await second.close()
            let mine = try #require(anchors[ObjectIdentifier(first.connection!)])
            let theirs = try #require(anchors[ObjectIdentifier(second.connection!)])
            #expect(mine.interval == .microseconds(7_500))
            return SimulatedAdapter.phase(of: theirs.anchor - mine.anchor, in: .microseconds(7_500))
        }
        #expect(phase == .microseconds(3_750))
    }
}
