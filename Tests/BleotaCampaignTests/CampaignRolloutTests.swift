import Testing

@testable import BleotaCampaign

/// A rollout's rules as a table: stages as written, how far each reaches, which device is in
/// which, and when a failure count halts.
@Suite struct CampaignRolloutTests {
    typealias Stage = CampaignRollout.Stage

    @Test func stagesAreWrittenAsNameAndSizeOrSizeAlone() throws {
        #expect(try Stage(parsing: "canary=10") == Stage(name: "canary", reach: .devices(10)))
        #expect(try Stage(parsing: "25%") == Stage(name: "25%", reach: .percent(25)))
        #expect(try Stage(parsing: "wide=7.5%").text == "wide=7.5%")
        #expect(try Stage(parsing: "100%").text == "100%")
        for (bad, says) in [
            ("canary=0", "neither a device count above 0 nor a share"), ("0%", "not a share above 0 % and at most 100 %"),
            ("101%", "not a share above 0 % and at most 100 %"), ("=10", "has an empty name"), ("ten", "neither a device count"),
        ] {
            #expect {
                try Stage(parsing: bad)
            } throws: { error in
                (error as? CampaignError)?.description.contains(says) == true
            }
        }
    }

    @Test func eachStageReachesTheDevicesOfTheStagesBeforeItToo() throws {
        let rollout = CampaignRollout(stages: try ["canary=10", "5%", "25%", "100%"].map { try Stage(parsing: $0) })
        #expect((0..<4).map { rollout.reach(ofStage: $0, total: 1000) } == [10, 50, 250, 1000])
        // 5 % of 100 is fewer than the canary: that stage adds nobody.
        #expect((0..<4).map { rollout.reach(ofStage: $0, total: 100) } == [10, 10, 25, 100])
        // A share rounds up: 5 % of 30 is 1.5 devices, so 2.
        #expect(try Stage(parsing: "5%").reach(of: 30) == 2)
        #expect(try Stage(parsing: "canary=10").reach(of: 4) == 4)
    }

    @Test func theLastStageMustReachEveryDeviceAndNamesAreUnique() throws {
        let short = CampaignRollout(stages: try ["canary=10", "50%"].map { try Stage(parsing: $0) })
        #expect(throws: CampaignError.badRollout("the last --stage (50%) reaches 50 of the 100 devices: end with --stage 100% so that every device is offered")) {
            try short.check(deviceCount: 100)
        }
        try short.check(deviceCount: 10)  // the canary alone is every device of a list of 10
        let twice = CampaignRollout(stages: [Stage(name: "a", reach: .devices(1)), Stage(name: "a", reach: .percent(100))])
        #expect(throws: CampaignError.badRollout("two stages are named 'a': name each once (NAME=SIZE)")) { try twice.check(deviceCount: 5) }
        try CampaignRollout().check(deviceCount: 3)
    }

    @Test func theSeedChoosesTheStagesDevicesTheSameWayEveryTime() throws {
        let seed = UInt64.random(in: 1...UInt64.max)
        print("CampaignRolloutTests seed \(seed)")
        let stages = try ["canary=10", "10%", "100%"].map { try Stage(parsing: $0) }
        let rollout = CampaignRollout(stages: stages, seed: seed)
        let first = rollout.stageOfEachDevice(total: 1000)
        #expect(first == rollout.stageOfEachDevice(total: 1000), "the same seed and list, the same stages")
        #expect(first.count(where: { $0 == 0 }) == 10 && first.count(where: { $0 == 1 }) == 90 && first.count(where: { $0 == 2 }) == 900)
        #expect(Array(first.prefix(10)) != [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "the canary is drawn from the whole list, not its head")
        let other = CampaignRollout(stages: stages, seed: seed &+ 1).stageOfEachDevice(total: 1000)
        #expect(other != first, "another seed, another choice")
        // Fixed: a seed's choice must not change between bleota versions (hosts may differ).
        let pinned = CampaignRollout(stages: [Stage(name: "one", reach: .devices(1)), Stage(name: "rest", reach: .percent(100))], seed: 42)
        #expect(pinned.stageOfEachDevice(total: 5) == [1, 0, 1, 1, 1])
        #expect(CampaignRollout().stageOfEachDevice(total: 3) == [0, 0, 0], "no stages: one stage of everything")
    }

    @Test func aWindowIsHoursOfTheDayAndMayRunPastMidnight() throws {
        let night = try CampaignRollout.ClaimWindow(parsing: "02:00-05:00", zone: "Europe/Berlin")
        #expect(night.start == 120 && night.end == 300 && night.text == "02:00-05:00 Europe/Berlin")
        #expect([119, 120, 299, 300].map { night.contains(minute: $0) } == [false, true, true, false])
        let late = try CampaignRollout.ClaimWindow(parsing: "22:00-02:00", zone: "UTC")
        #expect([1319, 1320, 1439, 0, 119, 120].map { late.contains(minute: $0) } == [false, true, true, true, true, false])
        #expect(try CampaignRollout.ClaimWindow(parsing: "20:00-24:00", zone: "UTC").contains(minute: 1439))
        for bad in ["2:00-05:00", "02:00", "25:00-01:00", "02:60-03:00", "03:00-03:00"] {
            #expect(throws: CampaignError.self, "\(bad)") { try CampaignRollout.ClaimWindow(parsing: bad, zone: "UTC") }
        }
        #expect(try CampaignRollout.ClaimRate(parsing: "20/min") == .init(count: 20, periodSeconds: 60))
        #expect(try CampaignRollout.ClaimRate(parsing: "100/h").text == "100/h")
        #expect(throws: CampaignError.badRollout("--rate '0/min' is not a number of devices per minute or hour: write it as 20/min or 100/h")) {
            try CampaignRollout.ClaimRate(parsing: "0/min")
        }
        #expect(throws: CampaignError.self) { try CampaignRollout.ClaimRate(parsing: "20/s") }
    }

    @Test func aHaltCountsTheChosenFailuresOnceEnoughDevicesFinished() throws {
        let rule = CampaignRollout.HaltRule(failedShare: 0.05, after: 20)
        #expect(rule.verdict(finished: 19, clean: 5, late: 0) == nil, "fewer than --halt-after finished")
        #expect(rule.verdict(finished: 40, clean: 1, late: 0) == nil, "2.5 %")
        #expect(rule.verdict(finished: 40, clean: 1, late: 1) == "2 of 40 finished devices failed (5 %), reaching --halt-when-failed 5% after at least 20")
        let late = CampaignRollout.HaltRule(failedShare: 0.1, counting: .late)
        #expect(late.verdict(finished: 10, clean: 5, late: 0) == nil, "clean failures are not what it counts")
        #expect(late.verdict(finished: 10, clean: 5, late: 1) == "1 of 10 finished devices failed late or unknown (10 %), reaching --halt-when-failed 10%")
        let clean = CampaignRollout.HaltRule(failedShare: 0.5, counting: .clean)
        #expect(clean.verdict(finished: 2, clean: 1, late: 1) == "1 of 2 finished devices failed cleanly (old image, untouched) (50 %), reaching --halt-when-failed 50%")
        #expect(clean.verdict(finished: 0, clean: 0, late: 0) == nil)
        #expect(throws: CampaignError.self) { try CampaignRollout.HaltRule.share(parsing: "0%") }
        #expect(try CampaignRollout.HaltRule.share(parsing: "5%") == 0.05)
        #expect(try CampaignRollout.HaltRule.share(parsing: "0.25") == 0.25)
    }
}
