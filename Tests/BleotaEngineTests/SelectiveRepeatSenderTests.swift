import Testing

@testable import BleotaEngine

@Suite struct SelectiveRepeatSenderTests {
    @Test func sendsInOrderUpToTheWindow() {
        var sender = SelectiveRepeatSender(packetCount: 10)
        var sent: [Int] = []
        while let index = sender.nextPacket(window: 4) { sent.append(index) }
        #expect(sent == [0, 1, 2, 3])
        #expect(sender.inFlight == 4)
    }

    @Test func cumulativeAckOpensTheWindow() {
        var sender = SelectiveRepeatSender(packetCount: 10)
        while sender.nextPacket(window: 4) != nil {}
        let outcome = sender.acknowledge(nextExpected: 2, received: [])
        #expect(outcome == .init(newlyAcknowledged: 2, newlyLost: 0, newest: 1))
        #expect(sender.nextPacket(window: 4) == 4)
        #expect(sender.nextPacket(window: 4) == 5)
        #expect(sender.nextPacket(window: 4) == nil)
    }

    /// In-order delivery: a later packet acknowledged means earlier unacknowledged ones were lost.
    @Test func selectiveAckRevealsLossAndOnlyTheLostPacketIsResent() {
        var sender = SelectiveRepeatSender(packetCount: 6)
        while sender.nextPacket(window: 6) != nil {}
        // Receiver has 0, 1, 3, 4, 5 — packet 2 is missing.
        let outcome = sender.acknowledge(nextExpected: 2, received: [3, 4, 5])
        #expect(outcome == .init(newlyAcknowledged: 5, newlyLost: 1, newest: 5))
        #expect(sender.nextPacket(window: 6) == 2)
        #expect(sender.nextPacket(window: 6) == nil)
        #expect(sender.resentCount == 1)
        _ = sender.acknowledge(nextExpected: 6, received: [])
        #expect(sender.isComplete)
    }

    /// A packet sent after the newest acknowledged one is in flight, not lost.
    @Test func packetsSentAfterTheAcknowledgedOneAreNotLost() {
        var sender = SelectiveRepeatSender(packetCount: 6)
        for _ in 0..<3 { _ = sender.nextPacket(window: 6) }  // 0, 1, 2
        _ = sender.acknowledge(nextExpected: 1, received: [])  // 0 acked
        for _ in 0..<3 { _ = sender.nextPacket(window: 6) }  // 3, 4, 5
        let outcome = sender.acknowledge(nextExpected: 1, received: [1])  // 1 acked: nothing older missing
        #expect(outcome.newlyLost == 0)
        #expect(sender.inFlight == 4)
    }

    @Test func negativeAcknowledgementQueuesResend() {
        var sender = SelectiveRepeatSender(packetCount: 8)
        while sender.nextPacket(window: 8) != nil {}
        #expect(sender.negativeAcknowledge(first: 2, count: 2) == 2)
        #expect(sender.nextPacket(window: 8) == 2)
        #expect(sender.nextPacket(window: 8) == 3)
        // A second NACK for packets already queued or resent and in flight again resends again only if in flight.
        #expect(sender.negativeAcknowledge(first: 100, count: 5) == 0)
    }

    @Test func resumeSkipsHeldPacketsAndResendsTheRest() {
        var sender = SelectiveRepeatSender(packetCount: 10)
        for _ in 0..<6 { _ = sender.nextPacket(window: 10) }
        _ = sender.acknowledge(nextExpected: 3, received: [])
        sender.forgetInFlight()
        sender.markHeld { $0 == 4 }
        var sent: [Int] = []
        while let index = sender.nextPacket(window: 10) { sent.append(index) }
        #expect(sent == [3, 5, 6, 7, 8, 9])
        #expect(sender.resentCount == 2)  // 3 and 5 had been sent before the disconnect
    }

