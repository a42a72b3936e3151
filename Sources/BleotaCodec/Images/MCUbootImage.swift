import Crypto
import Foundation

/// An MCUboot image: a 32-byte header (padded to `headerSize`), the firmware,
/// then TLV areas — protected (covered by the hash and signature) and
/// unprotected (the hash, key hash and signature themselves). Layout from
/// MCUboot's bootutil/image.h and docs/design.md; see protocols/mcuboot.md.
///
/// Parsing never trusts a length: every size is checked against the bytes
/// present, so a truncated or hostile file is a ``DecodingError``.
public struct MCUbootImage: Sendable, Equatable {
    public static let magic: UInt32 = 0x96F3_B83D
    static let protectedInfoMagic: UInt16 = 0x6908
    static let unprotectedInfoMagic: UInt16 = 0x6907

    public struct Version: Sendable, Hashable, Comparable, CustomStringConvertible {
        public var major: UInt8
        public var minor: UInt8
        public var revision: UInt16
        public var build: UInt32

        public init(major: UInt8, minor: UInt8, revision: UInt16, build: UInt32) {
            self.major = major
            self.minor = minor
            self.revision = revision
            self.build = build
        }

        /// "1.2.3" or "1.2.3.4" when there is a build number, as MCUmgr's image list prints it.
        public var description: String {
            "\(major).\(minor).\(revision)" + (build != 0 ? ".\(build)" : "")
        }

        public static func < (a: Version, b: Version) -> Bool {
            (a.major, a.minor, a.revision, a.build) < (b.major, b.minor, b.revision, b.build)
        }

        /// "1.2.3" or "1.2.3+4" (imgtool's form) or "1.2.3.4"; missing or unparsable parts are 0,
        /// out-of-range ones clamped, so any label gives a version.
        public init(parsing text: String) {
            let parts = text.split(whereSeparator: { $0 == "." || $0 == "+" }).map { UInt32($0) ?? 0 }
            func part(_ index: Int) -> UInt32 { index < parts.count ? parts[index] : 0 }
            self.init(
                major: UInt8(clamping: part(0)), minor: UInt8(clamping: part(1)), revision: UInt16(clamping: part(2)),
                build: part(3))
        }
    }

    public struct TLV: Sendable, Hashable {
        public var type: UInt16
        public var value: [UInt8]
        public var isProtected: Bool

        public var name: String {
            switch type {
            case 0x01: "key hash"
            case 0x02: "public key"
            case 0x10: "SHA-256"
            case 0x11: "SHA-384"
            case 0x12: "SHA-512"
            case 0x20: "RSA-2048 signature"
            case 0x21: "ECDSA P-224 signature"
            case 0x22: "ECDSA signature"
            case 0x23: "RSA-3072 signature"
            case 0x24: "Ed25519 signature"
            case 0x25: "pure signature (of the image itself)"
            case 0x30: "encrypted key (RSA-OAEP)"
            case 0x31: "encrypted key (AES key wrap)"
            case 0x32: "encrypted key (ECIES P-256)"
            case 0x33: "encrypted key (ECIES X25519)"
            case 0x34: "encrypted key (ECIES X25519, HMAC-SHA-512)"
            case 0x40: "dependency"
            case 0x50: "security counter"
            case 0x60: "boot record"
            case 0x70: "decompressed size"
            case 0x71: "decompressed SHA"
            case 0x72: "decompressed signature"
            case 0x73: "compressed size before encryption"
            case 0x74: "vendor UUID"
            case 0x75: "image class UUID"
            default: "TLV 0x\(String(type, radix: 16))"
            }
        }
    }

