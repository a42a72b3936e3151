import BleotaCodec
import BleotaLink
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaProtocols

/// Message templates and descriptions, byte for byte: Telink's data PDUs against
/// packets captured from real Telink flashing (atc1441's notes), STM32WB's base
/// address write as ST's app writes it, and templates that never trap on any input.
@Suite struct ProtocolDescriptionTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("protocols").path

    static func hex(_ text: String) -> [UInt8] {
        text.split(separator: " ").map { UInt8($0, radix: 16)! }
    }

    @Test(arguments: [
        ("00 00", "26 80 00 00 00 00 5d 02 4b 4e 4c 54 30 04 88 00", "1c a3"),
        ("01 00", "ae 80 00 00 00 00 00 00 a4 4f 01 00 00 00 00 00", "e8 fa"),
        ("fa 14", "5e 2e 6f ab ff ff ff ff ff ff ff ff ff ff ff ff", "98 89"),
    ])
    func telinkDataPacketsMatchCapturedOnes(_ sample: (String, String, String)) throws {
        let telink = try ProtocolDescription(contentsOf: "\(Self.folder)/telink-ota.yaml")
        let template = telink.message("data")
        let index = MessageTemplate.read(ArraySlice(Self.hex(sample.0)), bigEndian: false)
        let encoded = template.encode(["index": index], payload: ArraySlice(Self.hex(sample.1)))
        #expect(encoded == Self.hex(sample.0) + Self.hex(sample.1) + Self.hex(sample.2))
        guard case .matched(let variables, let payload) = template.decode(encoded[...]) else {
            Issue.record("the captured packet does not decode")
            return
        }
        #expect(variables["index"] == index)
        #expect(Array(encoded[payload]) == Self.hex(sample.1))
        var damaged = encoded
        damaged[5] ^= 0x10
        #expect(template.decode(damaged[...]) == .badChecksum)
    }

    @Test func telinkEndCarriesTheLastIndexAndItsComplement() throws {
        let telink = try ProtocolDescription(contentsOf: "\(Self.folder)/telink-ota.yaml")
        let end = telink.message("end")
        #expect(end.encode(["last-index": 0x14FA]) == Self.hex("02 ff fa 14 05 eb"))
        // A complement that disagrees is not an end command.
        #expect(end.decode(Self.hex("02 ff fa 14 05 ea")[...]) == .mismatch)
    }

    @Test func stm32wbBaseAddressIsWrittenAsSTsAppWritesIt() throws {
        let wb = try ProtocolDescription(contentsOf: "\(Self.folder)/stm32wb-ota.yaml")
        #expect(wb.message("start-application").encode([:]) == Self.hex("02 00 70 00"))
        #expect(wb.message("upload-finished").encode([:]) == Self.hex("07 00 00 00"))
        #expect(wb.message("reboot-to-loader").encode([:]) == Self.hex("01 07 40"))
        #expect(wb.characteristics.map(\.name) == ["reboot-request", "base-address", "confirmation", "raw-data"])
    }

    /// Every template of the shipped descriptions, fed random bytes and mutations of real messages.
    @Test(arguments: ["telink-ota", "stm32wb-ota"])
    func templatesNeverTrapOnAnyInput(_ name: String) throws {
        let description = try ProtocolDescription(contentsOf: "\(Self.folder)/\(name).yaml")
        var random = seededGenerator("templates-\(name)")
        for template in description.messages.values {
            for _ in 0..<2000 {
                var bytes = template.encode(
                    ["index": UInt64.random(in: 0...0xFFFF, using: &random), "last-index": 7],
                    payload: ArraySlice((0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }))
                switch Int.random(in: 0...3, using: &random) {
                case 0: bytes = (0..<Int.random(in: 0...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                case 1: if !bytes.isEmpty { bytes.removeLast(Int.random(in: 1...bytes.count, using: &random)) }
                case 2: if !bytes.isEmpty { bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= UInt8.random(in: 1...255, using: &random) }
                default: bytes += [UInt8.random(in: 0...255, using: &random)]
                }
                _ = template.decode(bytes[...])
                _ = template.decode(bytes.dropFirst())
            }
        }
    }

    @Test func sampleImagesPassTheirOwnChecksAndDamageIsFound() throws {
        for name in ["telink-ota", "stm32wb-ota"] {
            let description = try ProtocolDescription(contentsOf: "\(Self.folder)/\(name).yaml")
            var random = seededGenerator("sample-\(name)")
            let image = description.image.sample((0..<5000).map { _ in UInt8.random(in: 0...255, using: &random) })
            #expect(description.image.checks.allSatisfy { $0.problem(image) == nil }, "\(name)")
            var truncated = image
            truncated.removeLast(8)
            #expect(description.image.checks.contains { $0.problem(truncated) != nil }, "\(name): a truncated image passes")
        }
    }
}