    @Test func timeoutMarksEverythingInFlightLost() {
        var sender = SelectiveRepeatSender(packetCount: 5)
        for _ in 0..<3 { _ = sender.nextPacket(window: 5) }
        #expect(sender.timeoutAllInFlight() == 3)
        #expect(sender.inFlight == 0)
        #expect(sender.nextPacket(window: 5) == 0)
    }
}

@Suite struct ReceiverWindowTests {
    @Test func reportsGapWhenALaterPacketArrives() {
        var window = ReceiverWindow(packetCount: 10)
        #expect(window.receive(sequence: 0) == .new(index: 0, gap: nil))
        #expect(window.receive(sequence: 3) == .new(index: 3, gap: 1..<3))
        #expect(window.receive(sequence: 1) == .new(index: 1, gap: nil))
        #expect(window.receive(sequence: 1) == .duplicate(index: 1))
        let ack = window.acknowledgement()
        #expect(ack.nextExpected == 2)
        #expect(ack.bitmap == [0b1])  // packet 3 = nextExpected + 1 + 0
    }

    @Test func rejectsSequenceNumbersOutsideTheTransfer() {
        var window = ReceiverWindow(packetCount: 4)
        #expect(window.receive(sequence: 9) == .outOfWindow)
        #expect(window.receive(sequence: 0xFFFF) == .outOfWindow)
    }

    @Test func unwrapsAcross65536Packets() {
        let count = 70_000
        var window = ReceiverWindow(packetCount: count)
        for index in 0..<count {
            guard case .new(let got, nil) = window.receive(sequence: SequenceNumber.wrap(index)) else {
                Issue.record("packet \(index) not accepted as new")
                return
            }
            #expect(got == index)
        }
        #expect(window.isComplete)
        #expect(window.acknowledgement().nextExpected == SequenceNumber.wrap(count))
    }

    @Test func resumedWindowAcksHeldPackets() {
        var window = ReceiverWindow(packetCount: 6)
        window.markHeld { $0 < 3 }
        window.restartSession()
        #expect(window.nextExpected == 3)
        #expect(window.receive(sequence: 3) == .new(index: 3, gap: nil))
    }
}

@Suite struct LossRunTests {
    /// A full receive queue drops the tail of a burst; radio noise drops packets here and there.
    @Test func adjacentLossesAreCountedAsOneRun() {
        var scattered = SelectiveRepeatSender(packetCount: 12)
        while scattered.nextPacket(window: 12) != nil {}
        // 2, 5 and 8 missing: three losses, none adjacent.
        _ = scattered.acknowledge(nextExpected: 2, received: [3, 4, 6, 7, 9, 10, 11])
        #expect(scattered.longestLossRun == 1)

        var tail = SelectiveRepeatSender(packetCount: 12)
        while tail.nextPacket(window: 12) != nil {}
        // 4, 5, 6 and 7 missing together.
        _ = tail.acknowledge(nextExpected: 4, received: [8, 9, 10, 11])
        #expect(tail.longestLossRun == 4)
        #expect(tail.hasLost)
        // The next acknowledgement reports the run of its own losses, not the old one.
        _ = tail.acknowledge(nextExpected: 4, received: [8, 9, 10, 11])
        #expect(tail.longestLossRun == 0)
    }

    @Test func newPacketsStopAtTheLimitButResendsDoNot() {
        var sender = SelectiveRepeatSender(packetCount: 10)
        var sent: [Int] = []
        while let index = sender.nextPacket(window: 10, newBelow: 4) { sent.append(index) }
        #expect(sent == [0, 1, 2, 3])
        _ = sender.acknowledge(nextExpected: 0, received: [1, 2, 3])
        #expect(sender.nextPacket(window: 10, newBelow: 4) == 0)
        #expect(sender.nextPacket(window: 10, newBelow: 4) == nil)
        #expect(sender.nextPacket(window: 10, newBelow: 6) == 4)
    }
}