    /// TLV types (bootutil/image.h `IMAGE_TLV_*`).
    public enum TLVType {
        public static let keyHash: UInt16 = 0x01
        public static let publicKey: UInt16 = 0x02
        public static let sha256: UInt16 = 0x10
        public static let ecdsaSignature: UInt16 = 0x22
        public static let ed25519Signature: UInt16 = 0x24
        /// The encrypted AES key, one TLV by the key's kind (RSA-OAEP, AES key wrap, ECIES P-256, X25519, X25519 with SHA-512).
        public static let encryptionKeys: ClosedRange<UInt16> = 0x30...0x34
        /// An image this one needs: `image_id` (u8), 3 bytes of padding, its least version (8 bytes).
        public static let dependency: UInt16 = 0x40
        /// The anti-rollback counter (u32): MCUboot refuses an image whose counter is below the one it stored.
        public static let securityCounter: UInt16 = 0x50
        /// The firmware's size once decompressed (u32).
        public static let decompressedSize: UInt16 = 0x70
        /// The hash of the image as it will be once decompressed: what NCS's MCUboot writes as the hash
        /// TLV of the slot it decompresses into, and so what the slot list reports after the swap.
        public static let decompressedSHA: UInt16 = 0x71
        public static let decompressedSignature: UInt16 = 0x72
    }

