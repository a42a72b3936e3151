import BleotaCodec
import BleotaEngine

extension SMPProtocol {
    /// An MCUboot image is a plain image with a header and TLVs inside it, so `image info`
    /// shows the image's own report and then this: the header, every TLV, whether the hash
    /// TLV matches, and with `request.keyPath` whether the signature verifies. The image is
    /// recognised after loading (an MCUboot image may come as Intel HEX); a file that does
    /// not load is left to the command, which names what is wrong with it.
    public func describeImage(_ request: ImageRequest) throws(TransferError) -> ImageDescription? {
        let head = ImageFiles.probe(request.path).head
        if NordicDFUPackage.startsLikePackage(head) {
            guard NCSDFUPackage.isPackage(at: request.path, head: head) else { return nil }
            return try describePackage(request)
        }
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

extension SMPProtocol {
    /// An nRF Connect SDK package: a part per image, with what the manifest says of it and its MCUboot header.
    func describePackage(_ request: ImageRequest) throws(TransferError) -> ImageDescription {
        let package: NCSDFUPackage
        do { package = try NCSDFUPackage(contentsOf: request.path) } catch { throw TransferError(.badInput, step: .load, error.description) }
        var key: MCUbootPublicKey?
        if let keyPath = request.keyPath {
            let keyBytes = try ImageFiles.read(keyPath)
            do { key = try MCUbootPublicKey(keyBytes) } catch { throw TransferError(.badInput, step: .load, "\(keyPath): \(error)") }
        }
        var problem: String?
        let parts = package.images.map { image -> ImageDescription.Part in
            typealias Field = ImageDescription.Field
            let summary = MCUbootImageSummary(image.mcuboot, key: key)
            if problem == nil, let found = summary.problem { problem = "\(request.path): \(image.file): \(found)" }
            var fields = Field.image(file: image.file, bytes: image.bytes)
            fields.append(Field("image index", integer: Int64(image.imageIndex)))
            if let slot = image.xipSlot { fields.append(Field("direct-XIP slot", integer: Int64(slot))) }
            if let board = image.board { fields.append(Field("board", board)) }
            fields.append(Field("mcuboot", summary.lines.joined(separator: "\n"), typed: [("mcuboot", .object(summary.entries))]))
            let name = image.xipSlot.map { "image \(image.imageIndex), slot \($0)" } ?? "image \(image.imageIndex)"
            return ImageDescription.Part(
                name: name, fields: fields, hashMatches: image.mcuboot.isEncrypted ? nil : summary.hashValid,
                signatureVerified: summary.signatureVerified)
        }
        return ImageDescription(format: "nRF Connect SDK DFU package (format-version \(package.formatVersion))", parts: parts, problem: problem)
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
        let dependencies: [ImageDescription.Value] = image.dependencies.map {
            .object([Entry("image", .integer(Int64($0.image))), Entry("minimumVersion", .text($0.minimumVersion.description))])
        }
        return [
            Entry("version", .text(image.version.description)), Entry("headerSize", .integer(Int64(image.headerSize))),
            Entry("imageSize", .integer(Int64(image.imageSize))), Entry("loadAddress", .integer(Int64(image.loadAddress))),
            Entry("flags", .integer(Int64(image.flags))),
            Entry("flagNames", .list(MCUbootImage.Flags.names.filter { image.imageFlags.contains($0.0) }.map { .text($0.1) })),
            Entry("tlvs", .list(tlvs)),
            Entry("compression", image.compression.map(ImageDescription.Value.text) ?? .missing),
            Entry("decompressedSize", image.decompressedSize.map { .integer(Int64($0)) } ?? .missing),
            Entry("decompressedHash", image.decompressedHash.map { .text($0.hexString) } ?? .missing),
            Entry("encryption", image.encryption.map { .text($0.cipher) } ?? .missing),
            Entry("encryptionKey", image.encryption?.key.map { .text($0.name) } ?? .missing),
            Entry("securityCounter", image.securityCounter.map { .integer(Int64($0)) } ?? .missing),
            Entry("dependencies", .list(dependencies)),
            Entry("hash", image.hashTLV.map { .text($0.hexString) } ?? .missing), Entry("hashValid", .flag(hashValid)),
            Entry("hashChecked", .flag(!image.isEncrypted)),
            Entry("keyHash", keyHash.map(ImageDescription.Value.text) ?? .missing),
            Entry("signature", signatureName.map(ImageDescription.Value.text) ?? .missing),
            Entry("signatureVerified", signatureVerified.map(ImageDescription.Value.flag) ?? .missing),
            Entry("problem", problem.map(ImageDescription.Value.text) ?? .missing),
        ]
    }

    var lines: [String] {
        var lines = [
            "mcuboot:   version \(image.version), header \(image.headerSize) bytes, image \(image.imageSize) bytes, load \(hex32(image.loadAddress)), flags \(hex32(image.flags))"
                + (image.flags == 0 ? "" : " (\(image.imageFlags))")
        ]
        for tlv in image.tlvs { lines.append("  tlv 0x\(String(tlv.type, radix: 16)) \(tlv.name), \(tlv.value.count) bytes\(tlv.isProtected ? " (protected)" : "")") }
        if let compression = image.compression {
            lines.append(
                "  compressed: \(compression)" + (image.decompressedSize.map { ", \($0) bytes decompressed" } ?? "")
                    + (image.decompressedHash.map { "; the bootloader reports \($0.hexString.prefix(16))… (the decompressed SHA) once it runs" } ?? ""))
        }
        if let encryption = image.encryption {
            lines.append(
                "  encrypted: \(encryption.cipher), key in \(encryption.key.map { "TLV 0x\(String($0.type, radix: 16)) (\($0.name))" } ?? "no key TLV")")
        }
        if let counter = image.securityCounter { lines.append("  security counter: \(counter)") }
        for dependency in image.dependencies { lines.append("  needs:     \(dependency)") }
        let verdict =
            image.isEncrypted
            ? "(not checked: it covers the plaintext of the encrypted image; MCUboot checks it after decrypting)"
            : hashValid ? "(matches the image)" : "(DOES NOT MATCH)"
        lines.append("  hash:      \(image.hashTLV?.hexString ?? "none") \(verdict)")
        if let keyHash { lines.append("  key hash:  \(keyHash)") }
        lines.append(
            "  signature: \(signatureName ?? "none")" + (signatureVerified.map { $0 ? " (verified with the given key)" : " (DOES NOT VERIFY with the given key)" } ?? ""))
        if let problem { lines.append("  problem:   \(problem)") }
        return lines
    }
}
