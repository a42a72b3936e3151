import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Testing

@testable import BleotaFleet

/// A transfer that will keep its adapter to itself asks for the shortest connection interval, and for
/// its opening one again as soon as that may change (GatedTransferTurn with a ConnectionIntervalControl link).
@Suite struct AloneTransferIntervalTests {
    /// A connector that gives out the same recording link every time.
    struct RecordingConnector: DeviceConnector {
        let link: RecordingIntervalLink
        var description: String { "recorder" }
        func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link { link }
    }

    @Test func theLastTransferOnTheRadioIsShortenedAndGivesItBack() async throws {
        let clock = ManualClock()
        let gate = TransferGate(capacity: 2)
        let (a, b) = (RecordingIntervalLink(), RecordingIntervalLink())
        let (turnA, turnB) = (GatedTransferTurn(gate: gate), GatedTransferTurn(gate: gate))
        // Links come through a host context's connector, as every protocol opens them.
        let contextA = HostContext(protocolName: "test", connector: RecordingConnector(link: a), clock: clock, transferTurn: turnA)
        let contextB = HostContext(protocolName: "test", connector: RecordingConnector(link: b), clock: clock, transferTurn: turnB)
        _ = try await contextA.connect(.initial, step: .connect)
        _ = try await contextB.connect(.initial, step: .connect)

        // Alone, but a device may still come (B's turn is made, the fleet has devices to start): nothing.
        await turnA.wait(clock: clock)
        #expect(a.asked.isEmpty)
        gate.setOpenToNewcomers(false)
        #expect(a.asked.isEmpty, "B's transfer is still to come")
        await turnB.wait(clock: clock)
        #expect(a.asked.isEmpty && b.asked.isEmpty, "two transfers share the radio")

        // B ends: A will be alone to the end, and is shortened.
        turnB.release()
        #expect(a.asked == [7.5])
        #expect(b.asked.isEmpty, "B holds no place")

        // A retry made for this adapter is to come: A goes back at once, and again short when it ends.
        let retry = GatedTransferTurn(gate: gate)
        #expect(a.asked == [7.5, 15])
        retry.release()
        #expect(a.asked == [7.5, 15, 7.5])

        // Devices to start again (the fleet reopens): back; and A's own end gives the interval back.
        gate.setOpenToNewcomers(true)
        #expect(a.asked == [7.5, 15, 7.5, 15])
        gate.setOpenToNewcomers(false)
        turnA.release()
        #expect(a.asked == [7.5, 15, 7.5, 15, 7.5, 15])
        #expect(a.connectionInterval == .milliseconds(15))
    }

    @Test func aLinkOpenedDuringTheLastTransferIsShortenedToo() async throws {
        let clock = ManualClock()
        let gate = TransferGate(capacity: 2)
        gate.setOpenToNewcomers(false)
        let (first, resumed) = (RecordingIntervalLink(), RecordingIntervalLink())
        let turn = GatedTransferTurn(gate: gate)
        await turn.wait(clock: clock)
        turn.adopt(first)
        #expect(first.asked == [7.5])
        // The link dropped and the transfer resumes on a new one: the new one is asked, the old left alone.
        turn.adopt(resumed)
        #expect(resumed.asked == [7.5])
        #expect(first.asked == [7.5])
        turn.release()
        #expect(resumed.asked == [7.5, 15])
    }

    @Test func aTurnThatDoesNotShortenAsksNothing() async {
        let clock = ManualClock()
        let gate = TransferGate(capacity: 1)
        gate.setOpenToNewcomers(false)
        let link = RecordingIntervalLink()
        let turn = GatedTransferTurn(gate: gate, shortensAloneLinks: false)
        turn.adopt(link)
        await turn.wait(clock: clock)
        turn.release()
        #expect(link.asked.isEmpty)
    }
}
