import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaCodec

/// Images, keys and imgtool's own verdicts from scripts/mcuboot-fixtures.sh (imgtool 2.5.0).
let mcubootSamples = repositoryRoot.appendingPathComponent("samples/mcuboot/imgtool-2.5.0")

func mcubootSample(_ name: String) throws -> [UInt8] {
    try [UInt8](Data(contentsOf: mcubootSamples.appendingPathComponent(name)))
}

struct ImgtoolVerdict: Decodable {
    var version: String
    var digest: String
    var verified: Bool
}

@Suite struct MCUbootImageTests {
    static let verdicts: [String: ImgtoolVerdict] = {
        let data = try! Data(contentsOf: mcubootSamples.appendingPathComponent("imgtool-verify.json"))
        var object = try! JSONSerialization.jsonObject(with: data) as! [String: Any]
        object.removeValue(forKey: "tool")
        let images = try! JSONSerialization.data(withJSONObject: object)
        return try! JSONDecoder().decode([String: ImgtoolVerdict].self, from: images)
    }()

    @Test(arguments: ["app-1.1.0-ecdsa-p256.bin", "app-1.2.0+7-ed25519.bin", "blinky-1.0.1-unsigned.bin"])
    func parsesWhatImgtoolSignedAndAgreesOnVersionAndHash(_ name: String) throws {
        let bytes = try mcubootSample(name)
        let image = try MCUbootImage(decoding: bytes)
        let verdict = try #require(Self.verdicts[name])
        #expect(image.headerSize == 0x200)
        #expect(image.totalSize == bytes.count)
        // imgtool prints "1.2.0+7"; MCUmgr's image list "1.2.0.7".
        #expect(verdict.version.replacingOccurrences(of: "+0", with: "").replacingOccurrences(of: "+", with: ".") == image.version.description)
        #expect(image.hashTLV?.hexString == verdict.digest)
        #expect(image.computedHash.hexString == verdict.digest)
        try image.verifyHash()
    }

    @Test func signaturesVerifyWithTheirKeysOnly() throws {
        let p256 = try MCUbootPublicKey(try mcubootSample("ecdsa-p256.pub.pem"))
        let ed25519 = try MCUbootPublicKey(try mcubootSample("ed25519.pub.pem"))
        let other = try MCUbootPublicKey(try mcubootSample("other-ecdsa-p256.pub.pem"))
        #expect(p256.algorithm == "ECDSA P-256")
        #expect(ed25519.algorithm == "Ed25519")

        let ecdsaImage = try MCUbootImage(decoding: try mcubootSample("app-1.1.0-ecdsa-p256.bin"))
        let edImage = try MCUbootImage(decoding: try mcubootSample("app-1.2.0+7-ed25519.bin"))
        try ecdsaImage.verifySignature(with: p256)
        try edImage.verifySignature(with: ed25519)
        // The key hash TLV names the signing key, so a different key fails on it; a key of another
        // kind is named as such first.
        #expect(throws: ImageVerificationError.keyHashMismatch) { try ecdsaImage.verifySignature(with: other) }
        #expect(throws: ImageVerificationError.badSignature("the image is signed with ECDSA P-256 but the key is Ed25519: give the ECDSA P-256 public key")) {
            try ecdsaImage.verifySignature(with: ed25519)
        }
        #expect(ecdsaImage.tlv(MCUbootImage.TLVType.keyHash)?.value == p256.hash)

