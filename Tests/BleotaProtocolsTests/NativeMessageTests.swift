import BleotaCodec
import BleotaTestSupport
import Testing

@testable import BleotaProtocols

/// Appends the CRC-16/CCITT-FALSE trailer every native message carries.
func withCRC(_ body: [UInt8]) -> [UInt8] {
    var writer = ByteWriter()
    writer.write(contentsOf: body)
    writer.write(CRC16.checksum(body, variant: .ccittFalse))
    return writer.bytes
}

let sha: [UInt8] = Array(0..<32)

/// Every message with the bytes `scripts/native-vectors.py` (an independent
/// Python encoder of protocols/bleota.md) produces for it.
let goldenVectors: [(name: String, message: NativeMessage, hex: String)] = [
    ("hello", .hello(.init(minimumVersion: 1, maximumVersion: 1)), "010101bcd8"),
    (
        "helloResponse",
        .helloResponse(
            .init(
                version: 1, mode: .bootloader, capabilities: [.deflate, .testTransfer, .files, .resume],
                maximumPacket: 244, bufferCount: 32, slotSize: 0x100000,
                firmwareVersion: "1.0.0", name: "bleota-sim")),
        "8101010ff40020000000100005312e302e300a626c656f74612d73696d3a27"
    ),
    ("enterBootloader", .enterBootloader, "02b2c1"),
    (
        "start",
        .start(
            .init(
                target: .firmware, compressed: false, imageSize: 600, streamSize: 600, crc32: 0xCBF4_3926,
                sha256: sha, packetSize: 244, ackInterval: 8, label: "2.0.0")),
        "03000058020000580200002639f4cb000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1ff400080005322e302e309fa9"
    ),
    ("startResponse", .startResponse(.init(status: .ok, ranges: [0..<488])), "83000100000000e801000065f8"),
    ("status", .status(sha256: sha), "04000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1ff376"),
    ("statusResponse", .statusResponse(.init(status: .notFound)), "840500f3d4"),
    ("verify", .verify, "0555b1"),
    (
        "verifyResponse", .verifyResponse(.init(status: .ok, crc32: 0xCBF4_3926, sha256: sha)),
        "85002639f4cb000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f1652"
    ),
    ("activate", .activate, "063681"),
    ("reboot", .reboot, "071791"),
    ("abort", .abort, "08f860"),
    ("getFile", .getFile(.init(name: "log.txt", packetSize: 239, ackInterval: 8, window: 32)), "09076c6f672e747874ef000800200080b8"),
    (
        "getFileResponse", .getFileResponse(.init(status: .ok, size: 33, crc32: 0x1234_5678, sha256: sha)),
        "89002100000078563412000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f1fba"
    ),
    ("activateResponse", .simpleResponse(request: .activate, status: .ok), "860031ac"),
    ("data", .data(.init(sequence: 2, payload: [0xAA, 0xBB, 0xCC])), "100200aabbcc7df0"),
    ("ack", .ack(.init(nextExpected: 1, bitmap: [0b0000_0001])), "1101000101a3ea"),
    ("nack", .nack(.init(first: 1, count: 1, reason: .gap)), "1201000100019412"),
    ("ackRequest", .ackRequest, "13a2c3"),
    ("segment", .segment(.init(index: 0, count: 2, chunk: [0x81, 0x01, 0x01])), "14000281010127d0"),
    ("ackInterval", .ackInterval(48), "1530009a61"),
    ("error", .error(.init(request: 0x03, status: .noSpace, message: "no space")), "ff0303086e6f2073706163659339"),
]

@Suite struct NativeMessageTests {
    @Test(arguments: goldenVectors.map(\.name))
    func encodesAndDecodesTheGoldenBytes(name: String) throws {
        let vector = goldenVectors.first { $0.name == name }!
        let bytes = try #require([UInt8](hex: vector.hex))
        #expect(vector.message.encode() == bytes)
        #expect(try NativeMessage(decoding: bytes) == vector.message)
    }

    /// The opcode a message names (for its requests' words) is the one its golden bytes start
    /// with; a response, whose first byte has the top bit set, names none.
    @Test(arguments: goldenVectors.map(\.name))
    func theOpcodeAMessageNamesIsItsFirstByte(name: String) throws {
        let vector = goldenVectors.first { $0.name == name }!
        let first = try #require([UInt8](hex: vector.hex)?.first)
        #expect(vector.message.opcode == NativeMessage.Opcode(rawValue: first))
    }

