import BleotaCodec

/// What `image info` adds for an MCUboot image.
struct MCUbootReport: Codable, Equatable {
    struct TLVEntry: Codable, Equatable {
        var type: UInt16
        var name: String
        var length: Int
        var protected: Bool
    }
    var version: String
    var headerSize: Int
    var imageSize: Int
    var loadAddress: UInt32
    var flags: UInt32
    var tlvs: [TLVEntry]
    var hash: String?
    var hashValid: Bool
    var keyHash: String?
    var signature: String?
    var signatureVerified: Bool?
    var problem: String?

    init(_ image: MCUbootImage, key: MCUbootPublicKey?) {
        version = image.version.description
        headerSize = image.headerSize
        imageSize = image.imageSize
        loadAddress = image.loadAddress
        flags = image.flags
        tlvs = image.tlvs.map { TLVEntry(type: $0.type, name: $0.name, length: $0.value.count, protected: $0.isProtected) }
        hash = image.hashTLV?.hexString
        hashValid = (try? image.verifyHash()) != nil
        keyHash = image.tlv(MCUbootImage.TLVType.keyHash)?.value.hexString
        switch image.signature {
        case .ecdsaP256?: signature = "ECDSA P-256"
        case .ed25519?: signature = "Ed25519"
        case .other(let type)?: signature = "TLV 0x\(String(type, radix: 16))"
        case nil: signature = nil
        }
        do { try image.verifyHash() } catch { problem = error.description }
        if let key {
            do {
                try image.verifySignature(with: key)
                signatureVerified = true
            } catch {
                signatureVerified = false
                problem = problem ?? error.description
            }
        }
    }

    var lines: [String] {
        var lines = ["mcuboot:   version \(version), header \(headerSize) bytes, image \(imageSize) bytes, load \(hex32(loadAddress)), flags \(hex32(flags))"]
        for tlv in tlvs { lines.append("  tlv 0x\(String(tlv.type, radix: 16)) \(tlv.name), \(tlv.length) bytes\(tlv.protected ? " (protected)" : "")") }
        lines.append("  hash:      \(hash ?? "none") \(hashValid ? "(matches the image)" : "(DOES NOT MATCH)")")
        if let keyHash { lines.append("  key hash:  \(keyHash)") }
        lines.append("  signature: \(signature ?? "none")" + (signatureVerified.map { $0 ? " (verified with the given key)" : " (DOES NOT VERIFY with the given key)" } ?? ""))
        if let problem { lines.append("  problem:   \(problem)") }
        return lines
    }
}
