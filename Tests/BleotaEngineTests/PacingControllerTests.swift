import BleotaLink
import BleotaTestSupport
import Testing

@testable import BleotaEngine

/// The closed-loop pacing controller as a table of made-up acknowledgements.
@Suite struct PacingControllerTests {
    static func controller(buffer: Int?, window: Int = 32, ackInterval: Int = 2) -> PacingController {
        PacingController(.init(initialWindow: window, receiverBuffer: buffer, ackInterval: ackInterval))
    }

    /// Feeds `rounds` acknowledgements of `perAck` packets, `spacing` apart, each with a
    /// round trip of `roundTrip` and a delivery sample at the given rate.
    static func feed(
        _ pacer: inout PacingController, rounds: Int, perAck: Int, spacing: Duration, roundTrip: Duration,
        from start: Duration = .milliseconds(100)
    ) -> Duration {
        var now = start
        for _ in 0..<rounds {
            now += spacing
            let sample = PacingController.RateSample(delivered: perAck, interval: spacing, deliveredAtSend: pacer.delivered)
            pacer.acknowledged(now: now, newlyDelivered: perAck, sample: sample, roundTrip: roundTrip, newestSentAt: now - roundTrip)
        }
        return now
    }

    @Test func theFirstFlightFitsTheReceiversBufferUnpaced() {
        #expect(Self.controller(buffer: 4).window == 4)
        #expect(Self.controller(buffer: 64).window == 32)
        #expect(Self.controller(buffer: nil).window == 32)
        #expect(Self.controller(buffer: 1).window == 2)
        #expect(Self.controller(buffer: 4).gap == .zero)
    }

