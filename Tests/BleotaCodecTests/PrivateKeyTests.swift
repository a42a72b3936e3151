import Crypto
import Foundation
import Testing

@testable import BleotaCodec

/// Keys OpenSSL made, with OpenSSL's own `pkey -pubout` of each (scripts/key-fixtures.sh).
let keySamples = repositoryRoot.appendingPathComponent("samples/keys")

func keySample(_ name: String) throws -> [UInt8] {
    try [UInt8](Data(contentsOf: keySamples.appendingPathComponent(name)))
}

/// A private key a test signs with, and what bleota should derive from it.
enum TestSigningKey {
    case p256(P256.Signing.PrivateKey)
    case ed25519(Curve25519.Signing.PrivateKey)

    /// The public key as imgtool hashes it: DER SubjectPublicKeyInfo.
    var publicDER: [UInt8] {
        switch self {
        case .p256(let key): Array(key.publicKey.derRepresentation)
        case .ed25519(let key): [0x30, 0x2A, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x03, 0x21, 0x00] + key.publicKey.rawRepresentation
        }
    }

    /// PKCS#8 ("PRIVATE KEY"): swift-crypto's export for P-256; for Ed25519 (which
    /// it cannot export) the RFC 8410 §7 layout written out by hand.
    var pkcs8PEM: String {
        switch self {
        case .p256(let key): return key.pemRepresentation
        case .ed25519(let key):
            let der: [UInt8] =
                [0x30, 0x2E, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]
                + key.rawRepresentation
            return pem("PRIVATE KEY", der)
        }
    }

    /// SEC1 ("EC PRIVATE KEY", RFC 5915) of a P-256 key, with the curve and public key as OpenSSL writes them.
    var sec1PEM: String? {
        guard case .p256(let key) = self else { return nil }
        let der: [UInt8] =
            [0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20] + key.rawRepresentation
            + [0xA0, 0x0A, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]
            + [0xA1, 0x44, 0x03, 0x42, 0x00] + key.publicKey.x963Representation
        return pem("EC PRIVATE KEY", der)
    }

    func pem(_ label: String, _ der: [UInt8]) -> String {
        let body = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN \(label)-----\n\(body)\n-----END \(label)-----\n"
    }

    /// An MCUboot image of `firmware` signed as imgtool signs: SHA-256, key hash
    /// and signature TLVs; ECDSA over the hashed bytes, Ed25519 over the hash.
    func signedImage(_ firmware: [UInt8]) throws -> [UInt8] {
        let unsigned = MCUbootImage.build(firmware: firmware, version: .init(major: 2, minor: 0, revision: 0, build: 0))
        let hashed = Array(unsigned.dropLast(4 + 4 + 32))  // its TLV area holds only the SHA-256
        let hash = Array(SHA256.hash(data: hashed))
        let signature: (UInt16, [UInt8])
        switch self {
        case .p256(let key): signature = (0x22, Array(try key.signature(for: hashed).derRepresentation))
        case .ed25519(let key): signature = (0x24, Array(try key.signature(for: hash)))
        }
        var entries: [UInt8] = []
        for (type, value) in [(UInt16(0x10), hash), (0x01, Array(SHA256.hash(data: publicDER))), signature] {
            entries += [UInt8(type & 0xFF), UInt8(type >> 8), UInt8(value.count & 0xFF), UInt8(value.count >> 8)] + value
        }
        let total = entries.count + 4
        return hashed + [0x07, 0x69, UInt8(total & 0xFF), UInt8(total >> 8)] + entries
    }
}

@Suite struct PrivateKeyTests {
    @Test func aGeneratedP256KeyInPKCS8AndSEC1DerivesItsPublicKey() throws {
        let key = TestSigningKey.p256(P256.Signing.PrivateKey())
        let expected = MCUbootPublicKey.p256(der: key.publicDER)
        #expect(try MCUbootPublicKey(Array(key.pkcs8PEM.utf8)) == expected)
        #expect(try MCUbootPublicKey(Array(try #require(key.sec1PEM).utf8)) == expected)
        // DER without the PEM armour, both layouts.
        guard case .p256(let raw) = key else { return }
        #expect(try MCUbootPublicKey(Array(raw.derRepresentation)) == expected)
        // openssl ecparam -genkey writes the curve's parameters as a block of their own first.
        let withParameters = "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n" + (key.sec1PEM ?? "")
        #expect(try MCUbootPublicKey(Array(withParameters.utf8)) == expected)
    }

    @Test func aGeneratedEd25519KeyInPKCS8DerivesItsPublicKey() throws {
        let key = TestSigningKey.ed25519(Curve25519.Signing.PrivateKey())
        guard case .ed25519(let raw) = key else { return }
        #expect(try MCUbootPublicKey(Array(key.pkcs8PEM.utf8)) == .ed25519(raw: Array(raw.publicKey.rawRepresentation)))
    }

