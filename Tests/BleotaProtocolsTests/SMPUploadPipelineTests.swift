import BleotaEngine
import Testing

@testable import BleotaProtocols

/// The upload policy as tables: what it sends, what each answer means, no I/O.
@Suite struct SMPUploadPipelineTests {
    static func pipeline(total: Int = 1000, chunk: Int = 100, single: Int? = nil, window: Int = 3) -> SMPUploadPipeline {
        SMPUploadPipeline(.init(total: total, chunk: chunk, firstChunk: chunk, singlePacketChunk: single, window: window))
    }

    /// Sends everything the pipeline asks to send now; returns the (sequence, offset, end) sent.
    static func sendAll(_ pipeline: inout SMPUploadPipeline, from sequence: inout UInt8) -> [(UInt8, Int, Int)] {
        var sent: [(UInt8, Int, Int)] = []
        while case .send(let offset, let end, _) = pipeline.nextAction() {
            pipeline.sent(sequence: sequence, offset: offset, end: end, at: .zero)
            sent.append((sequence, offset, end))
            sequence &+= 1
        }
        return sent
    }

    @Test func theFirstChunkAnnouncesAndNothingElseFlowsUntilItIsAnswered() {
        var pipeline = Self.pipeline()
        #expect(pipeline.nextAction() == .send(offset: 0, end: 100, first: true))
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        guard case .wait = pipeline.nextAction() else {
            Issue.record("sent more before the first answer")
            return
        }
        #expect(pipeline.answered(sequence: 0, offset: 100, match: nil, at: .milliseconds(30)) == .progress(offset: 100))
        var sequence: UInt8 = 1
        let sent = Self.sendAll(&pipeline, from: &sequence)
        #expect(sent.map(\.1) == [100, 200, 300], "the window of three")
    }

    @Test func aResumeAnswerMovesToTheDevicesOffset() {
        var pipeline = Self.pipeline()
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        let outcome1 = pipeline.answered(sequence: 0, offset: 600, match: nil, at: .zero)
        #expect(outcome1 == .moved(to: 600))
        #expect(pipeline.nextAction() == .send(offset: 600, end: 700, first: false))
        #expect(pipeline.lossEvents == 0, "a resume is not a loss")
    }

