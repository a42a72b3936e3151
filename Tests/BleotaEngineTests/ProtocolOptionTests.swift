import BleotaEngine
import BleotaLink
import Foundation
import Testing

/// A protocol's options as it declares them: one declaration gives the key, the default,
/// the check and the words of every refusal; parsed once into typed values.
@Suite struct ProtocolOptionTests {
    static let window = ProtocolOption.integer("window", meaning: "frames in flight", range: 1...64, default: 4)
    static let identifier = ProtocolOption<UInt16>.number("id", meaning: "an ID", default: 0x0101, range: 0x10...0x2000)
    static let start = ProtocolOption.choice("start", meaning: "where it starts", ["application": false, "bootloader": true], default: false)
    static let kind = ProtocolOption.choice("kind", meaning: "a kind", ["a": 1, "b": 2, "c": 3], default: 1, noun: "a kind")
    static let pause = ProtocolOption.milliseconds("pause", meaning: "a pause", range: 0...10_000, default: .seconds(2))
    static let name = ProtocolOption.text("name", meaning: "a name") { $0.count > 4 ? "is longer than 4 characters" : nil }

    static let specs = [window.deviceSpec, identifier.deviceSpec, start.deviceSpec, kind.deviceSpec, pause.deviceSpec, name.deviceSpec]

    @Test func anAbsentKeyIsItsDefault() throws {
        let configuration = DeviceConfiguration()
        #expect(configuration.options[Self.window] == 4)
        #expect(configuration.options[Self.identifier] == 0x0101)
        #expect(configuration.options[Self.start] == false)
        #expect(configuration.options[Self.pause] == .seconds(2))
        #expect(configuration.options[Self.name] == nil)
        #expect(configuration.options.isEmpty)
    }

    @Test func givenValuesAreParsedOnceIntoTheirTypes() throws {
        let options = try ProtocolOptions(
            parsing: ["window": "64", "id": "0x1FFF", "start": "bootloader", "kind": "c", "pause": "12.5", "name": "Dfu"], Self.specs)
        #expect(options[Self.window] == 64)
        #expect(options[Self.identifier] == 0x1FFF)
        #expect(options[Self.start] == true)
        #expect(options[Self.kind] == 3)
        #expect(options[Self.pause] == .microseconds(12_500))
        #expect(options[Self.name] == "Dfu")
        #expect(options.given.map(\.key) == ["id", "kind", "name", "pause", "start", "window"])
        #expect(options.given.first { $0.key == "id" }?.text == "0x1FFF", "the text as given, for what passes it on")
    }

    @Test(arguments: [
        ("window", "65", "window=65: 65 is out of range: use 1…64"),
        ("window", "four", "window=four: four is out of range: use 1…64"),
        ("id", "0x20000", "id=0x20000: '0x20000' is not a number of 16 bits: use a decimal or 0x-prefixed value"),
        ("id", "8", "id=8: 8 is out of range: use 16…8192"),
        ("start", "app", "start=app: 'app' is neither application nor bootloader"),
        ("kind", "d", "kind=d: 'd' is not a kind: use a, b or c"),
        ("pause", "-1", "pause=-1: '-1' is out of range: use 0…10000 ms"),
        ("pause", "nan", "pause=nan: 'nan' is out of range: use 0…10000 ms"),
        ("name", "DfuTarg", "name=DfuTarg: is longer than 4 characters"),
        ("speed", "2", "speed=2: is not a key: use one of window, id, start, kind, pause, name"),
    ])
    func aRefusedValueNamesTheKeyTheValueAndWhatToUse(key: String, text: String, message: String) {
        #expect(throws: ProtocolOptionError.self) { try ProtocolOptions(parsing: [key: text], Self.specs) }
        do {
            _ = try ProtocolOptions(parsing: [key: text], Self.specs)
        } catch {
            #expect(error.description == message)
        }
    }

    @Test func theFirstRefusalInKeyOrderIsTheOneReported() {
        #expect(throws: ProtocolOptionError(key: "kind", value: "z", problem: "'z' is not a kind: use a, b or c")) {
            try ProtocolOptions(parsing: ["window": "0", "kind": "z"], Self.specs)
        }
    }

    @Test func aProtocolWithoutOptionsRefusesEveryKey() {
        #expect(throws: ProtocolOptionError(key: "x", value: "1", problem: "is not a key: this protocol takes none")) {
            try ProtocolOptions(parsing: ["x": "1"], [HostOptionSpec]())
        }
    }

    @Test func theSpecsCarryKeyMeaningServeOptionAndTheParse() throws {
        let option = ProtocolOption.integer("smp-buffer", meaning: "a buffer", range: 1...2, default: 1, serveOption: "smp-buffer")
        #expect(option.deviceSpec.key == "smp-buffer" && option.deviceSpec.meaning == "a buffer" && option.deviceSpec.serveOption == "smp-buffer")
        #expect(option.hostSpec.key == "smp-buffer" && option.hostSpec.meaning == "a buffer")
        #expect(try option.hostSpec.value(parsing: "2") as? Int == 2)
        #expect(throws: ProtocolOptionRefusal("3 is out of range: use 1…2")) { try option.deviceSpec.value(parsing: "3") }
    }

    /// Options as written travel as text until their protocol is known: a JSON object of strings
    /// in a device list or a campaign's row, a device's keys over the command's, and parsed once.
    @Test func optionTextIsAnObjectOfStringsThatADevicesKeysOverrideAndThatParsesOnce() throws {
        let command: ProtocolOptionText = ["window": "8", "name": "abc"]
        let device = try JSONDecoder().decode(ProtocolOptionText.self, from: Data(#"{"window": "2", "kind": "b"}"#.utf8))
        let merged = command.overridden(by: device)
        #expect(merged.given.map { "\($0.key)=\($0.text)" } == ["kind=b", "name=abc", "window=2"])
        #expect(merged.pairs == ["kind=b", "name=abc", "window=2"])
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        #expect(String(decoding: try encoder.encode(merged), as: UTF8.self) == #"{"kind":"b","name":"abc","window":"2"}"#)
        let parsed = try ProtocolOptions(parsing: merged, Self.specs)
        #expect(parsed[Self.window] == 2 && parsed[Self.kind] == 2 && parsed[Self.name] == "abc")
        #expect(parsed.text == merged, "what is stored again is what was given")
        #expect(merged.filter { $0 != "name" }.keys == ["kind", "window"])
        #expect(throws: ProtocolOptionError(key: "window", value: "99", problem: "99 is out of range: use 1…64")) {
            try ProtocolOptions(parsing: merged.overridden(by: ["window": "99"]), Self.specs)
        }
    }
}