    /// The header's flags (bootutil/image.h `IMAGE_F_*`).
    public struct Flags: OptionSet, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }

        public static let positionIndependent = Flags(rawValue: 0x1)
        /// The firmware is AES-128-CTR encrypted; the key is in an encrypted-key TLV.
        public static let encryptedAES128 = Flags(rawValue: 0x4)
        public static let encryptedAES256 = Flags(rawValue: 0x8)
        public static let nonBootable = Flags(rawValue: 0x10)
        /// Copied to RAM at the load address and run there.
        public static let ramLoad = Flags(rawValue: 0x20)
        /// Linked for one slot: the load address is that slot's flash offset (direct-XIP).
        public static let romFixed = Flags(rawValue: 0x100)
        public static let compressedLZMA1 = Flags(rawValue: 0x200)
        public static let compressedLZMA2 = Flags(rawValue: 0x400)
        /// The LZMA2 stream went through the ARM Thumb branch filter first (imgtool's `lzma2armthumb`).
        public static let compressedARMThumbFilter = Flags(rawValue: 0x800)

        public static let names: [(Flags, String)] = [
            (.positionIndependent, "position-independent"), (.encryptedAES128, "encrypted AES-128"), (.encryptedAES256, "encrypted AES-256"),
            (.nonBootable, "not bootable"), (.ramLoad, "RAM load"), (.romFixed, "ROM-fixed"), (.compressedLZMA1, "compressed LZMA1"),
            (.compressedLZMA2, "compressed LZMA2"), (.compressedARMThumbFilter, "ARM Thumb filter"),
        ]

        /// The names of the flags set ("compressed LZMA2, ARM Thumb filter"), with any unknown bits in hex.
        public var description: String {
            var parts = Self.names.filter { contains($0.0) }.map(\.1)
            let unknown = rawValue & ~Self.names.reduce(0) { $0 | $1.0.rawValue }
            if unknown != 0 { parts.append("unknown 0x\(String(unknown, radix: 16))") }
            return parts.isEmpty ? "none" : parts.joined(separator: ", ")
        }
    }

    /// The version in the header `bytes` begin with (all a first upload chunk may hold); nil when
    /// they do not begin with an MCUboot header.
    public static func headerVersion(_ bytes: some Collection<UInt8>) -> Version? {
        let header = Array(bytes.prefix(32))
        guard header.count == 32, startsWithMagic(header) else { return nil }
        return Version(
            major: header[20], minor: header[21], revision: UInt16(header[22]) | UInt16(header[23]) << 8,
            build: littleEndian(Array(header[24..<28])) ?? 0)
    }

    /// Whether `bytes` begin with the MCUboot header magic (little endian), without parsing further.
    public static func startsWithMagic(_ bytes: some Collection<UInt8>) -> Bool {
        var reader = ByteReader(bytes.prefix(4))
        return (try? reader.readUInt32(.little)) == magic
    }

    public var loadAddress: UInt32
    public var headerSize: Int
    public var protectedTLVSize: Int
    public var imageSize: Int
    public var flags: UInt32
    public var version: Version
    public var tlvs: [TLV]
    /// Header, firmware and protected TLVs: what the hash and signature cover.
    public var hashedBytes: ArraySlice<UInt8>
    /// The whole file as parsed (header through the last TLV).
    public var totalSize: Int

    public init(decoding bytes: [UInt8]) throws(DecodingError) {
        try self.init(decoding: bytes, fileSize: bytes.count)
    }

    /// Parses the MCUboot image at the start of a firmware image that may be
    /// sparse, flattening it only as far as the header says the MCUboot image
    /// can reach (header, firmware, protected TLVs and at most 64 KiB of TLVs):
    /// a header that claims more than the file holds is refused without
    /// flattening anything.
    public init(decoding image: FirmwareImage, fill: UInt8 = 0xFF) throws(DecodingError) {
        let head = image.prefix(32, fill: fill)
        guard let (bodyEnd, reach) = Self.extent(ofHeader: head), bodyEnd <= image.size else {
            // Too short for a header, or claiming more than there is: this throws.
            try self.init(decoding: head, fileSize: image.size)
            return
        }
        try self.init(decoding: image.prefix(min(reach, image.size), fill: fill), fileSize: image.size)
    }

    /// Where the firmware ends and how far parsing can read, from the header's
    /// sizes; nil when `header` is shorter than 32 bytes. The unprotected TLV
    /// area's length is a 16-bit field, so it cannot reach further than 64 KiB.
    static func extent(ofHeader header: [UInt8]) -> (bodyEnd: Int, reach: Int)? {
        guard header.count >= 32 else { return nil }
        func field(_ offset: Int, _ length: Int) -> Int {
            (0..<length).reduce(0) { $0 | Int(header[offset + $1]) << (8 * $1) }
        }
        let bodyEnd = field(8, 2) + field(12, 4)
        return (bodyEnd, bodyEnd + field(10, 2) + 0xFFFF)
    }

    /// `bytes` is the start of a file of `fileSize` bytes: all of it, or at
    /// least as much as the header says the image reaches.
    init(decoding bytes: [UInt8], fileSize: Int) throws(DecodingError) {
        var reader = ByteReader(bytes)
        let magic = try reader.readUInt32(.little, "MCUboot magic")
        guard magic == Self.magic else {
            throw reader.invalid("MCUboot magic", "0x\(String(magic, radix: 16)) is not 0x96f3b83d", at: 0)
        }
        loadAddress = try reader.readUInt32(.little, "load address")
        headerSize = Int(try reader.readUInt16(.little, "header size"))
        protectedTLVSize = Int(try reader.readUInt16(.little, "protected TLV size"))
        imageSize = Int(try reader.readUInt32(.little, "image size"))
        flags = try reader.readUInt32(.little, "flags")
        version = Version(
            major: try reader.readUInt8("version major"), minor: try reader.readUInt8("version minor"),
            revision: try reader.readUInt16(.little, "version revision"),
            build: try reader.readUInt32(.little, "version build"))
        guard headerSize >= 32 else { throw reader.invalid("header size", "\(headerSize) is smaller than the 32-byte header", at: 8) }
        let bodyEnd = headerSize + imageSize
        guard bodyEnd <= bytes.count, bodyEnd <= fileSize else {
            throw reader.invalid("image size", "header and image need \(bodyEnd) bytes but the file has \(fileSize)", at: 12)
        }
        var tlvs: [TLV] = []
        var offset = bodyEnd
        if protectedTLVSize > 0 {
            let consumed = try Self.readArea(bytes, at: offset, magic: Self.protectedInfoMagic, isProtected: true, into: &tlvs)
            guard consumed == protectedTLVSize else {
                throw DecodingError(
                    field: "protected TLV size", offset: 10,
                    reason: .invalidValue("the header says \(protectedTLVSize) bytes but the area holds \(consumed)"))
            }
            offset += consumed
        }
        hashedBytes = bytes[0..<offset]
        offset += try Self.readArea(bytes, at: offset, magic: Self.unprotectedInfoMagic, isProtected: false, into: &tlvs)
        totalSize = offset
        self.tlvs = tlvs
    }

    /// Reads one TLV area (info header, then entries); returns its size.
    static func readArea(
        _ bytes: [UInt8], at start: Int, magic: UInt16, isProtected: Bool,
        into tlvs: inout [TLV]
    ) throws(DecodingError) -> Int {
        let area = isProtected ? "protected TLV area" : "TLV area"
        // Offsets in errors are the file's: read from `start` in the whole input.
        var reader = ByteReader(bytes)
        try reader.skip(start, area)
        let found = try reader.readUInt16(.little, "\(area) magic")
        guard found == magic else {
            throw DecodingError(
                field: "\(area) magic", offset: start,
                reason: .invalidValue("0x\(String(found, radix: 16)) is not 0x\(String(magic, radix: 16)): the image has no TLVs or is cut short"))
        }
        let total = Int(try reader.readUInt16(.little, "\(area) length"))
        guard total >= 4, total - 4 <= reader.remaining else {
            throw DecodingError(
                field: "\(area) length", offset: start + 2,
                reason: .invalidValue("\(total) bytes claimed but \(reader.remaining + 4) present"))
        }
        let entriesStart = reader.offset
        var entries = ByteReader(try reader.readBytes(total - 4, area))
        do {
            while !entries.isAtEnd {
                let type = try entries.readUInt16(.little, "TLV type")
                let length = Int(try entries.readUInt16(.little, "TLV length"))
                tlvs.append(TLV(type: type, value: try entries.readBytes(length, "TLV value"), isProtected: isProtected))
            }
        } catch {
            throw DecodingError(field: error.field, offset: entriesStart + error.offset, reason: error.reason)
        }
        return total
    }

    public func tlv(_ type: UInt16) -> TLV? { tlvs.first { $0.type == type } }

    /// `bytes` (this image as parsed) with the value of its first unprotected TLV of `type` replaced
    /// by `value` of the same length; nil when there is no such TLV or the lengths differ. (What NCS's
    /// MCUboot does to a slot it decompresses into: the decompressed SHA becomes its hash TLV.)
    public func replacingUnprotectedTLV(_ type: UInt16, with value: [UInt8], in bytes: [UInt8]) -> [UInt8]? {
        var offset = hashedBytes.count + 4
        var result = bytes
        for tlv in tlvs where !tlv.isProtected {
            let start = offset + 4
            if tlv.type == type {
                guard tlv.value.count == value.count, start + value.count <= result.count else { return nil }
                result.replaceSubrange(start..<start + value.count, with: value)
                return result
            }
            offset = start + tlv.value.count
        }
        return nil
    }

    /// The SHA-256 TLV: what MCUmgr's image list reports as the image's hash.
    public var hashTLV: [UInt8]? { tlv(TLVType.sha256)?.value }

    /// SHA-256 over header, firmware and protected TLVs.
    public var computedHash: [UInt8] { SHA256Digest.hash(hashedBytes) }

    public enum Signature: Sendable, Equatable {
        case ecdsaP256([UInt8])
        case ed25519([UInt8])
        case other(type: UInt16)
    }

    public var signature: Signature? {
        for tlv in tlvs where !tlv.isProtected {
            switch tlv.type {
            case TLVType.ecdsaSignature: return .ecdsaP256(tlv.value)
            case TLVType.ed25519Signature: return .ed25519(tlv.value)
            case 0x20, 0x21, 0x23: return .other(type: tlv.type)
            default: continue
            }
        }
        return nil
    }

    /// Checks the SHA-256 TLV against the bytes; the error says which way it fails.
    ///
    /// An encrypted image passes unchecked: its hash covers the plaintext, which only the key
    /// the bootloader holds can recover (imgtool's own `verify` calls it an invalid hash). What
    /// guards it on the way is the upload's SHA-256 of the file, which the device checks
    /// (`img_mgmt`'s `match`), and MCUboot's check of the hash and signature after decrypting.
    public func verifyHash() throws(ImageVerificationError) {
        guard let stored = hashTLV else { throw .noHash }
        if isEncrypted { return }
        guard stored == computedHash else { throw .hashMismatch(stored: stored, computed: computedHash) }
    }

    public var imageFlags: Flags { Flags(rawValue: flags) }

    /// Whether the firmware is encrypted: an AES-128 or AES-256 flag, and the TLV with its key
    /// (imgtool always writes one). A flag without the key is a damaged header, not an encrypted
    /// image: such an image is hash-checked like any other, so one flipped bit cannot wave a
    /// damaged image through.
    public var isEncrypted: Bool {
        !imageFlags.isDisjoint(with: [.encryptedAES128, .encryptedAES256]) && tlvs.contains { TLVType.encryptionKeys.contains($0.type) }
    }

    /// How the firmware is encrypted, and which TLV carries its key; nil when it is not.
    public var encryption: (cipher: String, key: TLV?)? {
        guard isEncrypted else { return nil }
        return (imageFlags.contains(.encryptedAES256) ? "AES-256" : "AES-128", tlvs.first { TLVType.encryptionKeys.contains($0.type) })
    }

    /// The compression the header names, nil for none.
    public var compression: String? {
        if imageFlags.contains(.compressedLZMA2) { return imageFlags.contains(.compressedARMThumbFilter) ? "LZMA2 with the ARM Thumb filter" : "LZMA2" }
        if imageFlags.contains(.compressedLZMA1) { return "LZMA1" }
        return nil
    }

    /// What the slot list reports for this image once the bootloader has decompressed it (the
    /// decompressed SHA TLV), nil for an image that is not compressed.
    public var decompressedHash: [UInt8]? { compression == nil ? nil : tlv(TLVType.decompressedSHA)?.value }

    /// The firmware's size decompressed, from its TLV.
    public var decompressedSize: Int? { tlv(TLVType.decompressedSize).flatMap { Self.littleEndian($0.value) }.map(Int.init) }

    /// The anti-rollback counter, from its TLV.
    public var securityCounter: UInt32? { tlv(TLVType.securityCounter).flatMap { Self.littleEndian($0.value) } }

    /// An image of the device this one needs, at a least version (`IMAGE_TLV_DEPENDENCY`).
    public struct Dependency: Sendable, Hashable, CustomStringConvertible {
        public var image: Int
        public var minimumVersion: Version
        public var description: String { "image \(image) at \(minimumVersion) or later" }
    }

    /// The images this one needs; a dependency TLV that is not 12 bytes is left out.
    public var dependencies: [Dependency] {
        tlvs.filter { $0.type == TLVType.dependency && $0.value.count == 12 }.map { tlv in
            let bytes = tlv.value
            return Dependency(
                image: Int(bytes[0]),
                minimumVersion: Version(
                    major: bytes[4], minor: bytes[5], revision: UInt16(bytes[6]) | UInt16(bytes[7]) << 8,
                    build: Self.littleEndian(Array(bytes[8..<12])) ?? 0))
        }
    }

    /// A 4-byte little-endian value; nil for any other length.
    static func littleEndian(_ bytes: [UInt8]) -> UInt32? {
        guard bytes.count == 4 else { return nil }
        return bytes.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }

    /// Verifies the signature against `key` (and the key hash TLV, when present, against the key).
    ///
    /// Of an encrypted image, the signature is checked against the hash TLV (which it signs),
    /// since the hashed plaintext is not there to hash: that proves the TLV is the signer's, and
    /// MCUboot proves the rest after decrypting.
    public func verifySignature(with key: MCUbootPublicKey) throws(ImageVerificationError) {
        try verifyHash()
        let digest = isEncrypted ? hashTLV ?? [] : computedHash
        // A key of another kind is named as such, before its hash is compared (which would only say "a different key").
        switch (signature, key) {
        case (.ecdsaP256?, .ed25519), (.ed25519?, .p256):
            throw .badSignature("the image is signed with \(signature!.algorithm) but the key is \(key.algorithm): give the \(signature!.algorithm) public key")
        default: break
        }
        if let keyHash = tlv(TLVType.keyHash)?.value, keyHash != key.hash {
            throw .keyHashMismatch
        }
        switch (signature, key) {
        case (nil, _):
            throw .unsigned
        case (.ecdsaP256(let der)?, .p256(let keyDER)):
            guard let publicKey = try? P256.Signing.PublicKey(derRepresentation: keyDER) else { throw .badSignature("the P-256 key is invalid") }
            guard let signature = try? P256.Signing.ECDSASignature(derRepresentation: der) else { throw .badSignature("the ECDSA signature is not valid DER") }
            // imgtool signs the hashed region with ECDSA-SHA256: the signature is of its SHA-256.
            guard digest.count == 32, publicKey.isValidSignature(signature, for: StoredSHA256(bytes: digest)) else {
                throw .badSignature("the ECDSA P-256 signature does not verify with this key")
            }
        case (.ed25519(let raw)?, .ed25519(let keyBytes)):
            guard let publicKey = try? Curve25519.Signing.PublicKey(rawRepresentation: keyBytes) else { throw .badSignature("the Ed25519 key is invalid") }
            // MCUboot's Ed25519 signs the 32-byte hash as the message (not the image).
            guard publicKey.isValidSignature(raw, for: digest) else {
                throw .badSignature("the Ed25519 signature does not verify with this key")
            }
        case (.ecdsaP256?, _), (.ed25519?, _):
            throw .badSignature("the image is signed with \(signature!.algorithm) but the key is \(key.algorithm)")
        case (.other(let type)?, _):
            throw .badSignature("signature TLV 0x\(String(type, radix: 16)) (RSA or P-224) is not supported; use ECDSA P-256 or Ed25519")
        }
    }
}