        let unsigned = try MCUbootImage(decoding: try mcubootSample("blinky-1.0.1-unsigned.bin"))
        #expect(throws: ImageVerificationError.unsigned) { try unsigned.verifySignature(with: p256) }
    }

    @Test func aForgedSignatureFailsEvenWithTheRightKeyHash() throws {
        var bytes = try mcubootSample("app-1.1.0-ecdsa-p256.bin")
        let image = try MCUbootImage(decoding: bytes)
        // Flip a byte inside the DER signature's r value (the TLV sits at the end).
        guard case .ecdsaP256(let der)? = image.signature else {
            Issue.record("no ECDSA signature")
            return
        }
        let signatureStart = bytes.count - der.count
        bytes[signatureStart + 10] ^= 0x01
        let forged = try MCUbootImage(decoding: bytes)
        let key = try MCUbootPublicKey(try mcubootSample("ecdsa-p256.pub.pem"))
        #expect(throws: ImageVerificationError.badSignature("the ECDSA P-256 signature does not verify with this key")) {
            try forged.verifySignature(with: key)
        }
    }

    @Test func aChangedByteFailsTheHashCheck() throws {
        var bytes = try mcubootSample("blinky-1.0.1-unsigned.bin")
        bytes[0x200 + 100] ^= 0xFF
        let image = try MCUbootImage(decoding: bytes)
        #expect(throws: ImageVerificationError.self) { try image.verifyHash() }
        do { try image.verifyHash() } catch {
            #expect(error.description.contains("does not match its contents"))
        }
    }

    @Test func truncatedAndForeignFilesAreTypedErrors() throws {
        let bytes = try mcubootSample("app-1.1.0-ecdsa-p256.bin")
        #expect(throws: DecodingError.self) { try MCUbootImage(decoding: Array(bytes.prefix(20))) }
        #expect(throws: DecodingError.self) { try MCUbootImage(decoding: Array(bytes.prefix(0x200 + 1000))) }
        #expect(throws: DecodingError.self) { try MCUbootImage(decoding: Array(bytes.dropLast(3))) }
        do { _ = try MCUbootImage(decoding: [UInt8](repeating: 0, count: 64)) } catch {
            #expect(error.description == "MCUboot magic at offset 0: 0x0 is not 0x96f3b83d")
        }
        // Every prefix and random corruption: errors, never a trap.
        for length in stride(from: 0, to: bytes.count, by: 97) {
            #expect(throws: DecodingError.self, "a \(length)-byte prefix decoded") { try MCUbootImage(decoding: Array(bytes.prefix(length))) }
        }
        var generator = seededGenerator("MCUboot corruption")
        for _ in 0..<300 {
            var damaged = bytes
            for _ in 0..<4 { damaged[Int.random(in: 0..<32, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            let tail = Int.random(in: (bytes.count - 300)..<bytes.count, using: &generator)
            damaged[tail] = UInt8.random(in: 0...255, using: &generator)
            guard damaged != bytes, let image = try? MCUbootImage(decoding: damaged) else { continue }
            // Whatever still parses must not pass as the original: its hash no longer matches.
            #expect(throws: ImageVerificationError.self) { try image.verifyHash() }
        }
    }

    @Test func builtImagesMatchImgtoolsUnsignedLayout() throws {
        // Rebuild imgtool's unsigned sample from its firmware: the same bytes, so the same hash.
        let firmware = try [UInt8](Data(contentsOf: samples.appendingPathComponent("blinky.bin")))
        let built = MCUbootImage.build(firmware: firmware, version: .init(major: 1, minor: 0, revision: 1, build: 0))
        let imgtools = try mcubootSample("blinky-1.0.1-unsigned.bin")
        #expect(built.count == imgtools.count)
        let firstDifference = zip(built, imgtools).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        #expect(firstDifference == nil, "the built image differs from imgtool's")
    }

    @Test func keysAreReadFromPEMAndDERAndMalformedOnesRefused() throws {
        #expect(throws: ImageVerificationError.self) { try MCUbootPublicKey(Array("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8)) }
        #expect(throws: ImageVerificationError.self) { try MCUbootPublicKey([1, 2, 3]) }
        let pem = try mcubootSample("ed25519.pub.pem")
        let key = try MCUbootPublicKey(pem)
        #expect(try MCUbootPublicKey(key.der) == key)
    }

    @Test func base64RoundTripsAndRefusesGarbage() {
        for count in 0..<20 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
        #expect(String(decoding: Base64.encode(Array("Hello, world!".utf8)), as: UTF8.self) == "SGVsbG8sIHdvcmxkIQ==")
        #expect(Base64.decode("SGVsbG8=A===") == nil)
        #expect(Base64.decode("SGV") == nil)
        #expect(Base64.decode("SG!s") == nil)
    }
}
