import BleotaEngine
import Testing

@testable import BleotaProtocols

/// One request at a time where the losses fall on requests sent behind others (a device whose queue
/// overflows), the window where they fall anywhere (a link that loses writes).
@Suite struct SMPWindowChoiceTests {
    static func choice(
        alone: (arrived: Int, lost: Int), behind: (arrived: Int, lost: Int), measures: Bool = true
    ) -> (SMPWindowChoice, Int?) {
        var choice = SMPWindowChoice(configured: 3, measures: measures)
        var changed: Int?
        for _ in 0..<alone.arrived { choice.arrived(behind: false) }
        for _ in 0..<behind.arrived { choice.arrived(behind: true) }
        for _ in 0..<alone.lost { changed = choice.lost(behind: false) ?? changed }
        for _ in 0..<behind.lost { changed = choice.lost(behind: true) ?? changed }
        return (choice, changed)
    }

    @Test func lossesBehindOthersOnlyMeanOneAtATime() {
        let (flooded, change) = Self.choice(alone: (6, 0), behind: (3, 3))
        #expect(change == 1 && flooded.current == 1)
        let (nearlyClean, _) = Self.choice(alone: (6, 1), behind: (3, 3))
        #expect(nearlyClean.current == 1, "one alone lost in seven against half behind: still the queue")
    }

    @Test func lossesAnywhereKeepTheWindow() {
        #expect(Self.choice(alone: (4, 2), behind: (3, 3)).0.current == 3, "a third alone lost: the link loses writes")
        #expect(Self.choice(alone: (6, 0), behind: (27, 3)).0.current == 3, "a tenth behind lost: what sizing for loss leaves")
        #expect(Self.choice(alone: (3, 0), behind: (3, 3)).0.current == 3, "too few alone to tell")
        #expect(Self.choice(alone: (6, 0), behind: (2, 2)).0.current == 3, "too few lost behind to tell")
        #expect(Self.choice(alone: (6, 0), behind: (3, 3), measures: false).0.current == 3, "--window fixed it")
    }

    @Test func aLossOneAtATimeBringsTheWindowBackAndDoublesTheEvidence() {
        var (choice, _) = Self.choice(alone: (6, 0), behind: (3, 3))
        #expect(choice.current == 1)
        #expect(choice.lost(behind: false) == 3)
        #expect(choice.current == 3 && choice.evidenceNeeded == 6)
        for _ in 0..<6 { choice.arrived(behind: false) }
        for _ in 0..<5 {
            choice.arrived(behind: true)
            #expect(choice.lost(behind: true) == nil)
        }
        #expect(choice.lost(behind: true) == 1, "six lost behind now")
    }

    /// The pipeline against a device that drops every request sent behind another still in flight:
    /// it ends one at a time, with full-sized requests again, and loses nothing more from then on.
    @Test func thePipelineGoesOneAtATimeAgainstADeviceThatDropsWhatQueuesBehind() {
        var pipeline = SMPUploadPipeline(
            .init(total: 60_000, chunk: 2000, firstChunk: 2000, singlePacketChunk: 200, window: 3, measuresWindow: true))
        var device = 0
        var sequence: UInt8 = 0
        var lossesAtTheSwitch: Int?
        for _ in 0..<400 where !pipeline.isComplete {
            var burst: [(sequence: UInt8, offset: Int, end: Int, behind: Bool)] = []
            while case .send(let offset, let end, _) = pipeline.nextAction() {
                pipeline.sent(sequence: sequence, offset: offset, end: end, at: .zero)
                burst.append((sequence, offset, end, pipeline.inFlight.last?.behind ?? false))
                sequence &+= 1
            }
            var answered = false
            for request in burst where !request.behind {
                if request.offset == device { device = request.end }
                _ = pipeline.answered(sequence: request.sequence, offset: device, match: nil, at: .zero)
                answered = true
            }
            if !answered { _ = pipeline.timedOut() }
            if pipeline.window == 1, lossesAtTheSwitch == nil { lossesAtTheSwitch = pipeline.lossEvents }
        }
        #expect(pipeline.isComplete && device == 60_000)
        #expect(pipeline.window == 1)
        #expect(pipeline.chunkLimit == 2000, "full-sized requests again")
        #expect(lossesAtTheSwitch == pipeline.lossEvents, "nothing lost one at a time")
    }
}