/// A SHA-256 digest known by its bytes (an image's hash TLV, or one computed here), so that an
/// ECDSA-SHA256 signature can be checked against the digest it signed.
struct StoredSHA256: Digest {
    let bytes: [UInt8]
    static var byteCount: Int { 32 }
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try bytes.withUnsafeBytes(body) }
    var description: String { "SHA-256 \(bytes.hexString)" }
}

extension MCUbootImage.Signature {
    var algorithm: String {
        switch self {
        case .ecdsaP256: "ECDSA P-256"
        case .ed25519: "Ed25519"
        case .other(let type): "TLV 0x\(String(type, radix: 16))"
        }
    }
}

public enum ImageVerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    case noHash
    case hashMismatch(stored: [UInt8], computed: [UInt8])
    case unsigned
    case keyHashMismatch
    case badSignature(String)

    public var description: String {
        switch self {
        case .noHash: "the image has no SHA-256 TLV: sign it with imgtool"
        case .hashMismatch(let stored, let computed):
            "the image's SHA-256 TLV (\(stored.hexString.prefix(16))…) does not match its contents (\(computed.hexString.prefix(16))…): the file is corrupt or was changed after signing"
        case .unsigned: "the image has no signature but --key was given: sign it with imgtool sign --key"
        case .keyHashMismatch: "the image was signed with a different key (its key hash TLV does not match --key)"
        case .badSignature(let why): why
        }
    }
}

