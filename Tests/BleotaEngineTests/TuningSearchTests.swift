import Testing

@testable import BleotaEngine

@Suite struct TuningSearchTests {
    static let space = TuningSpace(
        packetSizes: [60, 120, 180, 240], windows: [2, 4, 8, 16, 32],
        delays: [.zero, .milliseconds(1), .milliseconds(2), .milliseconds(4), .milliseconds(8), .milliseconds(16)])

    /// A device with a 6-packet buffer: larger windows overflow it unless paced; bigger packets are better.
    static func landscape(_ point: TuningPoint) -> TuningTrial {
        let delayMs = Double(point.delayMicroseconds) / 1000
        let sendRate = Double(point.window) / (1 + delayMs * Double(point.window) / 4)
        let loss = sendRate > 6 ? min(0.6, (sendRate - 6) / 10) : 0
        let goodput = Double(point.packetSize) * sendRate * (1 - loss) * (1 - loss) * 100
        return TuningTrial(point: point, goodput: goodput, loss: loss, packetsSent: 100, packetsResent: Int(loss * 100))
    }

    @Test func theSearchFindsTheGridsBestInAQuarterOfItsTrials() async {
        let grid = await TuningSearch.grid(Self.space) { Self.landscape($0) }
        #expect(grid.count == Self.space.count)
        let start = TuningPoint(packetSize: 240, window: 32, delay: .zero)
        let searched = await TuningSearch.search(Self.space, from: start) { Self.landscape($0) }
        let best = grid.max { $0.score < $1.score }!
        let found = searched.max { $0.score < $1.score }!
        #expect(searched.count * 4 <= Self.space.count)
        #expect(found.score >= best.score * 0.95)
        #expect(found.loss < TuningSearch.acceptableLoss)
        #expect(searched.first?.point == start, "the default is measured first, as the reference")
        #expect(Set(searched.map(\.point)).count == searched.count, "no setting measured twice")
    }

    @Test func lossySettingsScoreBelowCleanOnesAndFailuresLowest() {
        let point = TuningPoint(packetSize: 100, window: 4, delay: .zero)
        let clean = TuningTrial(point: point, goodput: 10_000, loss: 0.005, packetsSent: 10, packetsResent: 0)
        let lossy = TuningTrial(point: point, goodput: 15_000, loss: 0.2, packetsSent: 10, packetsResent: 2)
        let failed = TuningTrial(point: point, goodput: 0, loss: 1, packetsSent: 0, packetsResent: 0, failure: "no answer")
        #expect(clean.score > lossy.score)
        #expect(failed.score < 0)
    }

    @Test func theChoiceSaysWhy() {
        let a = TuningTrial(point: TuningPoint(packetSize: 240, window: 32, delay: .zero), goodput: 5_000, loss: 0.4, packetsSent: 10, packetsResent: 4)
        let b = TuningTrial(point: TuningPoint(packetSize: 240, window: 4, delay: .zero), goodput: 18_000, loss: 0, packetsSent: 10, packetsResent: 0)
        let (chosen, reasons) = TuningSearch.choose([a, b], reference: a)!
        #expect(chosen == b)
        #expect(
            reasons == [
                "the highest goodput of the 1 settings that lost under 1 % of packets",
                "+260 % goodput over the default setting held fixed (packet 240, window 32, delay 0.0 ms)",
                "loss 0.0 % instead of the default's 40.0 %",
            ])
        #expect(TuningSearch.choose([], reference: nil) == nil)
    }
}
