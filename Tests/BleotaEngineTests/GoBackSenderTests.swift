import Testing

@testable import BleotaEngine

/// Go-back-N as a table: what goes out, what an acknowledgement, a gap report and a silence do.
@Suite struct GoBackSenderTests {
    /// Sends what the sender offers until the window is full; returns the units in order.
    static func drain(_ sender: inout GoBackSender) -> [Int] {
        var units: [Int] = []
        while let unit = sender.unitToSend {
            units.append(unit)
            sender.sent()
        }
        return units
    }

    @Test func sendsInOrderUpToTheWindowAndAnAcknowledgementOpensIt() {
        var sender = GoBackSender(unitCount: 10, window: 3)
        #expect(Self.drain(&sender) == [0, 1, 2])
        let opened = sender.acknowledged(before: 2)
        #expect(opened)
        #expect(Self.drain(&sender) == [3, 4])
        #expect(sender.base == 2 && sender.next == 5)
        #expect(sender.sentCount == 5 && sender.resentCount == 0)
    }

    @Test func aGapSendsAgainFromTheUnitTheReceiverMisses() {
        var sender = GoBackSender(unitCount: 10, window: 4)
        _ = Self.drain(&sender)
        let lost = sender.missing(from: 1)
        #expect(lost == 3, "1, 2 and 3 were in flight")
        #expect(Self.drain(&sender) == [1, 2, 3])
        #expect(sender.resentCount == 3 && sender.lostCount == 3)
    }

    @Test func aStaleGapReportChangesNothing() {
        var sender = GoBackSender(unitCount: 10, window: 4)
        _ = Self.drain(&sender)
        sender.acknowledged(before: 2)
        let acknowledgedAlready = sender.missing(from: 1)
        let notOut = sender.missing(from: 6)
        #expect(acknowledgedAlready == nil, "unit 1 is acknowledged already")
        #expect(notOut == nil, "unit 6 is not out")
        #expect(sender.next == 4 && sender.lostCount == 0)
    }

    @Test func aSilenceSendsAgainFromTheReceiversPointAndIsCountedUntilAnAnswer() {
        var sender = GoBackSender(unitCount: 10, window: 3)
        _ = Self.drain(&sender)
        sender.acknowledged(before: 1)
        _ = Self.drain(&sender)
        let first = sender.waitedInVain()
        let second = sender.waitedInVain()
        #expect(first == 1 && second == 2)
        #expect(Self.drain(&sender) == [1, 2, 3])
        sender.answered()
        #expect(sender.silentWaits == 0)
    }

    @Test func anAcknowledgementBehindThePointOrPastTheEndIsNoProgress() {
        var sender = GoBackSender(unitCount: 4, window: 4)
        _ = Self.drain(&sender)
        let moved = sender.acknowledged(before: 2)
        let behind = sender.acknowledged(before: 1)
        let pastTheEnd = sender.acknowledged(before: 5)
        #expect(moved && !behind && !pastTheEnd)
        #expect(sender.base == 2 && !sender.isComplete)
        let last = sender.acknowledged(before: 4)
        #expect(last && sender.isComplete && sender.sentEveryUnit)
    }

    @Test func aWindowChangedBetweenSendsIsTheFlightFromThen() {
        var sender = GoBackSender(unitCount: 10, window: 1)
        #expect(Self.drain(&sender) == [0])
        sender.window = 3
        #expect(Self.drain(&sender) == [1, 2])
        sender.acknowledged(before: 3)
        sender.window = 1
        #expect(Self.drain(&sender) == [3])
    }

    @Test func aResumedTransferStartsAtWhatTheReceiverHolds() {
        var sender = GoBackSender(unitCount: 6, start: 4, window: 8)
        #expect(Self.drain(&sender) == [4, 5])
        #expect(sender.resentCount == 0)
        sender.resume(at: 5)
        #expect(Self.drain(&sender) == [5])
        #expect(sender.resentCount == 1, "unit 5 had gone out before the reconnection")
    }
}