/// A public key MCUboot images are signed with: ECDSA P-256 or Ed25519, from PEM or DER.
///
/// Holds the key's bytes (checked when read) rather than swift-crypto's key
/// types, which are not `Sendable`.
public enum MCUbootPublicKey: Sendable, Equatable {
    /// DER SubjectPublicKeyInfo.
    case p256(der: [UInt8])
    /// The raw 32-byte key.
    case ed25519(raw: [UInt8])

    /// DER SubjectPublicKeyInfo prefix of an Ed25519 key (RFC 8410): the 32 key bytes follow.
    static let ed25519Prefix: [UInt8] = [0x30, 0x2A, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x03, 0x21, 0x00]

    /// Reads a public key, PEM (`-----BEGIN PUBLIC KEY-----`) or DER
    /// SubjectPublicKeyInfo, or derives it from a private key as imgtool does
    /// (`imgtool verify -k` takes the signing key): ECDSA P-256 in SEC1
    /// (`EC PRIVATE KEY`) or PKCS#8 (`PRIVATE KEY`), Ed25519 in PKCS#8, PEM or DER.
    public init(_ bytes: [UInt8]) throws(ImageVerificationError) {
        var der = bytes
        if let text = String(validating: bytes, as: UTF8.self), text.contains("-----BEGIN") {
            let blocks = PEM.blocks(text)
            if blocks.contains(where: { $0.label == "ENCRYPTED PRIVATE KEY" }) {
                throw .badSignature("the key file holds an encrypted private key: give its public key (imgtool getpub -e pem -k KEY)")
            }
            guard let block = blocks.first(where: { ["PUBLIC KEY", "PRIVATE KEY", "EC PRIVATE KEY"].contains($0.label) }) else {
                let labels = blocks.map(\.label)
                throw .badSignature(
                    labels.isEmpty
                        ? "the key file's PEM is not valid base64"
                        : "the key file holds \(labels.joined(separator: ", ")), not an ECDSA P-256 or Ed25519 key")
            }
            der = block.der
        }
        if let key = Self.publicKey(der: der) ?? Self.publicKey(privateDER: der) {
            self = key
        } else {
            throw .badSignature("the key is neither an ECDSA P-256 nor an Ed25519 key (public or private)")
        }
    }