    @Test func aLostRequestIsResentFromTheDevicesOffsetAndStaleAnswersAreIgnored() {
        var pipeline = Self.pipeline(single: 50)
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 100, match: nil, at: .zero)
        var sequence: UInt8 = 1
        _ = Self.sendAll(&pipeline, from: &sequence)  // 100, 200, 300 as 1, 2, 3
        // Request 1 was lost: the device answers 2 with the offset it still expects.
        let outcome2 = pipeline.answered(sequence: 2, offset: 100, match: nil, at: .zero)
        #expect(outcome2 == .moved(to: 100))
        #expect(pipeline.lossEvents == 1)
        #expect(pipeline.chunkLimit == 50 && pipeline.window == 3, "after a loss, half the data per request and the same window")
        // Request 3, sent before the go-back, answers the same offset: nothing new.
        let outcome3 = pipeline.answered(sequence: 3, offset: 100, match: nil, at: .zero)
        #expect(outcome3 == .ignored)
        #expect(pipeline.nextAction() == .send(offset: 100, end: 150, first: false))
        // A duplicate of an answer already used is ignored too.
        let outcome4 = pipeline.answered(sequence: 2, offset: 100, match: nil, at: .zero)
        #expect(outcome4 == .ignored)
        #expect(pipeline.resentRequests == 0 && pipeline.resentBytes == 0, "nothing is resent before it goes out")
        let resent = Self.sendAll(&pipeline, from: &sequence)  // 100..<150, 150..<200, 200..<250
        #expect(resent.map(\.1) == [100, 150, 200])
        #expect(pipeline.resentRequests == 3 && pipeline.resentBytes == 150, "the requests and bytes sent a second time")
    }

    /// Before any round-trip sample the answer timeout is the longest (2 s); an echo sent after
    /// the shortest one (0.1 s) is answered only after every request before it, so its answer
    /// with the first chunk still unanswered shows the chunk lost.
    @Test func anEchoAnsweredBeforeAnOverdueChunkShowsTheChunkLost() {
        var shortLink = Self.pipeline(single: nil)  // the 23-byte MTU: no request fits a packet
        shortLink.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        #expect(shortLink.probeDelay == nil, "an echo's write could fill another request's hole there")
        var pipeline = Self.pipeline(single: 100)  // requests of one packet: a loss does not shrink them
        #expect(pipeline.probeDelay == nil, "nothing in flight, nothing to probe")
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        #expect(pipeline.answerTimeout == .seconds(2))
        #expect(pipeline.probeDelay == .milliseconds(100))
        pipeline.probeSent(sequence: 1)
        #expect(pipeline.probeDelay == nil, "one probe at a time")
        let stranger = pipeline.probeAnswered(sequence: 9)
        #expect(stranger == .ignored, "not the probe's answer")
        let probed = pipeline.probeAnswered(sequence: 1)
        #expect(probed == .moved(to: 0))
        #expect(pipeline.lossEvents == 1 && pipeline.inFlight.isEmpty)
        #expect(pipeline.nextAction() == .send(offset: 0, end: 100, first: true), "the first chunk again, at once")
        #expect(pipeline.timeoutsInARow == 0, "no timeout was waited out")

        // Answered before the probe's answer: the probe shows nothing missing.
        pipeline.sent(sequence: 2, offset: 0, end: 100, at: .seconds(1))
        pipeline.probeSent(sequence: 3)
        let answer = pipeline.answered(sequence: 2, offset: 100, match: nil, at: .seconds(1) + .milliseconds(40))
        #expect(answer == .progress(offset: 100))
        let nothingMissing = pipeline.probeAnswered(sequence: 3)
        #expect(nothingMissing == .ignored)
        #expect(pipeline.lossEvents == 1)

        // With a 40 ms round trip the steady state never probes (a 120 ms timeout), nor after one
        // timeout (240 ms); after two in a row (480 ms) probing pays again.
        var sequence: UInt8 = 4
        _ = Self.sendAll(&pipeline, from: &sequence)  // 100, 200, 300 as 4, 5, 6 (the resend above was no sample: Karn)
        let clean = pipeline.answered(sequence: 4, offset: 200, match: nil, at: .milliseconds(40))
        #expect(clean == .progress(offset: 200))
        _ = Self.sendAll(&pipeline, from: &sequence)
        #expect(pipeline.answerTimeout < .milliseconds(125) && pipeline.probeDelay == nil)
        let goesOn = pipeline.timedOut()
        #expect(goesOn)
        _ = Self.sendAll(&pipeline, from: &sequence)
        #expect(pipeline.answerTimeout < .milliseconds(250) && pipeline.probeDelay == nil)
        let stillGoesOn = pipeline.timedOut()
        #expect(stillGoesOn)
        _ = Self.sendAll(&pipeline, from: &sequence)
        #expect(pipeline.answerTimeout > .milliseconds(400) && pipeline.probeDelay == .milliseconds(100))
    }

    /// A device that answered and then answers nothing at all: the upload stalls once it has been
    /// silent for the silence limit, long before the stall limit's count of timeouts; an answer
    /// (an echo's too) restarts the count; a reconnect forgets it (the device may erase again); and
    /// on a link that was losing much, silence alone ends nothing.
    @Test func aDeviceSilentPastTheSilenceLimitStallsTheUploadWhateverTheTimeoutCount() {
        func healthy(clean: Int) -> SMPUploadPipeline {
            var pipeline = SMPUploadPipeline(
                .init(total: 100_000, chunk: 100, firstChunk: 100, singlePacketChunk: nil, window: 3, stallLimit: 30, silenceLimit: .seconds(20)))
            var sequence: UInt8 = 0
            // `clean` requests answered in turn, one second apart at the end.
            for index in 0..<clean {
                let sent = Self.sendAll(&pipeline, from: &sequence)
                guard let first = sent.first else { break }
                _ = pipeline.answered(sequence: first.0, offset: first.2, match: nil, at: .milliseconds(Int64(index * 10)))
                pipeline.heard(at: .seconds(1))
            }
            return pipeline
        }
        var pipeline = healthy(clean: 30)
        let after11 = pipeline.timedOut(at: .seconds(12))
        let after19 = pipeline.timedOut(at: .seconds(20.9))
        #expect(after11 && after19, "silent 19.9 s: not yet")
        pipeline.heard(at: .seconds(21))  // a probe's echo came back: the device is there
        let afterEcho19 = pipeline.timedOut(at: .seconds(40))
        #expect(afterEcho19 && !pipeline.isStalled)
        let afterEcho20 = pipeline.timedOut(at: .seconds(41))
        #expect(!afterEcho20, "silent 20 s after the echo, four timeouts of thirty")
        #expect(pipeline.isStalled && pipeline.wentSilent && pipeline.timeoutsInARow == 4)

        var reconnected = healthy(clean: 30)
        reconnected.reconnected()
        let afterReconnect = reconnected.timedOut(at: .seconds(60))
        #expect(afterReconnect && !reconnected.wentSilent, "after a reconnect the first answer may take as long as an erase")

        // A link that had lost a request in every few: a long silence may be bad luck there.
        var lossy = healthy(clean: 10)
        for second in 2...5 { _ = lossy.timedOut(at: .seconds(Double(second))) }
        lossy.heard(at: .seconds(6))
        let lossySilence = lossy.timedOut(at: .seconds(30))
        #expect(lossySilence && !lossy.wentSilent, "the stall limit's count decides on a lossy link")
    }

    @Test func onTheShortestMTUEachLossHalvesRequestsDownToAFloorAndCleanAnswersDoubleThemAgain() {
        var pipeline = Self.pipeline(chunk: 400, single: nil)
        pipeline.sent(sequence: 0, offset: 0, end: 400, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 400, match: nil, at: .zero)
        var sequence: UInt8 = 1
        _ = Self.sendAll(&pipeline, from: &sequence)
        let goesOn = pipeline.timedOut()
        #expect(goesOn)
        #expect(pipeline.window == 3, "the window stays: answers behind a lost request are how a loss is found")
        #expect(pipeline.nextAction() == .send(offset: 400, end: 600, first: false), "halved, from the last confirmed offset")
        for _ in 0..<4 { _ = pipeline.timedOut() }
        #expect(pipeline.chunkLimit == 16 && pipeline.window == 3, "no smaller than 16 data bytes when no request fits one link packet")
        _ = pipeline.timedOut()
        #expect(pipeline.window == 1, "lost again at the smallest requests: one at a time")
        var offset = 400
        func cleanAnswers(_ count: Int) {
            for _ in 0..<count {
                pipeline.sent(sequence: sequence, offset: offset, end: offset + pipeline.chunkLimit, at: .zero)
                offset += pipeline.chunkLimit
                _ = pipeline.answered(sequence: sequence, offset: offset, match: nil, at: .zero)
                sequence &+= 1
            }
        }
        cleanAnswers(8)
        #expect(pipeline.window == 3 && pipeline.chunkLimit == 16, "eight clean answers give the window back first")
        cleanAnswers(8)
        #expect(pipeline.chunkLimit == 32, "and eight more double the requests")
    }

    /// Where a request of one packet's worth exists, one timeout is no evidence of loss (a late
    /// answer looks the same): the size stays; from the second timeout in a row it is halved.
    @Test func aTimeoutAloneKeepsTheSizeAndTimeoutsInARowHalveIt() {
        var pipeline = Self.pipeline(chunk: 400, single: 100)
        pipeline.sent(sequence: 0, offset: 0, end: 400, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 400, match: nil, at: .zero)
        var sequence: UInt8 = 1
        _ = Self.sendAll(&pipeline, from: &sequence)
        _ = pipeline.timedOut()
        #expect(pipeline.nextAction() == .send(offset: 400, end: 800, first: false), "the same size, from the last confirmed offset")
        _ = pipeline.timedOut()
        #expect(pipeline.nextAction() == .send(offset: 400, end: 600, first: false), "the second in a row halves")
        for _ in 0..<3 { _ = pipeline.timedOut() }
        #expect(pipeline.chunkLimit == 100 && pipeline.window == 3, "no smaller than one packet's worth, and the window stays")
    }

    /// Losses the device's answers show size the requests: as many packets as arrive whole nine
    /// times in ten at the rate seen (ln 0.9 / ln(1 − p)), not halved at each loss.
    @Test func lossesTheAnswersShowSizeRequestsToTheLossRate() {
        var pipeline = Self.pipeline(total: 1_000_000, chunk: 1000, single: 50)
        #expect(pipeline.sizedForLoss == 1000, "nothing lost: full requests")
        var sequence: UInt8 = 0
        var offset = 0
        // 20 clean requests of 20 packets: 400 packets.
        for _ in 0..<20 {
            pipeline.sent(sequence: sequence, offset: offset, end: offset + 1000, at: .zero)
            offset += 1000
            _ = pipeline.answered(sequence: sequence, offset: offset, match: nil, at: .zero)
            sequence &+= 1
        }
        // Then one lost: the next request's answer says the device is still at `offset`.
        pipeline.sent(sequence: sequence, offset: offset, end: offset + 1000, at: .zero)
        pipeline.sent(sequence: sequence &+ 1, offset: offset + 1000, end: offset + 2000, at: .zero)
        let outcome = pipeline.answered(sequence: sequence &+ 1, offset: offset, match: nil, at: .zero)
        #expect(outcome == .moved(to: offset))
        // 1 lost in 440 packets: ln 0.9 / ln(1 − 1/440) = 46.3 → 46 packets, more than the chunk holds.
        #expect(pipeline.chunkLimit == 1000, "one loss in 440 packets keeps full requests")
        // Two more losses right away: 3 in 520 packets, ln 0.9 / ln(1 − 3/520) = 18.2 → 18 packets of 50 bytes.
        for _ in 0..<2 {
            sequence &+= 2
            pipeline.sent(sequence: sequence, offset: offset, end: offset + 1000, at: .zero)
            pipeline.sent(sequence: sequence &+ 1, offset: offset + 1000, end: offset + 2000, at: .zero)
            _ = pipeline.answered(sequence: sequence &+ 1, offset: offset, match: nil, at: .zero)
        }
        #expect(pipeline.chunkLimit == 900, "\(pipeline.chunkLimit)")
        #expect(pipeline.window == 3)
    }

    @Test func requestsThatFitOnePacketAreNotHalved() {
        var pipeline = Self.pipeline(chunk: 100, single: 100)
        #expect(!pipeline.configuration.requestsSpanPackets)
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 100, match: nil, at: .zero)
        let goesOn = pipeline.timedOut()
        #expect(goesOn)
        #expect(pipeline.chunkLimit == 100, "a lost datagram loses the same whatever its size")
    }

    @Test func theAnswerTimeoutDoublesWithEachTimeoutInARowAndResetsOnAnAnswer() {
        var pipeline = Self.pipeline()
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 100, match: nil, at: .milliseconds(40))
        let base = pipeline.answerTimeout
        #expect(base == .milliseconds(120), "three round trips of 40 ms")
        _ = pipeline.timedOut()
        #expect(pipeline.answerTimeout == base * 2)
        _ = pipeline.timedOut()
        #expect(pipeline.answerTimeout == base * 4)
        for _ in 0..<5 { _ = pipeline.timedOut() }
        #expect(pipeline.answerTimeout == pipeline.configuration.maximumAnswerTimeout, "never past the maximum")
        pipeline.sent(sequence: 1, offset: 100, end: 150, at: .seconds(1))
        _ = pipeline.answered(sequence: 1, offset: 150, match: nil, at: .seconds(1) + .milliseconds(40))
        #expect(pipeline.answerTimeout == base)
    }

    @Test func aHashMismatchStartsOverAndTooManyTimeoutsStall() {
        var pipeline = Self.pipeline(total: 200)
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 100, match: nil, at: .zero)
        pipeline.sent(sequence: 1, offset: 100, end: 200, at: .zero)
        let outcome5 = pipeline.answered(sequence: 1, offset: 200, match: false, at: .zero)
        #expect(outcome5 == .mismatch)
        #expect(pipeline.nextAction() == .send(offset: 0, end: 50, first: true), "announced again, with a request halved by the loss (the 23-byte MTU's rule)")
        var stalled = Self.pipeline()
        for _ in 0...stalled.configuration.stallLimit { _ = stalled.timedOut() }
        #expect(stalled.isStalled)
    }

    @Test func anAnswerOutsideTheImageIsIgnoredAndTheLastOneCompletes() {
        var pipeline = Self.pipeline(total: 150)
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        let outcome6 = pipeline.answered(sequence: 0, offset: 5000, match: nil, at: .zero)
        #expect(outcome6 == .ignored)
        pipeline.sent(sequence: 1, offset: 0, end: 100, at: .zero)
        _ = pipeline.answered(sequence: 1, offset: 100, match: nil, at: .zero)
        #expect(pipeline.nextAction() == .send(offset: 100, end: 150, first: false))
        pipeline.sent(sequence: 2, offset: 100, end: 150, at: .zero)
        let outcome7 = pipeline.answered(sequence: 2, offset: 150, match: true, at: .zero)
        #expect(outcome7 == .progress(offset: 150))
        #expect(pipeline.nextAction() == .done)
    }
}

