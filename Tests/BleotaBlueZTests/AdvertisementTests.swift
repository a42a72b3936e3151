import BleotaATT
import BleotaCodec
import BleotaLink
import BleotaTestSupport
import Testing

@testable import BleotaBlueZ

@Suite struct AdvertisementTests {
    @Test func decodesFlagsNameUUIDsAndTXPower() {
        let data: [UInt8] =
            [
                0x02, 0x01, 0x06,  // flags: LE general discoverable, BR/EDR not supported
                0x05, 0x03, 0x0D, 0x18, 0x0A, 0x18,  // complete 16-bit UUIDs 180D, 180A
                0x11, 0x07,
            ] + Array(BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!.littleEndian) + [
                0x07, 0x09,
            ] + Array("bleota".utf8) + [  // complete local name
                0x02, 0x0A, 0xF8,  // TX power −8 dBm
            ]
        let ad = Advertisement(address: "C0:FF:EE:00:00:01", addressType: "random", rssi: -60, data: data)
        #expect(ad.flags == 0x06)
        #expect(ad.serviceUUIDs == ["180D", "180A", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        #expect(ad.localName == "bleota")
        #expect(ad.txPower == -8)
    }

    @Test func decodesAnIBeacon() {
        let uuid: [UInt8] = [0xE2, 0xC5, 0x6D, 0xB5, 0xDF, 0xFB, 0x48, 0xD2, 0xB0, 0x60, 0xD0, 0xF5, 0xA7, 0x10, 0x96, 0xE0]
        let data: [UInt8] = [0x02, 0x01, 0x06, 0x1A, 0xFF, 0x4C, 0x00, 0x02, 0x15] + uuid + [0x00, 0x01, 0x00, 0x02, 0xC5]
        let ad = Advertisement(address: "AA:BB:CC:DD:EE:FF", addressType: "public", rssi: nil, data: data)
        #expect(ad.manufacturer?.companyID == 0x004C)
        #expect(ad.iBeacon == .init(uuid: "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0", major: 1, minor: 2, measuredPower: -59))
    }

    @Test func malformedStructuresStopTheParseWithoutTrapping() {
        // The second structure claims 9 bytes but only 2 follow.
        let ad = Advertisement(address: "x", addressType: "public", rssi: nil, data: [0x02, 0x01, 0x04, 0x09, 0x09, 0x41, 0x42])
        #expect(ad.flags == 0x04)
        #expect(ad.localName == nil)
        // Zero length ends the data (the rest is padding); odd-length UUID lists keep whole UUIDs only.
        let padded = Advertisement(address: "x", addressType: "public", rssi: nil, data: [0x00, 0x02, 0x01, 0x04])
        #expect(padded.flags == nil)
        let odd = Advertisement(address: "x", addressType: "public", rssi: nil, data: [0x04, 0x03, 0x0D, 0x18, 0x0A])
        #expect(odd.serviceUUIDs == ["180D"])
        // Fuzz: nothing traps.
        var state: UInt64 = 1
        for _ in 0..<20_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1
            let bytes = (0..<Int(state >> 59)).map { UInt8(truncatingIfNeeded: state >> UInt64($0 % 8 * 8)) }
            _ = Advertisement(address: "x", addressType: "public", rssi: nil, data: bytes)
            _ = parseAdvertisingReports(bytes)
        }
    }

    @Test func parsesHCIAdvertisingReports() {
        // Subevent 0x02, one report: ADV_IND, public, 00:AA:01:01:00:01, 3 bytes of data, RSSI −70.
        let event: [UInt8] = [0x02, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x01, 0xAA, 0x00, 0x03, 0x02, 0x01, 0x06, 0xBA]
        let reports = parseAdvertisingReports(event)
        #expect(reports.count == 1)
        #expect(reports[0].address == "00:AA:01:01:00:01")
        #expect(reports[0].rssi == -70)
        #expect(reports[0].flags == 0x06)
        #expect(parseAdvertisingReports([0x02, 0x01, 0x00]).isEmpty)  // cut short
        #expect(parseAdvertisingReports([0x01]).isEmpty)  // another subevent
    }

    @Test func filtersByNameAddressAndService() {
        let ad = Advertisement(
            address: "C0:FF:EE:00:00:01", addressType: "public", rssi: -40,
            data: [0x03, 0x03, 0x0D, 0x18, 0x07, 0x09] + Array("bleota".utf8))
        #expect(ScanFilter(name: "BLE").matches(ad))
        #expect(!ScanFilter(name: "other").matches(ad))
        #expect(ScanFilter(address: "c0:ff:ee:00:00:01").matches(ad))
        #expect(ScanFilter(service: .bit16(0x180D)).matches(ad))
        #expect(!ScanFilter(service: .bit16(0x180A)).matches(ad))
    }
}

@Suite struct ManagementAdvertisingTests {
    @Test func commandsFollowTheManagementAPILayout() {
        // Set Powered on hci1: opcode 0x0005, index 1, one byte.
        #expect(ManagementCommand.setPowered(true).packet(index: 1).encode() == [0x05, 0x00, 0x01, 0x00, 0x01, 0x00, 0x01])
        let name = ManagementCommand.setLocalName("bleota-serve")
        #expect(name.parameters.count == 260)
        #expect(Array(name.parameters.prefix(12)) == Array("bleota-serve".utf8))
        #expect(Array(name.parameters[249..<259]) == Array("bleota-ser".utf8))
        let add = ManagementCommand.addAdvertising(
            instance: 1, data: [0x11, 0x07] + [UInt8](repeating: 0xAB, count: 16),
            scanResponse: Advertiser.scanResponse(name: "bleota-serve")
        ).packet(index: 2)
        // instance, flags (connectable | discoverable), duration, timeout, data length, scan response length, data, scan response
        #expect(Array(add.encode().prefix(17)) == [0x3E, 0x00, 0x02, 0x00, 43, 0x00, 0x01, 0x03, 0x00, 0x00, 0x00, 0, 0, 0, 0, 18, 14])
        #expect(Array(add.encode().suffix(14)) == [13, 0x09] + Array("bleota-serve".utf8))
    }