    /// A DER SubjectPublicKeyInfo of either kind.
    static func publicKey(der: [UInt8]) -> MCUbootPublicKey? {
        if der.count == 44, Array(der.prefix(12)) == ed25519Prefix,
            (try? Curve25519.Signing.PublicKey(rawRepresentation: der.suffix(32))) != nil
        {
            return .ed25519(raw: Array(der.suffix(32)))
        }
        if let key = try? P256.Signing.PublicKey(derRepresentation: der) {
            return .p256(der: Array(key.derRepresentation))
        }
        return nil
    }

    /// The public half of a DER private key: Ed25519 in PKCS#8, or P-256 in PKCS#8 or SEC1.
    static func publicKey(privateDER der: [UInt8]) -> MCUbootPublicKey? {
        if let seed = ed25519Seed(pkcs8: der), let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: seed) {
            return .ed25519(raw: Array(key.publicKey.rawRepresentation))
        }
        if let key = try? P256.Signing.PrivateKey(derRepresentation: der) {
            return .p256(der: Array(key.publicKey.derRepresentation))
        }
        return nil
    }

    /// The 32-byte seed of an Ed25519 private key in PKCS#8 (RFC 8410 §7):
    /// `SEQUENCE { INTEGER 0|1, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING seed }, … }`.
    /// Nil for anything else.
    static func ed25519Seed(pkcs8 der: [UInt8]) -> [UInt8]? {
        var outer = DERReader(der)
        guard let body = outer.read(tag: 0x30), outer.isAtEnd else { return nil }
        var fields = DERReader(body)
        guard let version = fields.read(tag: 0x02), version == [0] || version == [1],
            let algorithm = fields.read(tag: 0x30), algorithm == [0x06, 0x03, 0x2B, 0x65, 0x70],
            let wrapped = fields.read(tag: 0x04)
        else { return nil }
        var inner = DERReader(wrapped)
        guard let seed = inner.read(tag: 0x04), inner.isAtEnd, seed.count == 32 else { return nil }
        return seed
    }

    public var algorithm: String {
        switch self {
        case .p256: "ECDSA P-256"
        case .ed25519: "Ed25519"
        }
    }

    /// DER SubjectPublicKeyInfo, which imgtool hashes for the key hash TLV.
    public var der: [UInt8] {
        switch self {
        case .p256(let der): der
        case .ed25519(let raw): Self.ed25519Prefix + raw
        }
    }

    public var hash: [UInt8] { SHA256Digest.hash(der) }
}