/// What MCUboot's slots say of an update's image, as a table: each row slots in, the reading
/// out (what the engine's lifecycle is told, and why a device came back without the image).
@Suite struct SMPSlotReadingTests {
    static let hash = [UInt8](repeating: 0xAB, count: 32)
    static let old = SMPImageSlot(slot: 0, version: "1.0.0", hash: [UInt8](repeating: 1, count: 32), confirmed: true, active: true)
    static func staged(pending: Bool = false, permanent: Bool = false) -> SMPImageSlot {
        SMPImageSlot(slot: 1, version: "2.0.0", hash: hash, pending: pending, permanent: permanent)
    }
    static func running(confirmed: Bool) -> SMPImageSlot {
        SMPImageSlot(slot: 0, version: "2.0.0", hash: hash, confirmed: confirmed, active: true)
    }
    static func reading(_ slots: [SMPImageSlot]) -> SMPSlotReading { SMPSlotReading(slots, hash: hash) }

    @Test func whereTheImageIsSaysWhatTheEngineIsTold() {
        typealias Report = UpdateStateMachine.DeviceReport
        // Not there: sent; staged: held (the activation repeats); running: owed a confirmation only
        // in the mode that asks for one.
        #expect(Self.reading([Self.old]).report(.testAndConfirm) == Report(mode: .application, version: "1.0.0", target: .absent))
        #expect(Self.reading([Self.old, Self.staged()]).report(.testAndConfirm) == Report(mode: .application, version: "1.0.0", target: .held))
        #expect(Self.reading([Self.old, Self.staged(pending: true)]).report(.test)?.target == .held)
        #expect(
            Self.reading([Self.running(confirmed: false), Self.old]).report(.testAndConfirm)
                == Report(mode: .application, version: "2.0.0", target: .running(confirmationOwed: true)))
        #expect(Self.reading([Self.running(confirmed: false), Self.old]).report(.test)?.target == .running(confirmationOwed: false))
        #expect(Self.reading([Self.running(confirmed: true), Self.old]).report(.testAndConfirm)?.target == .running(confirmationOwed: false))
        // A device that runs nothing it names: what it runs is unknown.
        #expect(Self.reading([Self.staged()]).report(.testAndConfirm) == nil)
    }

    @Test func aMarkTookWhenTheImageIsPendingOrRunning() {
        #expect(!Self.reading([Self.old, Self.staged()]).marked)
        #expect(Self.reading([Self.old, Self.staged(pending: true)]).marked)
        #expect(Self.reading([Self.running(confirmed: false), Self.old]).marked)
        #expect(!Self.reading([Self.old]).marked)
    }

    @Test func aDeviceBackFromTheResetRunsTheImageStillPendingOrElsewhere() {
        #expect(Self.reading([Self.running(confirmed: false), Self.old]).afterReset == .runs(Self.running(confirmed: false)))
        #expect(Self.reading([Self.old, Self.staged(pending: true)]).afterReset == .stillPending)
        #expect(Self.reading([Self.old, Self.staged()]).afterReset == .elsewhere)
        #expect(Self.reading([Self.old]).afterReset == .elsewhere)
    }

    @Test func aDeviceThatComesBackWithTheOldImageSaysWhy() {
        let refused = Self.reading([Self.old]).failure(version: "2.0.0")
        #expect(refused.message.contains("MCUboot refused the image at boot"))
        #expect(
            refused.message.contains("check it is signed with the key the bootloader trusts; if it is, it arrived damaged, so flash it again"),
            "both causes and their fixes: SMP has no check per request, and one flipped bit can turn the answer's match false into true")
        #expect(refused.outcome == .oldImage("1.0.0"))
        #expect(refused.step == .reconnect && refused.code == .verificationFailed)
        let reverted = Self.reading([Self.old, Self.staged()]).failure(version: "2.0.0")
        #expect(reverted.message.contains("MCUboot reverted the image"))
        #expect(reverted.outcome == .oldImage("1.0.0"))
        #expect(Self.reading([Self.staged()]).failure(version: "2.0.0").message.contains("running nothing"))
    }
}

