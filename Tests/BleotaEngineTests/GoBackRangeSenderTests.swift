import Testing

@testable import BleotaEngine

/// Go-back-N over byte ranges as a table: what an in-order answer settles, what a go-back makes
/// stale, what counts as resent, and how tags, probes and restarts behave.
@Suite struct GoBackRangeSenderTests {
    typealias Sender = GoBackRangeSender<UInt8>

    @Test func requestsOfAnySizeMoveTheNextOffsetAndAnAnswerSettlesItsRequest() {
        var sender = Sender(total: 1000)
        sender.sent(1, offset: 0, end: 300, at: .zero)
        let second = sender.sent(2, offset: 300, end: 350, at: .milliseconds(5))
        #expect(sender.next == 350 && sender.liveCount == 2)
        #expect(second.behind && second.number == 2 && !second.resent)
        let answer = sender.answer(to: 1)
        #expect(answer?.request.end == 300 && answer?.firstLive?.tag == 1)
        sender.receiver(at: 300)
        #expect(sender.confirmed == 300 && sender.inFlight.map(\.tag) == [2])
    }

    @Test func anAnswerRemovesEveryRequestSentBeforeItAndNamesTheFirstLiveOne() {
        var sender = Sender(total: 1000)
        for tag in UInt8(1)...4 { sender.sent(tag, offset: Int(tag - 1) * 100, end: Int(tag) * 100, at: .zero) }
        let answer = sender.answer(to: 3)
        #expect(answer?.request.tag == 3)
        #expect(answer?.firstLive?.tag == 1, "1 and 2 went unanswered: the first of them is the one lost")
        #expect(sender.inFlight.map(\.tag) == [4])
        #expect(sender.answer(to: 2) == nil, "an answer to a request already passed over names nothing")
    }

    @Test func goingBackMakesEveryRequestOutStaleAndCountsTheBytesSentAgain() {
        var sender = Sender(total: 1000)
        for tag in UInt8(1)...3 { sender.sent(tag, offset: Int(tag - 1) * 100, end: Int(tag) * 100, at: .zero) }
        sender.receiver(at: 100)
        sender.goBack(to: 100)
        #expect(sender.liveCount == 0 && sender.inFlight.count == 3 && sender.next == 100)
        let resend = sender.sent(4, offset: 100, end: 250, at: .zero)
        #expect(resend.resent && !resend.behind, "the stale requests do not count as ahead of it")
        #expect(sender.resentRequests == 1 && sender.resentBytes == 150)
        let beyond = sender.sent(5, offset: 250, end: 400, at: .zero)
        #expect(beyond.resent && sender.resentBytes == 200, "only 250..<300 of it had gone out")
        #expect(sender.highestSent == 400)
        #expect(sender.answer(to: 2)?.request.stale == true)
        #expect(sender.oldestLive?.tag == 4)
    }

    @Test func aReusedTagReplacesItsOlderHolder() {
        var sender = Sender(total: 100_000)
        sender.sent(7, offset: 0, end: 10, at: .zero)
        sender.sent(8, offset: 10, end: 20, at: .zero)
        sender.sent(7, offset: 20, end: 30, at: .zero)
        #expect(sender.inFlight.map(\.offset) == [10, 20])
        #expect(sender.answer(to: 7)?.request.offset == 20)
    }

    @Test func aProbeGivesUpEveryRequestSentBeforeIt() {
        var sender = Sender(total: 1000)
        for tag in UInt8(1)...3 { sender.sent(tag, offset: Int(tag - 1) * 100, end: Int(tag) * 100, at: .zero) }
        let probedAfter = sender.requests
        sender.sent(4, offset: 300, end: 400, at: .zero)
        let missing = sender.giveUp(upTo: probedAfter)
        #expect(missing.map(\.tag) == [1, 2, 3])
        #expect(sender.inFlight.map(\.tag) == [4])
        #expect(sender.giveUp(upTo: probedAfter).isEmpty)
    }

    @Test func aStartAndARestartSetTheReceiversPoint() {
        var sender = Sender(total: 1000)
        sender.sent(1, offset: 0, end: 64, at: .zero)
        _ = sender.answer(to: 1)
        sender.start(at: 640)
        #expect(sender.confirmed == 640 && sender.next == 640, "a resumed upload goes on where the device stands")
        sender.sent(2, offset: 640, end: 700, at: .zero)
        sender.restart()
        #expect(sender.confirmed == 0 && sender.next == 0 && sender.liveCount == 0)
        #expect(sender.sent(3, offset: 0, end: 64, at: .zero).resent)
    }

    @Test func aReconnectionLeavesNothingLive() {
        var sender = Sender(total: 1000)
        sender.sent(1, offset: 0, end: 100, at: .zero)
        sender.sent(2, offset: 100, end: 200, at: .zero)
        sender.markInFlightStale()
        #expect(sender.liveCount == 0 && sender.oldestLive == nil && sender.next == 200)
    }
}
