import BleotaCodec
import BleotaTestSupport
import Crypto
import Foundation
import Testing

@testable import BleotaProtocols

@Suite struct NordicInitPacketTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/nordic")
    static let keys = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("samples/keys")

    static func fixture(_ name: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: fixtures.appendingPathComponent(name))) }
    static func privateKey() throws -> P256.Signing.PrivateKey {
        try P256.Signing.PrivateKey(pemRepresentation: String(contentsOf: keys.appendingPathComponent("openssl-3.0.19-ec-p256-private.pem"), encoding: .utf8))
    }

    /// The packet as `protoc --encode` wrote it from the schema (an encoder
    /// bleota did not write): decoded field by field, and bleota's encoding
    /// is the same bytes.
    @Test func aPacketProtocEncodedDecodesAndReencodesByteForByte() throws {
        let bytes = try Self.fixture("protoc-3.21.12-unsigned-app.dat")
        let packet = try NordicInitPacket(decoding: bytes)
        #expect(packet.firmwareVersion == 3 && packet.hardwareVersion == 52)
        #expect(packet.softDeviceRequirements == [0x0101, NordicInitPacket.anySoftDevice])
        #expect(packet.type == .application && packet.applicationSize == 4096 && packet.softDeviceSize == 0 && packet.bootloaderSize == 0)
        #expect(packet.hashType == .sha256)
        #expect(packet.hash == Array((1...32).reversed()), "the stored hash is reversed into digest order")
        #expect(packet.isDebug == false && packet.signatureType == nil && packet.signedBytes == nil)
        #expect(packet.encode() == bytes)
    }

    @Test func theHashOfAnImageIsCheckedInDigestOrder() throws {
        let image = (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let packet = NordicInitPacket(
            firmwareVersion: 1, hardwareVersion: 52, softDeviceRequirements: [0xFFFE], type: .application,
            applicationSize: UInt32(image.count), hash: SHA256Digest.hash(image))
        let decoded = try NordicInitPacket(decoding: packet.encode())
        #expect(decoded.hashMatches(image) == true)
        var other = image
        other[100] ^= 1
        #expect(decoded.hashMatches(other) == false)
    }

    /// A signed packet verifies with the key's public half, over the init
    /// command's bytes as they arrived (what the SDK's bootloader checks); any change to them, to the signature, or
    /// another key fails.
    @Test func aSignatureVerifiesOnlyWithItsKeyAndUntouchedBytes() throws {
        let key = try Self.privateKey()
        var packet = NordicInitPacket(
            firmwareVersion: 2, hardwareVersion: 52, softDeviceRequirements: [0x0100], type: .application,
            applicationSize: 1000, hash: [UInt8](repeating: 0xAB, count: 32))
        try packet.sign(with: key)
        let bytes = packet.encode()
        let decoded = try NordicInitPacket(decoding: bytes)
        #expect(decoded.signatureType == .ecdsaP256SHA256 && decoded.signature.count == 64)
        #expect(decoded.signedBytes == packet.encodeInitCommand())
        #expect(decoded.signatureVerifies(with: key.publicKey) == true)
        #expect(decoded.signatureVerifies(with: P256.Signing.PrivateKey().publicKey) == false)

        // The firmware version inside the signed init command, 2 → 3: same length, broken signature.
        let commandStart = try #require(
            decoded.signedBytes.flatMap { command in
                (0...(bytes.count - command.count)).first { Array(bytes[$0..<$0 + command.count]) == command }
            })
        let versionField = try #require((commandStart..<bytes.count).first { bytes[$0] == 0x08 && bytes[$0 + 1] == 2 })
        var tampered = bytes
        tampered[versionField + 1] = 3
        let changed = try NordicInitPacket(decoding: tampered)
        #expect(changed.firmwareVersion == 3)
        #expect(changed.signatureVerifies(with: key.publicKey) == false)

        var badSignature = decoded
        badSignature.signature[0] ^= 0x01
        #expect(badSignature.signatureVerifies(with: key.publicKey) == false)
        #expect(try NordicInitPacket(decoding: packet.encode()) == decoded)
    }

    @Test(
        arguments: [
            // A packet that is only a tag.
            ("0a", DecodingError(field: "init packet field 1 length", offset: 1, reason: .truncated(needed: 1))),
            // A command claiming 64 bytes where 2 follow.
            ("0a400801", DecodingError(field: "init packet field 1", offset: 1, reason: .truncated(needed: 62))),
            // Field number 0.
            ("0000", DecodingError(field: "init packet field tag", offset: 0, reason: .invalidValue("field number 0 is outside 1…536870911"))),
            // Wire type 3 (a group).
            ("0b", DecodingError(field: "init packet field 1", offset: 0, reason: .invalidValue("wire type 3 is not one of 0, 1, 2, 5 (groups, 3 and 4, are not used)"))),
            // A command whose init has type 9.
            (
                "0a060801120220 09".replacingOccurrences(of: " ", with: ""),
                DecodingError(field: "init.type", offset: 7, reason: .invalidValue("9 is not a firmware type (0…4)"))
            ),
            // A reset command, not an init command.
            ("0a020800", DecodingError(field: "command.op_code", offset: 2, reason: .invalidValue("not an init command (op_code 0, no init)"))),
            // Nothing at all.
            ("", DecodingError(field: "init packet", offset: 0, reason: .invalidValue("holds neither a command nor a signed command"))),
            // An 11-byte varint.
            ("08ffffffffffffffffffff01", DecodingError(field: "init packet field 1", offset: 1, reason: .invalidValue("varint longer than 64 bits"))),
            // A signed command without its signature type.
            ("12040a020801", DecodingError(field: "signed_command.signature_type", offset: 0, reason: .invalidValue("missing"))),
            // Both a command and a signed command.
            ("0a00" + "1206" + "0a00" + "1000" + "1a00", DecodingError(field: "init packet", offset: 0, reason: .invalidValue("holds both a command and a signed command"))),
        ] as [(String, DecodingError)])
    func malformedPacketsNameTheFieldAndOffset(hex: String, error: DecodingError) throws {
        let bytes = try #require([UInt8](hex: hex))
        #expect(throws: error) { try NordicInitPacket(decoding: bytes) }
    }

    /// Every prefix and every single-byte change of a signed packet decodes
    /// or throws; none traps (the fuzz target runs this at scale).
    @Test func everyPrefixAndEveryByteChangeDecodesOrThrows() throws {
        var packet = NordicInitPacket(
            firmwareVersion: 7, hardwareVersion: 52, softDeviceRequirements: [0x0100, 0xFFFE], type: .softDeviceAndBootloader,
            softDeviceSize: 150_000, bootloaderSize: 24_000, hash: [UInt8](repeating: 1, count: 32))
        try packet.sign(with: Self.privateKey())
        let bytes = packet.encode()
        var generator = seededGenerator("nordic-init-packet-mutations")
        for length in 0...bytes.count { _ = try? NordicInitPacket(decoding: Array(bytes.prefix(length))) }
        for index in bytes.indices {
            var changed = bytes
            changed[index] = UInt8.random(in: 0...255, using: &generator)
            _ = try? NordicInitPacket(decoding: changed)
        }
    }
}