/// The blocks of a PEM file (RFC 7468): a label and the DER bytes between
/// `-----BEGIN label-----` and `-----END label-----`. Text outside blocks
/// (comments, `openssl`'s "EC PARAMETERS" block is a block of its own) is skipped;
/// a block whose body is not base64 is left out.
enum PEM {
    struct Block: Equatable {
        var label: String
        var der: [UInt8]
    }

    static func blocks(_ text: String) -> [Block] {
        var blocks: [Block] = []
        var label: String?
        var body = ""
        for rawLine in text.split(whereSeparator: \.isNewline) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if let open = label {
                if line == "-----END \(open)-----" {
                    if let der = Base64.decode(body) { blocks.append(Block(label: open, der: der)) }
                    label = nil
                } else {
                    body += line
                }
            } else if line.hasPrefix("-----BEGIN "), line.hasSuffix("-----"), line.count > 16 {
                label = String(line.dropFirst(11).dropLast(5))
                body = ""
            }
        }
        return blocks
    }
}

/// Reads DER elements with one-byte tags and definite lengths (X.690 §8.1),
/// enough to take a PKCS#8 key apart; nil on anything malformed, never a trap.
struct DERReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { offset == bytes.count }

    /// The contents of the next element when its tag is `tag`.
    mutating func read(tag: UInt8) -> [UInt8]? {
        guard offset + 2 <= bytes.count, bytes[offset] == tag else { return nil }
        var cursor = offset + 1
        var length = Int(bytes[cursor])
        cursor += 1
        if length >= 0x80 {
            let octets = length & 0x7F
            guard (1...3).contains(octets), cursor + octets <= bytes.count else { return nil }
            length = bytes[cursor..<cursor + octets].reduce(0) { $0 << 8 | Int($1) }
            cursor += octets
        }
        guard length <= bytes.count - cursor else { return nil }
        offset = cursor + length
        return Array(bytes[cursor..<offset])
    }
}

