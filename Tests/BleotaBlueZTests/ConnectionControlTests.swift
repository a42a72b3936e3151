import BleotaCodec
import BleotaLink
import BleotaTestSupport
import Testing

@testable import BleotaBlueZ

/// A controller played from a script: answers each command by opcode the way
/// the options say, and records what was written.
final class ScriptedController: HCITransport, @unchecked Sendable {
    /// Time passes only when the script has nothing to say, by exactly the timeout asked for.
    final class Clock: BleotaClock, @unchecked Sendable {
        var now: Duration = .zero
        func sleep(until deadline: Duration) async throws { now = max(now, deadline) }
    }
    let clock = Clock()
    /// Unrelated LE events (advertising reports) sent before every answer.
    var noise = 0
    var features: [UInt8] = [0xFF, 0x01, 0, 0, 0, 0, 0, 0]  // 2M (bit 8) supported, Coded (bit 11) not
    var setPHYStatus: UInt8 = 0
    var phyUpdate: (status: UInt8, phy: UInt8)? = (0, 2)
    var connectionUpdateStatus: UInt8 = 0
    var connectionUpdate: (status: UInt8, interval: UInt16)? = (0, 12)
    /// Sends LE meta events before the Command Status, as some controllers do.
    var eventBeforeStatus = false
    var currentPHY: UInt8 = 1
    var written: [[UInt8]] = []
    var queue: [[UInt8]] = []

    func write(_ packet: [UInt8]) throws(HCIError) {
        written.append(packet)
        let opcode = UInt16(packet[1]) | UInt16(packet[2]) << 8
        let handle = packet.count >= 6 ? [packet[4], packet[5]] : [0, 0]
        func complete(_ parameters: [UInt8]) -> [UInt8] { [0x04, 0x0E, UInt8(3 + parameters.count), 1, packet[1], packet[2]] + parameters }
        func status(_ value: UInt8) -> [UInt8] { [0x04, 0x0F, 4, value, 1, packet[1], packet[2]] }
        func meta(_ subevent: UInt8, _ parameters: [UInt8]) -> [UInt8] { [0x04, 0x3E, UInt8(1 + parameters.count), subevent] + parameters }
        switch opcode {
        case 0x2003: queue.append(complete([0] + features))
        case 0x2030: queue.append(complete([0] + handle + [currentPHY, currentPHY]))
        case 0x2032:
            var events = [status(setPHYStatus)]
            if setPHYStatus == 0, let update = phyUpdate {
                if update.status == 0 { currentPHY = update.phy }
                let event = meta(0x0C, [update.status] + handle + [update.phy, update.phy])
                if eventBeforeStatus { events.insert(event, at: 0) } else { events.append(event) }
            }
            queue += events
        case 0x2013:
            queue.append(status(connectionUpdateStatus))
            if connectionUpdateStatus == 0, let update = connectionUpdate {
                queue.append(meta(0x03, [update.status] + handle + [UInt8(update.interval & 0xFF), UInt8(update.interval >> 8), 0, 0, 0x90, 0x01]))
            }
        default: queue.append(status(0x01))
        }
    }

    func read(timeout: Duration) async throws(HCIError) -> [UInt8]? {
        if noise > 0 {
            noise -= 1
            clock.now += .milliseconds(1)
            return [0x04, 0x3E, 3, 0x02, 0x01, 0x00]
        }
        guard !queue.isEmpty else {
            clock.now += timeout
            return nil
        }
        return queue.removeFirst()
    }

    var controller: HCIController { HCIController(transport: self, clock: clock) }

    var opcodesWritten: [UInt16] { written.map { UInt16($0[1]) | UInt16($0[2]) << 8 } }
}