    @Test func startupGrowsTheFlightByWhatIsDeliveredUpToTheReceiversBuffer() {
        var pacer = Self.controller(buffer: 8, window: 4)
        _ = Self.feed(&pacer, rounds: 1, perAck: 2, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
        #expect(pacer.phase == .startup)
        #expect(pacer.window == 6)
        #expect(pacer.gap == .zero)
        // Whether the receiver stops to erase is not known yet: what it cannot queue during a stall
        // would be lost, so startup stops at its buffer, unpaced.
        _ = Self.feed(&pacer, rounds: 2, perAck: 2, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
        #expect(pacer.phase == .startup)
        #expect(pacer.window == 8)
        #expect(pacer.gap == .zero)
        // A receiver that did not say how much it queues: startup grows on.
        var unknown = Self.controller(buffer: nil, window: 4)
        _ = Self.feed(&unknown, rounds: 3, perAck: 2, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
        #expect(unknown.window == 10)
    }

    /// 8 packets every 15 ms over a 20 ms round trip: 533 packets a second, 10.7 in flight.
    @Test func steadyFlightIsTwiceTheRateTimesTheRoundTripPlusAnAcknowledgementInterval() {
        var pacer = Self.controller(buffer: 4)
        _ = Self.feed(&pacer, rounds: 4, perAck: 8, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
        pacer.burstLost()
        #expect(pacer.phase == .steady)
        #expect(pacer.window == Int((2 * 533.33 * 0.020).rounded(.up)) + 2)
        // The receiver overflowed, so the flight beyond its buffer is paced at the rate (times the round's gain).
        let expected = 1 / (533.33 * pacer.pacingGain)
        #expect(abs(pacer.gap.seconds - expected) < 0.0001)
    }

    /// A device taking 4 packets per 15 ms event at 267 a second: paced at the rate with the
    /// cruising gain, some events bring it 5. Where the link says its interval the gap is at
    /// least the interval over the buffer (3.75 ms), so no event brings more than the buffer;
    /// where it does not, the rate alone paces, as before.
    @Test func aKnownConnectionIntervalKeepsEachEventsBurstWithinTheBuffer() {
        var paced = PacingController(.init(initialWindow: 32, receiverBuffer: 4, ackInterval: 2, connectionInterval: .milliseconds(15)))
        var unknown = Self.controller(buffer: 4)
        for index in [0, 1] {
            var pacer = index == 0 ? paced : unknown
            _ = Self.feed(&pacer, rounds: 12, perAck: 4, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
            pacer.receiverStalled()
            if index == 0 { paced = pacer } else { unknown = pacer }
        }
        #expect(paced.window > 4)
        #expect(paced.gap >= .microseconds(3750))
        #expect(unknown.gap < .microseconds(3750), "\(unknown.gap)")
        // A shorter interval (a fleet's link alone on its adapter) shortens the gap with it.
        paced.connectionIntervalChanged(to: .microseconds(7500))
        #expect(paced.gap < .microseconds(3750))
        #expect(paced.gap >= .microseconds(1875))
        // A flight within the buffer is never paced, whatever the interval.
        var small = PacingController(.init(initialWindow: 4, receiverBuffer: 32, ackInterval: 2, connectionInterval: .milliseconds(15)))
        _ = Self.feed(&small, rounds: 6, perAck: 4, spacing: .milliseconds(15), roundTrip: .milliseconds(5))
        small.receiverStalled()
        #expect(small.window <= 32)
        #expect(small.gap == .zero)
    }

    @Test func aFlightTheBufferHoldsIsNeverPaced() {
        var pacer = Self.controller(buffer: 32)
        _ = Self.feed(&pacer, rounds: 6, perAck: 16, spacing: .milliseconds(30), roundTrip: .milliseconds(40))
        pacer.receiverStalled()
        // 2 × 533 × 0.040 + 2 = 45 > 32: the flight grows past the buffer and is paced...
        #expect(pacer.window > 32)
        #expect(pacer.gap > .zero)
        // ...while a short round trip keeps it within the buffer, where it needs no spacing.
        var near = Self.controller(buffer: 32)
        _ = Self.feed(&near, rounds: 6, perAck: 16, spacing: .milliseconds(30), roundTrip: .milliseconds(10))
        near.receiverStalled()
        near.burstLost()
        #expect(near.window == 32)
        #expect(near.gap == .zero)
    }

    /// Past startup, a flight beyond the buffer goes unpaced until the receiver shows it is the
    /// bottleneck: pacing a link-bound transfer at its own rate leaves connection events part empty.
    @Test func pacingWaitsForTheReceiverToShowItIsTheBottleneck() {
        var pacer = Self.controller(buffer: 4)
        _ = Self.feed(&pacer, rounds: 4, perAck: 8, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
        pacer.stalled()
        _ = Self.feed(&pacer, rounds: 40, perAck: 8, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
        #expect(pacer.receiverLimited == false)
        pacer.receiverStalled()
        #expect(pacer.phase == .steady)
        #expect(pacer.receiverLimited)
        #expect(pacer.gap > .zero)
    }

    @Test func theFlightNeverShrinksBelowTheFirstOneOnAFastLink() {
        var pacer = Self.controller(buffer: 32, window: 32, ackInterval: 16)
        pacer.burstLost()
        _ = Self.feed(&pacer, rounds: 10, perAck: 1, spacing: .milliseconds(30), roundTrip: .milliseconds(10))
        #expect(pacer.window == 32)
    }

    @Test func aBlackoutHalvesTheFlightUntilAcknowledgementsReturn() {
        var pacer = Self.controller(buffer: 4)
        let now = Self.feed(&pacer, rounds: 4, perAck: 8, spacing: .milliseconds(15), roundTrip: .milliseconds(20))
        pacer.burstLost()
        let steady = pacer.window
        pacer.stalled()
        #expect(pacer.window == max(2, steady / 2))
        _ = Self.feed(&pacer, rounds: 1, perAck: 8, spacing: .milliseconds(15), roundTrip: .milliseconds(20), from: now)
        #expect(pacer.window == steady)
    }

    /// Acknowledgements that arrive bunched must not read as a faster receiver: the
    /// rate is the best sample over the last second, and older ones age out.
    @Test func theRateIsTheBestRecentSample() {
        var pacer = Self.controller(buffer: 4)
        var now = Duration.milliseconds(100)
        for (delivered, interval) in [(4, 30), (8, 30), (2, 30)] {
            now += .milliseconds(interval)
            pacer.acknowledged(
                now: now, newlyDelivered: delivered,
                sample: .init(delivered: delivered, interval: .milliseconds(interval), deliveredAtSend: 0),
                roundTrip: .milliseconds(20))
        }
        #expect(abs(pacer.deliveryRate! - 8 / 0.030) < 0.01)
        now += .seconds(2)
        pacer.acknowledged(
            now: now, newlyDelivered: 1, sample: .init(delivered: 3, interval: .milliseconds(30), deliveredAtSend: 0),
            roundTrip: .milliseconds(20))
        #expect(abs(pacer.deliveryRate! - 3 / 0.030) < 0.01)
    }
}

/// Learning where a device erases flash from the gaps in its acknowledgements.
@Suite struct StallPredictorTests {
    /// 239-byte packets, an acknowledgement every 2: a 4 KiB page starts inside packet 17, 34, 51, …
    static func stalledAt(_ pages: [Int], page: Int = 4096, packet: Int = 239, ackInterval: Int = 2) -> StallPredictor {
        var predictor = StallPredictor(packetSize: packet, ackInterval: ackInterval)
        for index in pages {
            // The device acknowledged up to an even packet before the one holding the page start.
            let holder = index * page / packet
            predictor.observeStall(firstUnacknowledged: holder - holder % ackInterval, gap: .milliseconds(90))
        }
        return predictor
    }

    @Test func twoStallsOnPageStartsRevealThePage() {
        #expect(Self.stalledAt([1]).pageSize == nil)
        let predictor = Self.stalledAt([1, 2])
        #expect(predictor.pageSize == 4096)
        // The next page start after packet 40 is byte 12288, inside packet 51.
        #expect(predictor.nextStall(atOrAfter: 40) == 51)
        #expect(predictor.nextStall(atOrAfter: 51) == 51)
        #expect(predictor.nextStall(atOrAfter: 52) == 68)
        #expect(predictor.typicalStall == .milliseconds(90))
    }

    @Test func otherPageSizesAndPacketSizes() {
        #expect(Self.stalledAt([3, 5, 8], page: 2048, packet: 100).pageSize == 2048)
        #expect(Self.stalledAt([1, 2, 3], page: 65536, packet: 495, ackInterval: 16).pageSize == 65536)
    }

    @Test func stallsThatFitNoPageGiveNoPrediction() {
        var predictor = StallPredictor(packetSize: 239, ackInterval: 2)
        for packet in [5, 29, 44, 71] { predictor.observeStall(firstUnacknowledged: packet, gap: .milliseconds(90)) }
        #expect(predictor.pageSize == nil)
        #expect(predictor.nextStall(atOrAfter: 0) == nil)
    }

    @Test func aStrayStallAmongManyIsTolerated() {
        var predictor = Self.stalledAt([1, 2, 3, 4, 5, 6, 7])
        predictor.observeStall(firstUnacknowledged: 100, gap: .milliseconds(400))
        #expect(predictor.pageSize == 4096)
        // A blackout mistaken for a stall does not stretch the typical one.
        #expect(predictor.typicalStall == .milliseconds(90))
    }

    @Test func aGapIsAStallOnlyWhenFarLongerThanUsual() {
        var predictor = StallPredictor(packetSize: 239, ackInterval: 16)
        // A receiver acknowledging every 16 packets answers every 30 ms: that is its rhythm, not a stall.
        for _ in 0..<8 {
            let stall = predictor.acknowledgement(after: .milliseconds(30), shortestRoundTrip: .milliseconds(10), firstUnacknowledged: 16)
            #expect(!stall)
        }
        let twice = predictor.acknowledgement(after: .milliseconds(60), shortestRoundTrip: .milliseconds(10), firstUnacknowledged: 32)
        #expect(!twice)
        let fourTimes = predictor.acknowledgement(after: .milliseconds(120), shortestRoundTrip: .milliseconds(10), firstUnacknowledged: 48)
        #expect(fourTimes)
    }

    /// After the receiver is asked for an acknowledgement every 48 packets
    /// instead of 16, gaps three times as long are its new rhythm, not stalls.
    @Test func aLongerAcknowledgementIntervalScalesTheUsualGap() {
        var predictor = StallPredictor(packetSize: 239, ackInterval: 16)
        for _ in 0..<8 {
            let stall = predictor.acknowledgement(after: .milliseconds(30), shortestRoundTrip: .milliseconds(10), firstUnacknowledged: 16)
            #expect(!stall)
        }
        var unchanged = predictor
        let stallBefore = unchanged.acknowledgement(after: .milliseconds(95), shortestRoundTrip: .milliseconds(10), firstUnacknowledged: 64)
        #expect(stallBefore)
        predictor.ackIntervalChanged(to: 48)
        #expect(predictor.ackInterval == 48)
        let stallAfter = predictor.acknowledgement(after: .milliseconds(95), shortestRoundTrip: .milliseconds(10), firstUnacknowledged: 64)
        #expect(!stallAfter)
        // Four times the new rhythm still is a stall.
        let longStall = predictor.acknowledgement(after: .milliseconds(400), shortestRoundTrip: .milliseconds(10), firstUnacknowledged: 112)
        #expect(longStall)
    }

    /// The steady flight keeps one acknowledgement interval beyond twice the
    /// rate times the round trip: raising the interval raises the flight by as much.
    @Test func aLongerAcknowledgementIntervalWidensTheFlight() {
        var pacer = PacingControllerTests.controller(buffer: 32, ackInterval: 16)
        _ = PacingControllerTests.feed(&pacer, rounds: 8, perAck: 16, spacing: .milliseconds(30), roundTrip: .milliseconds(40))
        pacer.receiverStalled()
        let before = pacer.window
        pacer.ackIntervalChanged(to: 48)
        #expect(pacer.configuration.ackInterval == 48)
        #expect(pacer.window == before + 32)
    }
}

@Suite struct WindowedExtremumTests {
    @Test func theMaximumFollowsTheWindow() {
        var maximum = WindowedExtremum<Int>(.maximum, window: .milliseconds(100))
        #expect(maximum.value == nil)
        for (ms, value, expected) in [(0, 5, 5), (10, 3, 5), (20, 7, 7), (90, 1, 7), (125, 2, 2), (130, 4, 4), (500, 0, 0)] {
            maximum.add(value, at: .milliseconds(ms))
            #expect(maximum.value == expected, "at \(ms) ms")
        }
    }

    @Test func theMinimumOverManySamplesMatchesAScan() {
        var random = seededGenerator("theMinimumOverManySamplesMatchesAScan")
        var minimum = WindowedExtremum<Int>(.minimum, window: .milliseconds(50))
        var all: [(Int, Int)] = []
        for ms in stride(from: 0, to: 5_000, by: 3) {
            let value = Int(random.next() % 1000)
            all.append((ms, value))
            minimum.add(value, at: .milliseconds(ms))
            let expected = all.filter { ms - $0.0 <= 50 }.map(\.1).min()
            #expect(minimum.value == expected)
        }
    }
}