/// Standard base64 (RFC 4648) for PEM bodies and SMP's serial framing.
public enum Base64 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let values: [Int8] = {
        var table = [Int8](repeating: -1, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = Int8(index) }
        return table
    }()

    public static func encode(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var iterator = bytes.makeIterator()
        while let a = iterator.next() {
            let b = iterator.next(), c = iterator.next()
            let word = UInt32(a) << 16 | UInt32(b ?? 0) << 8 | UInt32(c ?? 0)
            out.append(alphabet[Int(word >> 18 & 63)])
            out.append(alphabet[Int(word >> 12 & 63)])
            out.append(b == nil ? UInt8(ascii: "=") : alphabet[Int(word >> 6 & 63)])
            out.append(c == nil ? UInt8(ascii: "=") : alphabet[Int(word & 63)])
        }
        return out
    }

    /// Decodes padded base64; nil for anything else (bad characters, bad length).
    public static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        guard text.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(text.count / 4 * 3)
        var quad = [Int](repeating: 0, count: 4)
        var index = 0
        var padding = 0
        for character in text {
            if character == UInt8(ascii: "=") {
                padding += 1
                quad[index] = 0
            } else {
                guard padding == 0 else { return nil }
                let value = values[Int(character)]
                guard value >= 0 else { return nil }
                quad[index] = Int(value)
            }
            index += 1
            if index == 4 {
                let word = quad[0] << 18 | quad[1] << 12 | quad[2] << 6 | quad[3]
                out.append(UInt8(word >> 16 & 0xFF))
                if padding < 2 { out.append(UInt8(word >> 8 & 0xFF)) }
                if padding < 1 { out.append(UInt8(word & 0xFF)) }
                index = 0
                if padding > 0 { break }
            }
        }
        guard padding <= 2, out.count == text.count / 4 * 3 - padding else { return nil }
        return out
    }

    public static func decode(_ text: String) -> [UInt8]? { decode(Array(text.utf8)) }
}

extension MCUbootImage {
    /// Builds an unsigned image the way `imgtool sign --pad-header` without a
    /// key does: a header padded with 0xFF, the firmware, and a TLV area holding
    /// the SHA-256. The simulator's factory images are made this way.
    public static func build(firmware: [UInt8], version: Version, headerSize: Int = 0x200, loadAddress: UInt32 = 0, flags: Flags = []) -> [UInt8] {
        var writer = ByteWriter(capacity: headerSize + firmware.count + 44)
        writer.write(magic, .little)
        writer.write(loadAddress, .little)
        writer.write(UInt16(headerSize), .little)
        writer.write(UInt16(0), .little)  // no protected TLVs
        writer.write(UInt32(firmware.count), .little)
        writer.write(flags.rawValue, .little)
        writer.write(version.major)
        writer.write(version.minor)
        writer.write(version.revision, .little)
        writer.write(version.build, .little)
        writer.write(UInt32(0), .little)  // padding
        // imgtool fills the rest of the header with the erased-flash value.
        writer.write(contentsOf: [UInt8](repeating: 0xFF, count: headerSize - 32))
        writer.write(contentsOf: firmware)
        let hash = SHA256Digest.hash(writer.bytes)
        writer.write(unprotectedInfoMagic, .little)
        writer.write(UInt16(4 + 4 + 32), .little)
        writer.write(TLVType.sha256, .little)
        writer.write(UInt16(32), .little)
        writer.write(contentsOf: hash)
        return writer.bytes
    }
}