    @Test func statusesAreReadFromCommandCompleteAndStatusEventsForTheRightCommand() throws {
        // Command Complete (0x0001) for Add Advertising (0x003E) on index 0: status 0, instance 1.
        let complete = try ManagementPacket(decoding: [0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x3E, 0x00, 0x00, 0x01])
        #expect(try ManagementEvent(decoding: complete) == .commandComplete(opcode: 0x003E, status: .success, returnParameters: [0x01]))
        // Command Status (0x0002) permission denied for Set Powered.
        let status = try ManagementPacket(decoding: [0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x05, 0x00, 0x14])
        #expect(try ManagementEvent(decoding: status) == .commandStatus(opcode: 0x0005, status: .permissionDenied))
        // Too short, or a length that does not match what follows: a typed error, never a crash.
        #expect(throws: DecodingError.self) { try ManagementPacket(decoding: [0x01, 0x00]) }
        #expect(throws: DecodingError.self) { try ManagementPacket(decoding: [0x01, 0x00, 0x00, 0x00, 0x09, 0x00, 0x3E]) }
    }

    // MARK: The advertised firmware version

    @Test func anAdvertisedVersionIsManufacturerDataWithAMarkerAndMCUbootsLayout() {
        let version = MCUbootImage.Version(major: 1, minor: 2, revision: 0x0304, build: 0)
        #expect(AdvertisedVersion.structure(version) == [0x09, 0xFF, 0xFF, 0xFF, 0x62, 0x56, 0x01, 0x02, 0x04, 0x03])
        let built = MCUbootImage.Version(major: 1, minor: 2, revision: 3, build: 0x0A0B0C0D)
        #expect(AdvertisedVersion.payload(built) == [0x62, 0x56, 0x01, 0x02, 0x03, 0x00, 0x0D, 0x0C, 0x0B, 0x0A])
        #expect(AdvertisedVersion.decode(AdvertisedVersion.payload(built)) == built)
        #expect(AdvertisedVersion.decode([0x62, 0x56, 1, 2, 3]) == nil, "a version is 4 or 8 bytes after the marker")
        #expect(AdvertisedVersion.decode([0x62, 0x57, 1, 2, 3, 0]) == nil, "no marker, no version")
        let ad = Advertisement(
            address: "C0:FF:EE:00:00:01", addressType: "public", rssi: -50,
            data: [0x02, 0x01, 0x06] + AdvertisedVersion.structure(version, company: 0x0059))
        #expect(ad.version == "1.2.772")
        #expect(ad.manufacturer?.companyID == 0x0059, "any company's data may carry it")
    }

    @Test func serveTellsItsNameAndVersionInOneScanResponse() {
        let response = Advertiser.scanResponse(name: "bleota-serve", version: .init(major: 5, minor: 0, revision: 0, build: 0))
        #expect(response.count <= 31)
        let ad = Advertisement(address: "C0:FF:EE:00:00:01", addressType: "public", rssi: nil, data: response)
        #expect(ad.localName == "bleota-serve")
        #expect(ad.version == "5.0.0")
        let long = Advertiser.scanResponse(name: String(repeating: "n", count: 40), version: .init(major: 5, minor: 0, revision: 0, build: 7))
        #expect(long.count == 31, "the name is cut so that both fit")
        #expect(Advertisement(address: "x", addressType: "public", rssi: nil, data: long).version == "5.0.0.7")
    }

    @Test func randomManufacturerDataNeverTrapsTheVersionDecoder() {
        var random = seededGenerator("advertised version fuzz")
        for _ in 0..<2000 {
            let payload = (0..<Int.random(in: 0...12, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            let marked = Bool.random(using: &random) ? AdvertisedVersion.marker + payload : payload
            if let version = AdvertisedVersion.decode(marked) {
                #expect(AdvertisedVersion.payload(version).prefix(6) == marked.prefix(6))
            }
        }
    }

    @Test func aScanBasedFleetLeavesOutDevicesThatAdvertiseTheVersionOrNewer() {
        func device(_ address: String, rssi: Int, version: String?) -> Advertisement {
            var ad = Advertisement(address: address, addressType: "public", rssi: rssi, data: Array([0x05, 0x09] + "node".utf8))
            ad.version = version
            return ad
        }
        let seen = [
            device("A", rssi: -70, version: "1.0.0"), device("B", rssi: -40, version: "2.0.0"),
            device("C", rssi: -60, version: nil), device("D", rssi: -50, version: "2.1.0"),
            device("E", rssi: -90, version: "1.9.9"),
        ]
        let selection = ScanSelection(filter: ScanFilter(name: "node"), minimumRSSI: -80, olderThan: MCUbootImage.Version(parsing: "2.0.0"))
        let (chosen, current) = selection.choose(seen)
        #expect(chosen.map(\.address) == ["C", "A"], "older or unknown, strongest first; E is too weak")
        #expect(current.map(\.address) == ["B", "D"])
        #expect(ScanSelection(filter: ScanFilter(name: "node")).choose(seen).chosen.count == 5, "without a version, every match")
    }
}