    @Test func theDerivedKeyVerifiesWhatThePrivateKeySigned() throws {
        let firmware = (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        for key in [TestSigningKey.p256(P256.Signing.PrivateKey()), .ed25519(Curve25519.Signing.PrivateKey())] {
            let image = try MCUbootImage(decoding: try key.signedImage(firmware))
            try image.verifyHash()
            let derived = try MCUbootPublicKey(Array(key.pkcs8PEM.utf8))
            #expect(image.tlv(MCUbootImage.TLVType.keyHash)?.value == derived.hash)
            try image.verifySignature(with: derived)
            // Another key of the same kind does not verify it.
            let stranger =
                switch key {
                case .p256: TestSigningKey.p256(P256.Signing.PrivateKey())
                case .ed25519: TestSigningKey.ed25519(Curve25519.Signing.PrivateKey())
                }
            #expect(throws: ImageVerificationError.keyHashMismatch) {
                try image.verifySignature(with: try MCUbootPublicKey(Array(stranger.pkcs8PEM.utf8)))
            }
        }
    }

    @Test(arguments: [
        ("ec-p256-private.pem", "ec-p256-public.pem"), ("ec-p256-private-sec1.pem", "ec-p256-public.pem"),
        ("ed25519-private.pem", "ed25519-public.pem"),
    ])
    func opensslKeysDeriveThePublicKeyOpensslDerives(privateName: String, publicName: String) throws {
        let prefix = try Self.opensslPrefix()
        let derived = try MCUbootPublicKey(try keySample(prefix + privateName))
        let opensslsOwn = try MCUbootPublicKey(try keySample(prefix + publicName))
        #expect(derived == opensslsOwn)
        // Byte for byte: the SubjectPublicKeyInfo DER inside OpenSSL's PEM.
        let pem = String(decoding: try keySample(prefix + publicName), as: UTF8.self)
        #expect(derived.der == PEM.blocks(pem).first?.der)
    }

    @Test func encryptedForeignAndMalformedKeysSayWhatTheyAre() {
        let encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"
        #expect(throws: ImageVerificationError.badSignature("the key file holds an encrypted private key: give its public key (imgtool getpub -e pem -k KEY)")) {
            try MCUbootPublicKey(Array(encrypted.utf8))
        }
        let rsa = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
        #expect(throws: ImageVerificationError.badSignature("the key file holds RSA PRIVATE KEY, not an ECDSA P-256 or Ed25519 key")) {
            try MCUbootPublicKey(Array(rsa.utf8))
        }
        #expect(throws: ImageVerificationError.badSignature("the key file's PEM is not valid base64")) {
            try MCUbootPublicKey(Array("-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n".utf8))
        }
        #expect(throws: ImageVerificationError.badSignature("the key is neither an ECDSA P-256 nor an Ed25519 key (public or private)")) {
            try MCUbootPublicKey(Array("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8))
        }
    }

    @Test func pkcs8ParsingNeverTrapsOnDamagedKeys() throws {
        var generator = SeededGenerator.announced("pkcs8ParsingNeverTraps", seed: 8410)
        let key = Curve25519.Signing.PrivateKey()
        let der: [UInt8] = [0x30, 0x2E, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20] + key.rawRepresentation
        #expect(MCUbootPublicKey.ed25519Seed(pkcs8: der) == Array(key.rawRepresentation))
        for length in 0..<der.count { #expect(MCUbootPublicKey.ed25519Seed(pkcs8: Array(der.prefix(length))) == nil) }
        for _ in 0..<2000 {
            var damaged = der
            damaged[Int.random(in: 0..<16, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            _ = MCUbootPublicKey.ed25519Seed(pkcs8: damaged)
            _ = MCUbootPublicKey.publicKey(privateDER: damaged)
        }
        // Long-form lengths are read; a length past the end is refused.
        #expect(DERReader([0x04, 0x81, 0x02, 0xAA, 0xBB]).isAtEnd == false)
        var long = DERReader([0x04, 0x81, 0x02, 0xAA, 0xBB])
        #expect(long.read(tag: 0x04) == [0xAA, 0xBB])
        #expect(long.isAtEnd)
        var past = DERReader([0x04, 0x82, 0xFF, 0xFF, 0x00])
        #expect(past.read(tag: 0x04) == nil)
    }

    /// "openssl-3.0.19-" or whichever version made the committed keys.
    static func opensslPrefix() throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: keySamples.path)
        let name = try #require(names.sorted().first { $0.hasPrefix("openssl-") && $0.hasSuffix("-ed25519-private.pem") })
        return String(name.dropLast("ed25519-private.pem".count))
    }
}
