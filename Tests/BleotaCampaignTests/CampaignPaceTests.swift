import Testing

@testable import BleotaCampaign

/// The rate and ETA of `fleet status --watch`, from looks at known times.
@Suite struct CampaignPaceTests {
    @Test func theRateIsOverTheLastMinuteOfLooksAndTheEtaFollowsFromIt() {
        var pace = CampaignPace()
        pace.observe(finished: 0, of: 100, at: .zero)
        #expect(pace.perMinute == nil && pace.sentence == "rate: measuring")
        pace.observe(finished: 10, of: 100, at: .seconds(30))
        #expect(pace.perMinute == 20)
        #expect(pace.etaSeconds == 270)
        #expect(pace.sentence == "20 devices a minute, about 4 min 30 s left")
        // Two minutes on, only the last minute counts: 5 more devices in it.
        pace.observe(finished: 40, of: 100, at: .seconds(120))
        pace.observe(finished: 45, of: 100, at: .seconds(180))
        #expect(pace.looks.map(\.at) == [.seconds(120), .seconds(180)])
        #expect(pace.perMinute == 5)
        #expect(pace.sentence == "5 devices a minute, about 11 min 0 s left")
    }

    @Test func aStandstillAndAnEndAreSaid() {
        var pace = CampaignPace()
        pace.observe(finished: 7, of: 10, at: .zero)
        pace.observe(finished: 7, of: 10, at: .seconds(10))
        #expect(pace.etaSeconds == nil)
        #expect(pace.sentence == "0 devices a minute: none finishing now (halted, between stages, or waiting for its window)")
        pace.observe(finished: 10, of: 10, at: .seconds(20))
        #expect(pace.sentence == "9 devices a minute, every device finished")
    }
}
