import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaCodec

/// Vectors written by cbor2 (the reference Python implementation), see scripts/cbor-vectors.py.
struct CBORVector: Decodable, Sendable, CustomTestStringConvertible {
    var name: String
    var hex: String
    var value: JSONValue
    var canonical: Bool
    var testDescription: String { name }

    /// The fixture's typed JSON form of a value, rebuilt as CBOR.
    indirect enum JSONValue: Decodable, Sendable {
        case object([String: JSONValue])
        case array([JSONValue])
        case string(String)
        case number(Double)
        case bool(Bool)
        case null

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .null
            } else if let value = try? container.decode(Bool.self) {
                self = .bool(value)
            } else if let value = try? container.decode(Double.self) {
                self = .number(value)
            } else if let value = try? container.decode(String.self) {
                self = .string(value)
            } else if let value = try? container.decode([JSONValue].self) {
                self = .array(value)
            } else {
                self = .object(try container.decode([String: JSONValue].self))
            }
        }

        var cbor: CBOR {
            guard case .object(let object) = self, let (kind, inner) = object.first else { fatalError("bad fixture") }
            switch (kind, inner) {
            case ("u", .string(let digits)): return .unsigned(UInt64(digits)!)
            case ("n", .string(let digits)): return .negative(UInt64(digits)!)
            case ("b", .string(let hex)): return .bytes([UInt8](hex: hex)!)
            case ("t", .string(let text)): return .text(text)
            case ("a", .array(let items)): return .array(items.map(\.cbor))
            case ("m", .array(let pairs)):
                return .map(
                    pairs.map { pair in
                        guard case .array(let kv) = pair else { fatalError("bad fixture") }
                        return (key: kv[0].cbor, value: kv[1].cbor)
                    })
            case ("bool", .bool(let value)): return .bool(value)
            case ("null", _): return .null
            case ("undefined", _): return .undefined
            case ("f", .number(let value)): return .double(value)
            case ("f", .string(let text)): return .double(text == "nan" ? .nan : text == "inf" ? .infinity : -.infinity)
            case ("tag", .array(let parts)):
                guard case .number(let tag) = parts[0] else { fatalError("bad fixture") }
                return .tagged(UInt64(tag), parts[1].cbor)
            case ("simple", .number(let value)): return .simple(UInt8(value))
            default: fatalError("unknown fixture form \(kind)")
            }
        }
    }

    static let all: [CBORVector] = {
        let directory = Bundle.module.url(forResource: "Fixtures", withExtension: nil)!
        let files = try! FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.lastPathComponent.hasPrefix("cbor2-") }
        struct File: Decodable { var vectors: [CBORVector] }
        return files.flatMap { try! JSONDecoder().decode(File.self, from: Data(contentsOf: $0)).vectors }
    }()
}

@Suite struct CBORTests {
    @Test func thereAreReferenceVectors() {
        #expect(CBORVector.all.count > 50)
    }

    @Test(arguments: CBORVector.all)
    func decodesWhatTheReferenceEncoded(_ vector: CBORVector) throws {
        let decoded = try CBOR(decoding: [UInt8](hex: vector.hex)!)
        #expect(decoded == vector.value.cbor)
    }

    @Test(arguments: CBORVector.all.filter(\.canonical))
    func encodesTheSameBytesAsTheReference(_ vector: CBORVector) {
        #expect(vector.value.cbor.encode().hexString == vector.hex)
    }

    @Test func malformedInputIsATypedErrorNamingTheProblem() {
        let cases: [(String, String)] = [
            ("", "CBOR initial byte"),
            ("19 01", "CBOR argument"),  // truncated 2-byte argument
            ("5a ffffffff 00", "CBOR length"),  // byte string claiming 4 GiB
            ("9b 7fffffffffffffff", "CBOR length"),  // array claiming 2^63 items
            ("bb 7fffffffffffffff", "CBOR length"),  // map likewise
            ("ff", "CBOR"),  // stray break
            ("1c", "CBOR initial byte"),  // reserved additional information
            ("5f 01 ff", "CBOR string"),  // indefinite bytes with an integer chunk
            ("7f 41 00 ff", "CBOR string"),  // indefinite text with a byte chunk
            ("9f 01", "CBOR array"),  // no break
            ("bf 01 ff", "CBOR map"),  // key without value
            ("62 c3 28", "CBOR text string"),  // invalid UTF-8
            ("f8 10", "CBOR simple value"),  // two-byte simple below 32
            ("01 02", "CBOR item"),  // trailing bytes
            ("3f", "CBOR initial byte"),  // indefinite negative integer
        ]
        for (hex, field) in cases {
            let bytes = [UInt8](hex: hex.replacingOccurrences(of: " ", with: ""))!
            #expect(throws: DecodingError.self, "\(hex)") { try CBOR(decoding: bytes) }
            do { _ = try CBOR(decoding: bytes) } catch { #expect(error.field == field, "\(hex): \(error)") }
        }
    }

    @Test func deepNestingIsRefusedNotOverflowed() {
        let bytes = [UInt8](repeating: 0x81, count: 100_000) + [0x00]
        #expect(throws: DecodingError.self) { try CBOR(decoding: bytes) }
        let indefinite = [UInt8](repeating: 0x9F, count: 100_000)
        #expect(throws: DecodingError.self) { try CBOR(decoding: indefinite) }
    }

    @Test func randomBytesNeverTrap() {
        var generator = seededGenerator("CBOR random bytes")
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...24, using: &generator)
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if let value = try? CBOR(decoding: bytes) {
                // Whatever decodes re-encodes to something that decodes to the same value.
                let again = try? CBOR(decoding: value.encode())
                #expect(again == value)
            }
        }
    }

    @Test func accessorsAndDiagnosticNotation() {
        let value = CBOR.textMap(["rc": CBOR(-3), "name": .text("a\"b"), "ok": .bool(true), "data": .bytes([1, 0xAB])])
        #expect(value["rc"]?.int == -3)
        #expect(value["name"]?.string == "a\"b")
        #expect(value["missing"] == nil)
        #expect(value.description == #"{"rc": -3, "name": "a\"b", "ok": true, "data": h'01ab'}"#)
        #expect(CBOR.negative(.max).int == nil)
        #expect(CBOR.unsigned(.max).int == nil)
    }
}