/// Back-pressure and requests the device reads cut short.
extension SMPUploadPipelineTests {
    /// Zephyr after a stall: a request kept in a full buffer is answered "out of memory", its data
    /// not written. The pipeline goes back to the device's offset without counting a loss, halves
    /// the window, and asks for a pause that doubles while such answers come in a row.
    @Test func outOfMemoryHalvesTheWindowAndSendsTheSameOffsetAgainAfterAPause() {
        var pipeline = Self.pipeline(total: 2000, window: 4)
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 100, match: nil, at: .milliseconds(20))
        var sequence: UInt8 = 1
        #expect(Self.sendAll(&pipeline, from: &sequence).map(\.1) == [100, 200, 300, 400])
        let pause = pipeline.busy(sequence: 1)
        #expect(pause >= .milliseconds(100), "at least the shortest answer timeout: \(pause)")
        #expect(pipeline.window == 2 && pipeline.lossEvents == 0)
        #expect(pipeline.busy(sequence: 2) == .zero, "an answer to a request already given up on asks for nothing")
        #expect(pipeline.nextAction() == .send(offset: 100, end: 200, first: false))
        pipeline.sent(sequence: 9, offset: 100, end: 200, at: .milliseconds(200))
        let second = pipeline.busy(sequence: 9)
        #expect(second == pause * 2 && pipeline.window == 1, "in a row: twice the pause, half the window again")
        pipeline.sent(sequence: 10, offset: 100, end: 200, at: .milliseconds(600))
        #expect(pipeline.answered(sequence: 10, offset: 200, match: nil, at: .milliseconds(620)) == .progress(offset: 200))
        #expect(pipeline.busyInARow == 0)
        // Clean answers bring the window back.
        var at = Duration.milliseconds(700)
        var sent = 0
        while pipeline.window < 4, sent < 40, case .send(let offset, let end, _) = pipeline.nextAction() {
            pipeline.sent(sequence: sequence, offset: offset, end: end, at: at)
            at += .milliseconds(20)
            _ = pipeline.answered(sequence: sequence, offset: end, match: nil, at: at)
            sequence &+= 1
            sent += 1
        }
        #expect(pipeline.window == 4 && pipeline.busyWindow == nil, "after \(sent) clean answers")
    }

    @Test func outOfMemoryAtEveryTryStallsTheUpload() {
        var pipeline = SMPUploadPipeline(.init(total: 1000, chunk: 100, singlePacketChunk: nil, window: 2, stallLimit: 3))
        pipeline.sent(sequence: 0, offset: 0, end: 100, at: .zero)
        _ = pipeline.answered(sequence: 0, offset: 100, match: nil, at: .zero)
        for sequence: UInt8 in 1...4 {
            #expect(!pipeline.isStalled)
            pipeline.sent(sequence: sequence, offset: 100, end: 200, at: .zero)
            _ = pipeline.busy(sequence: sequence)
        }
        #expect(pipeline.isStalled)
    }

    /// A datagram longer than the device reads arrives cut, and its header then says "corrupt":
    /// twice in a row, requests are halved and never grow back to the size refused.
    @Test func requestsRefusedAsCutTwiceInARowGetSmallerAndStaySmaller() {
        var pipeline = Self.pipeline(total: 20_000, chunk: 2000, single: 2000, window: 2)
        pipeline.sent(sequence: 0, offset: 0, end: 2000, at: .zero)
        pipeline.refused(sequence: 0, cut: true)
        #expect(pipeline.nextAction() == .send(offset: 0, end: 2000, first: true), "once may be damage on the way")
        pipeline.sent(sequence: 1, offset: 0, end: 2000, at: .zero)
        pipeline.refused(sequence: 1, cut: true)
        #expect(pipeline.nextAction() == .send(offset: 0, end: 1000, first: true))
        pipeline.sent(sequence: 2, offset: 0, end: 1000, at: .zero)
        _ = pipeline.answered(sequence: 2, offset: 1000, match: nil, at: .milliseconds(10))
        var sequence: UInt8 = 3
        var at = Duration.milliseconds(10)
        var largest = 0
        for _ in 0..<15 {
            guard case .send(let offset, let end, _) = pipeline.nextAction() else { break }
            largest = max(largest, end - offset)
            pipeline.sent(sequence: sequence, offset: offset, end: end, at: at)
            at += .milliseconds(10)
            _ = pipeline.answered(sequence: sequence, offset: end, match: nil, at: at)
            sequence &+= 1
        }
        #expect(largest == 1999, "grown back to just below the size refused, not to it")
        #expect(pipeline.refusedChunk == 2000)
    }

    @Test func refusalsThatAreNotCutDoNotShrinkRequests() {
        var pipeline = Self.pipeline(total: 20_000, chunk: 2000, single: 2000, window: 2)
        for sequence: UInt8 in 0...2 {
            pipeline.sent(sequence: sequence, offset: 0, end: 2000, at: .zero)
            pipeline.refused(sequence: sequence)
        }
        #expect(pipeline.nextAction() == .send(offset: 0, end: 2000, first: true))
        #expect(pipeline.refusedChunk == nil)
    }
}
