import Testing

@testable import BleotaFleet

/// Device lists: addresses a line, CSV with per-device options, JSON; mistakes named by file and line.
@Suite struct FleetDeviceListTests {
    @Test func addressesOneALineWithComments() throws {
        let devices = try FleetDeviceList.parse(
            """
            # line 1 is a comment
            ble://AA:BB:CC:DD:EE:01
            ble://AA:BB:CC:DD:EE:02   # the second board

            sim://2m-dle?seed=3
            """, file: "devices.txt")
        #expect(devices.map(\.address) == ["ble://AA:BB:CC:DD:EE:01", "ble://AA:BB:CC:DD:EE:02", "sim://2m-dle?seed=3"])
        #expect(devices[1].label == "ble://AA:BB:CC:DD:EE:02" && devices[1].adapter == nil)
        #expect(devices.map(\.listedAt) == [.line(2), .line(3), .line(5)], "the lines the addresses are on, for messages")
    }

    @Test func csvCarriesAdapterProtocolLabelAndOptions() throws {
        let devices = try FleetDeviceList.parse(
            """
            device,adapter,protocol,label,option:bootloader-name
            ble://AA:BB:CC:DD:EE:01,hci1,nordic-dfu,door,DfuNew
            ble://AA:BB:CC:DD:EE:02,,,,
            """, file: "devices.csv")
        #expect(devices.count == 2)
        #expect(
            devices[0]
                == FleetDevice(
                    address: "ble://AA:BB:CC:DD:EE:01", adapter: "hci1", protocolName: "nordic-dfu",
                    protocolOptions: ["bootloader-name": "DfuNew"], label: "door"))
        #expect(devices[1] == FleetDevice(address: "ble://AA:BB:CC:DD:EE:02"))
        #expect(devices.map(\.listedAt) == [.line(2), .line(3)])
    }

    @Test func jsonTakesAddressesOrObjects() throws {
        let devices = try FleetDeviceList.parse(
            """
            ["sim://2m-dle?seed=1", {"device": "sim://slow-flash?seed=2", "adapter": "sim1", "options": {"suota-transport": "gatt"}}]
            """, file: "devices.json")
        #expect(devices.map(\.address) == ["sim://2m-dle?seed=1", "sim://slow-flash?seed=2"])
        #expect(devices[1].adapter == "sim1" && devices[1].protocolOptions == ["suota-transport": "gatt"])
    }

    /// A row may say how the device pairs: its passkey (leading zeros kept), or that its bond must exist.
    @Test func aRowCarriesAPasskeyOrSaysTheBondMustExist() throws {
        let csv = try FleetDeviceList.parse(
            """
            device,passkey,bonded
            ble://AA:BB:CC:DD:EE:01,012345,
            ble://AA:BB:CC:DD:EE:02,,yes
            ble://AA:BB:CC:DD:EE:03,,no
            """, file: "devices.csv")
        #expect(csv.map(\.pairing) == [.passkey(12345), .bonded, nil])
        #expect(csv[0].pairing?.text == "passkey:12345" && DevicePairing(text: "passkey:12345") == .passkey(12345))
        #expect(DevicePairing(text: "bonded") == .bonded && DevicePairing(text: "passkey:1234567") == nil && DevicePairing(text: "x") == nil)
        let json = try FleetDeviceList.parse(
            """
            [{"device": "ble://AA:BB:CC:DD:EE:01", "passkey": "000042"}, {"device": "ble://AA:BB:CC:DD:EE:02", "passkey": 123456},
             {"device": "ble://AA:BB:CC:DD:EE:03", "bonded": true}]
            """, file: "devices.json")
        #expect(json.map(\.pairing) == [.passkey(42), .passkey(123_456), .bonded])
        #expect(json[0] != FleetDevice(address: "ble://AA:BB:CC:DD:EE:01"), "the pairing is part of what the device is")
    }

    @Test(arguments: [
        ("device,passkey\nble://A,12a456", "devices.txt:2: ble://A passkey '12a456' is not a passkey: give the six digits the device shows, e.g. 123456"),
        ("device,passkey,bonded\nble://A,123456,yes", "devices.txt:2: ble://A gives both a passkey and 'bonded': a bonded device is not paired again, so give one of them"),
        ("device,bonded\nble://A,maybe", "devices.txt:2: ble://A 'bonded' is 'maybe': write yes or no"),
        ("[{\"device\": \"ble://A\", \"bonded\": \"yes\"}]", "devices.txt: entry 1: 'bonded' is not true or false"),
        ("[{\"device\": \"ble://A\", \"passkey\": [1]}]", "devices.txt: entry 1: 'passkey' is not six digits: write \"passkey\": \"123456\""),
    ])
    func pairingMistakesAreNamedByFileAndLine(_ setup: (String, String)) {
        do {
            _ = try FleetDeviceList.parse(setup.0, file: "devices.txt")
            Issue.record("\(setup.0) parsed")
        } catch { #expect(error.description == setup.1) }
    }

    @Test(arguments: [
        ("ble://A ble://B", "devices.txt:1: 'ble://A ble://B' is not one address: write one a line, or a CSV with a header line naming a 'device' column"),
        ("device,colour\nble://A,red", "devices.txt:1: unknown column 'colour': use device, adapter, protocol, label, passkey, bonded or option:KEY"),
        ("device,adapter\nble://A", "devices.txt:2: 1 fields where the header names 2: quote nothing, separate with commas"),
        ("# nothing\n", "devices.txt: lists no device: write one address a line, e.g. ble://AA:BB:CC:DD:EE:FF"),
        ("ble://A\nble://A", "devices.txt: ble://A is listed twice (entries 1 and 2): list each device once"),
        ("[{\"adapter\": \"hci0\"}]", "devices.txt: entry 1 has no 'device' string: write {\"device\": \"ble://…\"}"),
    ])
    func mistakesAreNamedByFileAndLine(_ setup: (String, String)) {
        #expect(throws: FleetListError.self) { try FleetDeviceList.parse(setup.0, file: "devices.txt") }
        do { _ = try FleetDeviceList.parse(setup.0, file: "devices.txt") } catch { #expect(error.description == setup.1) }
    }
}
