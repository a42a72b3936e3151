import BleotaEngine
import BleotaLink
import Testing

/// A protocol's options as it declares them: one declaration gives the key, the default,
/// the check and the words of every refusal.
@Suite struct ProtocolOptionTests {
    static let window = ProtocolOption.integer("window", meaning: "frames in flight", range: 1...64, default: 4)
    static let identifier = ProtocolOption<UInt16>.number("id", meaning: "an ID", default: 0x0101, range: 0x10...0x2000)
    static let start = ProtocolOption.choice("start", meaning: "where it starts", ["application": false, "bootloader": true], default: false)
    static let kind = ProtocolOption.choice("kind", meaning: "a kind", ["a": 1, "b": 2, "c": 3], default: 1, noun: "a kind")
    static let pause = ProtocolOption.milliseconds("pause", meaning: "a pause", range: 0...10_000, default: .seconds(2))

    @Test func anAbsentKeyIsItsDefault() throws {
        let configuration = DeviceConfiguration()
        #expect(try configuration.value(of: Self.window) == 4)
        #expect(try configuration.value(of: Self.identifier) == 0x0101)
        #expect(try configuration.value(of: Self.start) == false)
        #expect(try configuration.value(of: Self.pause) == .seconds(2))
    }

    @Test func givenValuesAreParsed() throws {
        let configuration = DeviceConfiguration(options: ["window": "64", "id": "0x1FFF", "start": "bootloader", "kind": "c", "pause": "12.5"])
        #expect(try configuration.value(of: Self.window) == 64)
        #expect(try configuration.value(of: Self.identifier) == 0x1FFF)
        #expect(try configuration.value(of: Self.start) == true)
        #expect(try configuration.value(of: Self.kind) == 3)
        #expect(try configuration.value(of: Self.pause) == .microseconds(12_500))
    }

    @Test(arguments: [
        ("window", "65", "window 65 is out of range: use 1…64"),
        ("window", "four", "window four is out of range: use 1…64"),
        ("id", "0x20000", "id '0x20000' is not a number of 16 bits: use a decimal or 0x-prefixed value"),
        ("id", "8", "id 8 is out of range: use 16…8192"),
        ("start", "app", "start 'app' is neither application nor bootloader"),
        ("kind", "d", "kind 'd' is not a kind: use a, b or c"),
        ("pause", "-1", "pause '-1' is out of range: use 0…10000 ms"),
        ("pause", "nan", "pause 'nan' is out of range: use 0…10000 ms"),
    ])
    func aRefusedValueNamesTheKeyTheValueAndWhatToUse(key: String, text: String, message: String) throws {
        let configuration = DeviceConfiguration(options: [key: text])
        let error: DeviceConfigurationError? =
            switch key {
            case "window": Self.refusal { () throws(DeviceConfigurationError) in _ = try configuration.value(of: Self.window) }
            case "id": Self.refusal { () throws(DeviceConfigurationError) in _ = try configuration.value(of: Self.identifier) }
            case "start": Self.refusal { () throws(DeviceConfigurationError) in _ = try configuration.value(of: Self.start) }
            case "kind": Self.refusal { () throws(DeviceConfigurationError) in _ = try configuration.value(of: Self.kind) }
            default: Self.refusal { () throws(DeviceConfigurationError) in _ = try configuration.value(of: Self.pause) }
            }
        #expect(error?.description == message)
    }

    /// Nothing to connect to: reading options needs none.
    struct NoDevice: DeviceConnector {
        var description: String { "none" }
        func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link { throw LinkError.disconnected("no device") }
    }

    static func refusal(_ body: () throws(DeviceConfigurationError) -> Void) -> DeviceConfigurationError? {
        do { try body() } catch { return error }
        return nil
    }

    @Test func aHostOptionRefusalNamesTheProtocolOptionAsGiven() {
        let context = HostContext(protocolName: "test", connector: NoDevice(), clock: ManualClock(), options: ["window": "0"])
        #expect(throws: TransferError(.invalidTuning, step: .load, "--protocol-option window=0: 0 is out of range: use 1…64")) {
            try context.value(of: Self.window)
        }
    }

    @Test func theSpecsCarryKeyMeaningAndServeOption() {
        let option = ProtocolOption.integer("smp-buffer", meaning: "a buffer", range: 1...2, default: 1, serveOption: "smp-buffer")
        #expect(option.deviceSpec == DeviceOptionSpec(key: "smp-buffer", meaning: "a buffer", serveOption: "smp-buffer"))
        #expect(option.hostSpec == HostOptionSpec(key: "smp-buffer", meaning: "a buffer"))
    }
}