    @Test func everyOpcodeHasAGoldenVector() {
        let covered = Set(goldenVectors.compactMap { [UInt8](hex: $0.hex)?.first.map { $0 & 0x7F } })
        for opcode in NativeMessage.Opcode.allCases { #expect(covered.contains(opcode.rawValue & 0x7F), "\(opcode)") }
    }

    @Test func everyTruncationThrowsAndNeverTraps() throws {
        for vector in goldenVectors {
            let bytes = try #require([UInt8](hex: vector.hex))
            for length in 0..<bytes.count {
                #expect(throws: DecodingError.self, "\(vector.name) cut to \(length)") {
                    try NativeMessage(decoding: bytes.prefix(length))
                }
            }
        }
    }

    @Test func anySingleBitFlipIsCaughtByTheChecksum() throws {
        for vector in goldenVectors {
            let bytes = try #require([UInt8](hex: vector.hex))
            for bit in 0..<(bytes.count * 8) {
                var damaged = bytes
                damaged[bit / 8] ^= 1 << (bit % 8)
                #expect(throws: DecodingError.self) { try NativeMessage(decoding: damaged) }
            }
        }
    }

    @Test func checksumFailureNamesTheChecksumField() {
        let error = #expect(throws: DecodingError.self) { try NativeMessage(decoding: [0x01, 0x01, 0x01, 0x00, 0x00]) }
        #expect(error?.field == NativeMessage.checksumField)
        #expect(error?.description == "crc16 at offset 3: checksum mismatch: carried 0x0, computed 0xd8bc")
    }

