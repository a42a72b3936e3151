import Foundation
import Testing

@testable import BleotaCodec

/// Images from scripts/ncs-fixtures.py (imgtool 2.5.0): compressed, encrypted, with a dependency and a
/// security counter, and ROM-fixed for a direct-XIP slot; imgtool's own reading of each beside them.
let ncsSamples = repositoryRoot.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs")

func ncsSample(_ name: String) throws -> [UInt8] {
    try [UInt8](Data(contentsOf: ncsSamples.appendingPathComponent(name)))
}

@Suite struct MCUbootNewerImageTests {
    /// imgtool's `verify` output per image ("Image digest: …"), or its verdict.
    static let imgtoolReads: [String: [String]] = {
        let data = try! Data(contentsOf: ncsSamples.appendingPathComponent("imgtool-verify.json"))
        let object = try! JSONSerialization.jsonObject(with: data) as! [String: Any]
        return object["images"] as! [String: [String]]
    }()

    static func imgtoolDigest(_ name: String) -> String? {
        imgtoolReads[name]?.first { $0.hasPrefix("Image digest: ") }.map { String($0.dropFirst("Image digest: ".count)) }
    }

    static func publicKey(_ name: String) throws -> MCUbootPublicKey {
        try MCUbootPublicKey([UInt8](Data(contentsOf: ncsSamples.appendingPathComponent(name))))
    }

    @Test func aCompressedImageNamesItsCompressionAndTheHashTheBootloaderWillReport() throws {
        let image = try MCUbootImage(decoding: try ncsSample("blinky-1.1.0-lzma2armthumb-ecdsa-p256.bin"))
        #expect(image.flags == 0xC00)
        #expect(image.imageFlags == [.compressedLZMA2, .compressedARMThumbFilter])
        #expect(image.imageFlags.description == "compressed LZMA2, ARM Thumb filter")
        #expect(image.compression == "LZMA2 with the ARM Thumb filter")
        #expect(image.decompressedSize == 13312, "blinky.bin's size")
        // The hash TLV covers the compressed image as the file holds it: imgtool's digest.
        #expect(image.hashTLV?.hexString == Self.imgtoolDigest("blinky-1.1.0-lzma2armthumb-ecdsa-p256.bin"))
        try image.verifyHash()
        try image.verifySignature(with: try Self.publicKey("ecdsa-p256.pub.pem"))
        // The decompressed SHA is the hash of the same firmware signed without compression, with the
        // same header: imgtool's digest of the network-core image, which is exactly that.
        #expect(image.decompressedHash?.hexString == Self.imgtoolDigest("two-core network core (in the nRF5340 packages)"))
        #expect(image.tlvs.filter(\.isProtected).map(\.name) == ["decompressed size", "decompressed SHA", "decompressed signature"])
    }

    @Test(arguments: [
        ("blinky-1.1.0-encrypted-aes128-ecies-p256.bin", "AES-128", "encrypted key (ECIES P-256)", "ecdsa-p256.pub.pem"),
        ("blinky-1.1.0-encrypted-aes256-x25519-ed25519.bin", "AES-256", "encrypted key (ECIES X25519)", "ed25519.pub.pem"),
    ])
    func anEncryptedImageIsNotCalledCorruptAndItsSignatureChecksAgainstItsHash(name: String, cipher: String, key: String, signer: String) throws {
        let bytes = try ncsSample(name)
        let image = try MCUbootImage(decoding: bytes)
        #expect(image.isEncrypted)
        #expect(image.encryption?.cipher == cipher)
        #expect(image.encryption?.key?.name == key)
        // imgtool itself cannot check it: the hash covers the plaintext.
        #expect(Self.imgtoolReads[name] == ["Image has an invalid hash"])
        #expect(image.computedHash != image.hashTLV ?? [], "the file holds ciphertext")
        try image.verifyHash()
        try image.verifySignature(with: try Self.publicKey(signer))
        // Another key does not verify it.
        let other = signer == "ed25519.pub.pem" ? "ecdsa-p256.pub.pem" : "encryption-p256.pub.pem"
        #expect(throws: ImageVerificationError.self) { try image.verifySignature(with: try Self.publicKey(other)) }
        // A hash TLV changed by one bit no longer matches its signature.
        var tampered = bytes
        let hashAt = try #require(Self.offset(of: image.hashTLV ?? [], in: bytes))
        tampered[hashAt] ^= 0x01
        #expect(throws: ImageVerificationError.self) { try MCUbootImage(decoding: tampered).verifySignature(with: try Self.publicKey(signer)) }
    }

    @Test func aDependencyAndASecurityCounterAreRead() throws {
        let image = try MCUbootImage(decoding: try ncsSample("blinky-1.1.0-needs-image1-1.2.0+3-counter7-ecdsa-p256.bin"))
        #expect(image.securityCounter == 7)
        #expect(image.dependencies == [.init(image: 1, minimumVersion: .init(major: 1, minor: 2, revision: 0, build: 3))])
        #expect(image.dependencies.first?.description == "image 1 at 1.2.0.3 or later")
        #expect(image.tlvs.filter(\.isProtected).map(\.name) == ["security counter", "dependency"])
        try image.verifyHash()
    }

    @Test(arguments: [(0, UInt32(0xC000)), (1, 0x82000)])
    func aROMFixedImageCarriesTheSlotItIsLinkedFor(slot: Int, offset: UInt32) throws {
        let image = try MCUbootImage(decoding: try ncsSample("blinky-1.1.0-xip-slot\(slot)-ecdsa-p256.bin"))
        #expect(image.imageFlags == .romFixed)
        #expect(image.loadAddress == offset)
        #expect(image.hashTLV?.hexString == Self.imgtoolDigest("blinky-1.1.0-xip-slot\(slot)-ecdsa-p256.bin"))
    }

    /// An Ed25519 image checked with an ECDSA key is a key of the wrong kind, not "a different key".
    @Test func aKeyOfAnotherKindIsNamedAsSuch() throws {
        let image = try MCUbootImage(decoding: try ncsSample("blinky-1.1.0-encrypted-aes256-x25519-ed25519.bin"))
        #expect(throws: ImageVerificationError.badSignature("the image is signed with Ed25519 but the key is ECDSA P-256: give the Ed25519 public key")) {
            try image.verifySignature(with: try Self.publicKey("ecdsa-p256.pub.pem"))
        }
    }

    @Test func unknownFlagBitsAreShownInHex() {
        #expect(MCUbootImage.Flags(rawValue: 0x4000_0100).description == "ROM-fixed, unknown 0x40000000")
        #expect(MCUbootImage.Flags(rawValue: 0).description == "none")
    }

    static func offset(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard !needle.isEmpty, needle.count <= haystack.count else { return nil }
        return (0...(haystack.count - needle.count)).last { Array(haystack[$0..<$0 + needle.count]) == needle }
    }
}
