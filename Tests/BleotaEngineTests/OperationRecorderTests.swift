import BleotaLink
import BleotaTestSupport
import Synchronization
import Testing

@testable import BleotaEngine

@Suite struct OperationRecorderTests {
    @Test func stepsAreTimedReportedOnceAndLoadCanBeCountedQuietly() {
        let clock = ManualClock()
        let events = Events()
        var recorder = OperationRecorder(operation: "flash", protocolName: "p", device: "d", clock: clock, onEvent: events.add)
        recorder.beginQuietly(.load)
        clock.advance(.milliseconds(5))
        recorder.enter(.connect)
        clock.advance(.milliseconds(100))
        recorder.enter(.connect)
        recorder.enter(.transfer)
        clock.advance(.seconds(2))
        recorder.versionAfter = "2"
        let report = recorder.finish(
            bytes: 1000, transfer: TransferSummary(streamBytes: 1000, packetSize: 100, elapsed: .seconds(2)),
            statistics: TransferStatistics(), tuning: TransferTuning())
        #expect(events.steps == ["connect", "transfer"])
        #expect(report.stepSeconds == ["load": 0.005, "connect": 0.1, "transfer": 2])
        #expect(report.goodput == 500)
        #expect(report.protocolName == "p")
        #expect(report.versionAfter == "2")
        #expect(report.totalSeconds == 2.105)
    }

    @Test func theRoundTripEstimateFollowsSamplesWithinItsBounds() {
        var estimator = RoundTripEstimator()
        #expect(estimator.scaled(by: 3, minimum: .milliseconds(10), maximum: .seconds(1), fallback: .milliseconds(750)) == .milliseconds(750))
        estimator.add(.milliseconds(80))
        #expect(estimator.smoothed == .milliseconds(80))
        estimator.add(.milliseconds(160))
        #expect(estimator.smoothed == .milliseconds(90))
        #expect(estimator.scaled(by: 3, minimum: .milliseconds(10), maximum: .seconds(1), fallback: .zero) == .milliseconds(270))
        #expect(estimator.scaled(by: 30, minimum: .milliseconds(10), maximum: .seconds(1), fallback: .zero) == .seconds(1))
    }
}