    @Test(
        arguments: [
            ([0x42], "opcode", "unknown opcode 0x42"),
            ([0x81, 1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "hello.mode", "unknown mode 7"),
            ([0x03, 9], "start.target", "unknown target 9"),
            ([0x03, 0, 0x08], "start.flags", "unknown flag bits 0x08"),
            ([0x03, 0, 0x05], "start.flags", "a stream is deflated or a delta patch, not both"),
            ([0x83, 0, 1, 9, 0, 0, 0, 1, 0, 0, 0], "ranges[0]", "start 9 is after end 1"),
            ([0x11, 0, 0, 33] + [UInt8](repeating: 0, count: 33), "ack.bitmapLength", "33 exceeds 32 bytes"),
            ([0x12, 0, 0, 1, 0, 9], "nack.reason", "unknown reason 9"),
            ([0xFF, 1, 1, 2, 0xC3, 0x28], "error.message", "not valid UTF-8"),
            ([0x14, 2, 2], "segment.index", "segment 2 of 2 is impossible"),
            ([0x09, 0x01, 0x61, 0xEF, 0x00, 0x00, 0x00, 0x20, 0x00], "getFile.ackInterval", "must be at least 1"),
            ([0x09, 0x01, 0x61, 0xEF, 0x00, 0x08, 0x00, 0x00, 0x00], "getFile.window", "must be at least 1"),
            ([0x09, 0x01, 0x61, 0x00, 0x00, 0x08, 0x00, 0x20, 0x00], "getFile.packetSize", "must be at least 1"),
        ] as [([UInt8], String, String)])
    func malformedFieldsAreNamed(body: [UInt8], field: String, why: String) {
        let error = #expect(throws: DecodingError.self) { try NativeMessage(decoding: withCRC(body)) }
        #expect(error?.field == field)
        #expect(error?.reason == .invalidValue(why))
    }

    @Test func zeroPacketSizeAndAckIntervalAreRejected() throws {
        var start = try #require([UInt8](hex: goldenVectors.first { $0.name == "start" }!.hex)).dropLast(2).map { $0 }
        let sizeOffset = 1 + 1 + 1 + 12 + 32
        start[sizeOffset] = 0
        start[sizeOffset + 1] = 0
        let size = #expect(throws: DecodingError.self) { try NativeMessage(decoding: withCRC(start)) }
        #expect(size?.field == "start.packetSize")
        start[sizeOffset] = 244
        start[sizeOffset + 2] = 0
        start[sizeOffset + 3] = 0
        let interval = #expect(throws: DecodingError.self) { try NativeMessage(decoding: withCRC(start)) }
        #expect(interval?.field == "start.ackInterval")
    }

    @Test func trailingBytesAfterAFixedMessageAreRejected() {
        let error = #expect(throws: DecodingError.self) { try NativeMessage(decoding: withCRC([0x05, 0x00])) }
        #expect(error?.reason == .trailingBytes(1))
        #expect(error?.field == "verify message")
    }

    /// Found by review: lists set after construction must not overflow their count byte.
    @Test func oversizedListsAreCutWhenEncoded() throws {
        var ranges = NativeMessage.RangesResponse(status: .ok)
        ranges.ranges = (0..<300).map { UInt32($0 * 2)..<UInt32($0 * 2 + 1) }
        guard case .startResponse(let decoded) = try NativeMessage(decoding: NativeMessage.startResponse(ranges).encode()) else {
            Issue.record("not a start response")
            return
        }
        #expect(decoded.ranges.count == 255)
        var ack = NativeMessage.Acknowledgement(nextExpected: 0)
        ack.bitmap = Array(repeating: 0xFF, count: 100)
        guard case .ack(let back) = try NativeMessage(decoding: NativeMessage.ack(ack).encode()) else {
            Issue.record("not an ack")
            return
        }
        #expect(back.bitmap.count == 32)
    }

    @Test func acknowledgementBitmapSemantics() {
        let ack = NativeMessage.Acknowledgement(nextExpected: 10, bitmap: [0b0000_0101, 0b1000_0000])
        #expect(ack.isSet(0))  // packet 11
        #expect(!ack.isSet(1))  // packet 12
        #expect(ack.isSet(2))  // packet 13
        #expect(ack.isSet(15))  // packet 26
        #expect(!ack.isSet(16))
        #expect(!ack.isSet(-1))
    }

    @Test func longStringsAreCutAtACharacterBoundary() throws {
        let label = String(repeating: "é", count: 200)  // 400 bytes of UTF-8
        let message = NativeMessage.error(.init(request: 1, status: .busy, message: label))
        guard case .error(let decoded) = try NativeMessage(decoding: message.encode()) else {
            Issue.record("not an error")
            return
        }
        #expect(decoded.message.utf8.count == 254)
        #expect(decoded.message == String(repeating: "é", count: 127))
    }

    @Test func segmentationSplitsAndRejoinsLongMessages() throws {
        let long = goldenVectors.first { $0.name == "start" }!.message
        let packets = NativeFraming.packets(for: long, maximumPayload: 20)
        #expect(packets.count > 1)
        #expect(packets.allSatisfy { $0.count <= 20 })
        var reassembler = NativeReassembler()
        var joined: [UInt8]?
        for packet in packets { joined = reassembler.feed(packet) ?? joined }
        #expect(try NativeMessage(decoding: try #require(joined)) == long)
        // A lost middle segment drops the message instead of joining garbage.
        var partial = NativeReassembler()
        var result: [UInt8]?
        for (index, packet) in packets.enumerated() where index != 1 { result = partial.feed(packet) ?? result }
        #expect(result == nil)
        // Short messages pass through untouched.
        #expect(NativeFraming.packets(for: .verify, maximumPayload: 20) == [NativeMessage.verify.encode()])
    }

    @Test func seededFuzzNeverTrapsAndDecodedMessagesReEncodeStably() throws {
        var state: UInt64 = 0x5EED
        func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        var decoded = 0
        let seeds = try goldenVectors.map { try #require([UInt8](hex: $0.hex)).dropLast(2).map { $0 } }
        for round in 0..<20_000 {
            var body: [UInt8]
            if round % 2 == 0 {
                body = (0..<Int(next() % 64)).map { _ in UInt8(truncatingIfNeeded: next()) }
                if !body.isEmpty && next() % 2 == 0 { body[0] = NativeMessage.Opcode.allCases.randomElement(using: &FuzzRandom.shared)!.rawValue }
            } else {
                body = seeds[Int(next() % UInt64(seeds.count))]
                for _ in 0..<(1 + next() % 3) where !body.isEmpty { body[Int(next() % UInt64(body.count))] = UInt8(truncatingIfNeeded: next()) }
            }
            // With a valid CRC so the fuzz reaches the field decoders.
            if let message = try? NativeMessage(decoding: withCRC(body)) {
                decoded += 1
                #expect(try NativeMessage(decoding: message.encode()) == message)
            }
        }
        #expect(decoded > 1000)
    }
}

/// A deterministic generator for `randomElement(using:)` in the fuzz test.
struct FuzzRandom: RandomNumberGenerator {
    nonisolated(unsafe) static var shared = FuzzRandom()
    var state: UInt64 = 42
    mutating func next() -> UInt64 {
        state = state &* 6_364_136_223_846_793_005 &+ 1
        return state
    }
}

@Suite struct NativeWireFastPathTests {
    @Test func theDataFastPathsAgreeWithTheGeneralCodec() {
        var generator = seededGenerator("native data packets")
        let wire = NativeWire()
        for _ in 0..<500 {
            let sequence = UInt16.random(in: 0...UInt16.max, using: &generator)
            let payload = (0..<Int.random(in: 0...300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let fast = wire.encodeData(sequence: sequence, payload: payload[...])
            #expect(fast == NativeMessage.data(.init(sequence: sequence, payload: payload)).encode())
            #expect(wire.decodeTransferPacket(fast) == .data(sequence: sequence, payload: payload[...], intact: true))
            var damaged = fast
            damaged[Int.random(in: 3..<damaged.count, using: &generator)] ^= 0x10
            #expect(wire.decodeTransferPacket(damaged) == .data(sequence: sequence, payload: [], intact: false))
        }
    }
}
