import BleotaCodec
import BleotaEngine

extension SMPProtocol {
    /// An MCUboot image is a plain image with a header and TLVs inside it, so `image info`
    /// shows the image's own report and then this: the header, every TLV, whether the hash
    /// TLV matches, and with `request.keyPath` whether the signature verifies. The image is
    /// recognised after loading (an MCUboot image may come as Intel HEX); a file that does
    /// not load is left to the command, which names what is wrong with it.
    public func describeImage(_ request: ImageRequest) throws(TransferError) -> ImageDescription? {
        // Cheap first: every protocol is asked about every file.
        guard let format = request.inputFormat.flatMap(ImageFormat.init(rawValue:)) ?? ImageFormat(pathExtension: request.path) else { return nil }
        if format == .bin, !MCUbootImage.startsWithMagic(ImageFiles.probe(request.path).head) { return nil }
        let image: FirmwareImage
        do { image = try FirmwareImage.load(path: request.path, format: format, baseAddress: request.baseAddress) } catch { return nil }
        guard MCUbootImage.startsWithMagic(image.prefix(4, fill: request.fill)) else { return nil }
        var key: MCUbootPublicKey?
        if let keyPath = request.keyPath {
            let keyBytes = try ImageFiles.read(keyPath)
            do { key = try MCUbootPublicKey(keyBytes) } catch { throw TransferError(.badInput, step: .load, "\(keyPath): \(error)") }
        }
        let parsed: MCUbootImage
        do { parsed = try MCUbootImage(decoding: image, fill: request.fill) } catch {
            throw TransferError(.badInput, step: .load, "\(request.path) starts like an MCUboot image but does not parse: \(error)")
        }
        let summary = MCUbootImageSummary(parsed, key: key)
        return ImageDescription(
            format: "MCUboot image", embedded: ImageDescription.Embedded(key: "mcuboot", lines: summary.lines, entries: summary.entries),
            problem: summary.problem.map { "\(request.path): \($0)" })
    }
}

/// What `image info` shows of an MCUboot image's header and TLVs, and what it checked.
struct MCUbootImageSummary {
    let image: MCUbootImage
    let hashValid: Bool
    let signatureVerified: Bool?
    /// The first check that failed: the hash, then the signature.
    let problem: String?

    init(_ image: MCUbootImage, key: MCUbootPublicKey?) {
        self.image = image
        var problem: String?
        do { try image.verifyHash() } catch { problem = error.description }
        hashValid = problem == nil
        if let key {
            do {
                try image.verifySignature(with: key)
                signatureVerified = true
            } catch {
                signatureVerified = false
                problem = problem ?? error.description
            }
        } else {
            signatureVerified = nil
        }
        self.problem = problem
    }

    var signatureName: String? {
        switch image.signature {
        case .ecdsaP256?: "ECDSA P-256"
        case .ed25519?: "Ed25519"
        case .other(let type)?: "TLV 0x\(String(type, radix: 16))"
        case nil: nil
        }
    }

    var keyHash: String? { image.tlv(MCUbootImage.TLVType.keyHash)?.value.hexString }

    /// `image info --json`'s `mcuboot` object.
    var entries: [ImageDescription.Field.TypedValue] {
        typealias Entry = ImageDescription.Field.TypedValue
        let tlvs: [ImageDescription.Value] = image.tlvs.map { tlv in
            .object([
                Entry("type", .integer(Int64(tlv.type))), Entry("name", .text(tlv.name)), Entry("length", .integer(Int64(tlv.value.count))),
                Entry("protected", .flag(tlv.isProtected)),
            ])
        }
        return [
            Entry("version", .text(image.version.description)), Entry("headerSize", .integer(Int64(image.headerSize))),
            Entry("imageSize", .integer(Int64(image.imageSize))), Entry("loadAddress", .integer(Int64(image.loadAddress))),
            Entry("flags", .integer(Int64(image.flags))), Entry("tlvs", .list(tlvs)),
            Entry("hash", image.hashTLV.map { .text($0.hexString) } ?? .missing), Entry("hashValid", .flag(hashValid)),
            Entry("keyHash", keyHash.map(ImageDescription.Value.text) ?? .missing),
            Entry("signature", signatureName.map(ImageDescription.Value.text) ?? .missing),
            Entry("signatureVerified", signatureVerified.map(ImageDescription.Value.flag) ?? .missing),
            Entry("problem", problem.map(ImageDescription.Value.text) ?? .missing),
        ]
    }

    var lines: [String] {
        var lines = [
            "mcuboot:   version \(image.version), header \(image.headerSize) bytes, image \(image.imageSize) bytes, load \(hex32(image.loadAddress)), flags \(hex32(image.flags))"
        ]
        for tlv in image.tlvs { lines.append("  tlv 0x\(String(tlv.type, radix: 16)) \(tlv.name), \(tlv.value.count) bytes\(tlv.isProtected ? " (protected)" : "")") }
        lines.append("  hash:      \(image.hashTLV?.hexString ?? "none") \(hashValid ? "(matches the image)" : "(DOES NOT MATCH)")")
        if let keyHash { lines.append("  key hash:  \(keyHash)") }
        lines.append(
            "  signature: \(signatureName ?? "none")" + (signatureVerified.map { $0 ? " (verified with the given key)" : " (DOES NOT VERIFY with the given key)" } ?? ""))
        if let problem { lines.append("  problem:   \(problem)") }
        return lines
    }
}