@Suite struct ConnectionControlTests {
    @Test func commandsFollowTheSpecLayout() {
        // LE Connection Update: opcode 0x2013, handle, min, max, latency, timeout, CE lengths.
        #expect(
            HCICommand.leConnectionUpdate(handle: 0x0040, interval: 6...12, latency: 0, supervisionTimeout: 400).encode()
                == [0x01, 0x13, 0x20, 14, 0x40, 0x00, 0x06, 0x00, 0x0C, 0x00, 0x00, 0x00, 0x90, 0x01, 0, 0, 0, 0])
        // LE Set PHY: opcode 0x2032, handle, ALL_PHYS, TX_PHYS, RX_PHYS, options.
        #expect(HCICommand.leSetPHY(handle: 0x0040, phy: .le2M).encode() == [0x01, 0x32, 0x20, 7, 0x40, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00])
        #expect(HCICommand.leSetPHY(handle: 1, phy: .coded).encode()[7] == 0x04)
        #expect(HCICommand.leReadPHY(handle: 0x0102).encode() == [0x01, 0x30, 0x20, 2, 0x02, 0x01])
    }

    @Test func eventsDecodeAndBadBytesAreErrors() throws {
        #expect(try HCIEvent(decoding: [0x04, 0x0F, 4, 0x11, 1, 0x32, 0x20]) == .commandStatus(status: 0x11, opcode: 0x2032))
        #expect(try HCIEvent(decoding: [0x04, 0x0E, 4, 1, 0x30, 0x20, 0x00]) == .commandComplete(opcode: 0x2030, returnParameters: [0]))
        #expect(try HCIEvent(decoding: [0x04, 0x3E, 2, 0x0C, 0x00]) == .leMeta(subevent: 0x0C, parameters: [0]))
        #expect(throws: DecodingError.self) { try HCIEvent(decoding: [0x04, 0x0F, 4, 0x11]) }
        #expect(throws: DecodingError.self) { try HCIEvent(decoding: [0x02, 0x0F, 0]) }
        #expect(throws: DecodingError.self) { try HCIEvent(decoding: []) }
        var random = seededGenerator("HCI events")
        for _ in 0..<2000 {
            let bytes = (0..<Int.random(in: 0...12, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            _ = try? HCIEvent(decoding: bytes)
        }
    }

    @Test func twoMegabitPHYAndIntervalAreAppliedAndReadBack() async {
        let controller = ScriptedController()
        let settings = await ConnectionControl.apply(
            ConnectionRequest(phy: .le2M, interval: 15...30), handle: 0x40, adapterName: "hci0",
            controller: controller.controller)
        #expect(settings.notes == [])
        #expect(settings.phy == "2M")
        #expect(settings.intervalMilliseconds == 15)
        #expect(settings.supervisionTimeoutMilliseconds == 4000)
        #expect(controller.opcodesWritten == [0x2003, 0x2032, 0x2013, 0x2030])
        // 15–30 ms is 12–24 units of 1.25 ms.
        #expect(Array(controller.written[2][6...9]) == [12, 0, 24, 0])
    }

    @Test func aPHYTheAdapterLacksIsReportedWithoutAsking() async {
        let controller = ScriptedController()
        let settings = await ConnectionControl.apply(
            ConnectionRequest(phy: .coded), handle: 0x40, adapterName: "hci0",
            controller: controller.controller)
        #expect(settings.notes == ["hci0 does not support the LE Coded PHY (its LE features lack it): the link stays on 1M"])
        #expect(!controller.opcodesWritten.contains(0x2032))
        #expect(settings.phy == "1M")
    }

    @Test func refusalsAndSilenceBecomeNotesNamingTheCause() async {
        let controller = ScriptedController()
        controller.setPHYStatus = 0x01
        controller.connectionUpdateStatus = 0x3B
        var settings = await ConnectionControl.apply(
            ConnectionRequest(phy: .le2M, interval: 7.5...7.5), handle: 0x40, adapterName: "hci0",
            controller: controller.controller)
        #expect(
            settings.notes == [
                "hci0 refused to set the 2M PHY (HCI status 0x01: unknown HCI command)",
                "the controller refused the connection interval 7.5–7.5 ms (HCI status 0x3b: unacceptable connection parameters)",
            ])
        #expect(settings.intervalMilliseconds == nil)

        let silent = ScriptedController()
        silent.phyUpdate = nil
        silent.connectionUpdate = (0x1A, 0)
        settings = await ConnectionControl.apply(
            ConnectionRequest(phy: .le2M, interval: 30...50), handle: 0x40, adapterName: "hci1",
            controller: silent.controller)
        #expect(
            settings.notes == [
                "the 2M PHY was requested but no PHY update completed within 3 s",
                "the peer did not accept the connection interval 30–50 ms (HCI status 0x1a: unsupported remote feature)",
            ])
        #expect(settings.phy == "1M")
    }

    @Test func anUpdateEventArrivingBeforeItsCommandStatusIsNotLost() async {
        let controller = ScriptedController()
        controller.eventBeforeStatus = true
        let settings = await ConnectionControl.apply(
            ConnectionRequest(phy: .le2M), handle: 0x40, adapterName: "hci0",
            controller: controller.controller)
        #expect(settings.notes == [])
        #expect(settings.phy == "2M")
    }

    @Test func aPeerThatRefusesThePHYIsNamed() async {
        let controller = ScriptedController()
        controller.phyUpdate = (0x1A, 1)
        let settings = await ConnectionControl.apply(
            ConnectionRequest(phy: .le2M), handle: 0x40, adapterName: "hci0",
            controller: controller.controller)
        #expect(settings.notes == ["the peer did not take the 2M PHY (HCI status 0x1a: unsupported remote feature)"])
        #expect(settings.summary == "PHY 1M")
    }

    @Test func aFloodOfUnrelatedEventsCannotStretchATimeout() async {
        let controller = ScriptedController()
        controller.phyUpdate = nil
        controller.noise = 100_000
        let settings = await ConnectionControl.apply(
            ConnectionRequest(phy: .le2M), handle: 0x40, adapterName: "hci0",
            controller: controller.controller)
        // Each command waits its 2 s of (scripted) time, then gives up with a note, however much noise is left.
        #expect(settings.notes == ["cannot set the PHY: the controller did not answer HCI command 0x2032 within 2.0 seconds"])
        #expect(settings.phy == nil)
        #expect(controller.noise == 100_000 - 3 * 2000)
    }

    @Test func intervalsParse() throws {
        #expect(try ConnectionRequest.parseInterval("7.5-15").get() == 7.5...15)
        #expect(try ConnectionRequest.parseInterval("30").get() == 30...30)
        let parsed = try BLEDeviceAddress.parse("ble://C0:FF:EE:00:00:01?phy=2M&interval=15-30").get()
        #expect(parsed.connection == ConnectionRequest(phy: .le2M, interval: 15...30))
        #expect(ConnectionSettings(phy: "2M", intervalMilliseconds: 7.5, peripheralLatency: 0).summary == "PHY 2M, interval 7.5 ms")
    }
}
