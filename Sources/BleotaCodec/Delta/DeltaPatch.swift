/// A detools sequential patch (detools 0.53.0, `create_patch --type sequential`), optionally behind
/// the 64-byte header Espressif's `esp_delta_ota_patch_gen.py` writes.
///
/// Layout: one byte, patch type (bits 6–4, 0 = sequential) and compression (bits 3–0: 0 none, 4
/// heatshrink); the new image's size as a ``DeltaSize``; then, compressed as one stream (heatshrink's
/// own first byte naming its window and lookahead), the size of a data-format section (0: none) and
/// the chunks (``DiffChunk``), each as its diff's size and bytes, its extra's size and bytes, and its
/// adjustment, until the new image is complete. An empty new image has no stream at all.
public struct DeltaPatchHeader: Sendable, Hashable {
    public enum Compression: UInt8, Sendable, CaseIterable, CustomStringConvertible {
        case none = 0
        case heatshrink = 4
        public var description: String { self == .none ? "none" : "heatshrink" }
        /// detools' numbers for the compressions bleota does not apply, for messages.
        static let othersByNumber: [UInt8: String] = [1: "lzma", 2: "crle", 3: "bz2", 5: "zstd", 6: "lz4"]
    }

    /// `esp_delta_ota`'s magic, little-endian in the first four bytes.
    public static let espMagic: UInt32 = 0xFCCD_DE10
    public static let espHeaderSize = 64

    public var compression: Compression
    /// The new image's size.
    public var newSize: Int
    /// The base image's SHA-256, when the patch has Espressif's header.
    public var espBaseSHA256: [UInt8]?
    /// Bytes before the compressed stream (the ESP header, the type byte, the size).
    public var size: Int

    /// Reads the header at the start of `patch`.
    public init(reading patch: [UInt8]) throws(DeltaPatchError) {
        var offset = 0
        espBaseSHA256 = nil
        if patch.count >= 4, UInt32(patch[0]) | UInt32(patch[1]) << 8 | UInt32(patch[2]) << 16 | UInt32(patch[3]) << 24 == Self.espMagic {
            guard patch.count >= Self.espHeaderSize else {
                throw DeltaPatchError(.truncated, field: "esp_delta_ota header", offset: patch.count)
            }
            espBaseSHA256 = Array(patch[4..<36])
            offset = Self.espHeaderSize
        }
        guard offset < patch.count else { throw DeltaPatchError(.truncated, field: "type byte", offset: offset) }
        let typeByte = patch[offset]
        let type = (typeByte >> 4) & 0x07
        guard typeByte & 0x80 == 0 else { throw DeltaPatchError(.invalid(String(format: "0x%02x has its top bit set", typeByte)), field: "type byte", offset: offset) }
        switch type {
        case 0: break
        case 1: throw DeltaPatchError(.unsupported("an in-place patch"), field: "type byte", offset: offset)
        case 2: throw DeltaPatchError(.unsupported("an hdiffpatch patch"), field: "type byte", offset: offset)
        default: throw DeltaPatchError(.invalid("patch type \(type) is not one detools defines"), field: "type byte", offset: offset)
        }
        let number = typeByte & 0x0F
        guard let compression = Compression(rawValue: number) else {
            if let other = Compression.othersByNumber[number] {
                throw DeltaPatchError(.unsupported("\(other) compression"), field: "type byte", offset: offset)
            }
            throw DeltaPatchError(.invalid("compression \(number) is not one detools defines"), field: "type byte", offset: offset)
        }
        self.compression = compression
        offset += 1
        var reader = DeltaSize.Reader()
        var newSize: Int?
        while newSize == nil {
            guard offset < patch.count else { throw DeltaPatchError(.truncated, field: "new image size", offset: offset) }
            newSize = try reader.take(patch[offset], field: "new image size", offset: offset)
            offset += 1
        }
        guard let newSize, newSize >= 0 else { throw DeltaPatchError(.invalid("a negative size"), field: "new image size", offset: offset - 1) }
        self.newSize = newSize
        size = offset
    }
}

/// Makes and applies patches (``DeltaPatchHeader``).
public enum DeltaPatch {
    /// A sequential patch from `old` to `new`; with `espBaseSHA256`, behind Espressif's 64-byte header.
    public static func create(
        from old: [UInt8], to new: [UInt8], compression: DeltaPatchHeader.Compression = .heatshrink,
        heatshrink: Heatshrink.Parameters = .detoolsDefault, espBaseSHA256: [UInt8]? = nil
    ) -> [UInt8] {
        var patch: [UInt8] = []
        if let espBaseSHA256 {
            precondition(espBaseSHA256.count == 32, "an ESP header names a SHA-256")
            let magic = DeltaPatchHeader.espMagic
            patch += [UInt8(magic & 0xFF), UInt8(magic >> 8 & 0xFF), UInt8(magic >> 16 & 0xFF), UInt8(magic >> 24)]
            patch += espBaseSHA256
            patch += [UInt8](repeating: 0, count: DeltaPatchHeader.espHeaderSize - 36)
        }
        patch.append(compression.rawValue)
        patch += DeltaSize.encode(new.count)
        guard !new.isEmpty else { return patch }
        var body = DeltaSize.encode(0)  // no data-format section
        for chunk in BinaryDiff.chunks(from: old, to: new) {
            body += DeltaSize.encode(chunk.diff.count)
            body += chunk.diff
            body += DeltaSize.encode(chunk.extra.count)
            body += chunk.extra
            body += DeltaSize.encode(chunk.adjustment)
        }
        switch compression {
        case .none: patch += body
        case .heatshrink:
            patch.append(heatshrink.headerByte)
            patch += Heatshrink.encode(body, parameters: heatshrink)
        }
        return patch
    }

    /// The new image `patch` makes from `base`, whole.
    public static func apply(_ patch: [UInt8], to base: [UInt8]) throws(DeltaPatchError) -> [UInt8] {
        var applier = try DeltaPatchApplier(header: DeltaPatchHeader(reading: patch), baseSize: base.count)
        var output: [UInt8] = []
        // The header's size is not trusted with memory (found by FuzzDeltaPatch: 144 GB asked for):
        // a real image is far under the cap, and the array grows past it if the patch really goes on.
        output.reserveCapacity(min(applier.header.newSize, 16 << 20))
        try applier.consume(patch[applier.header.size...], base: { base[$0] }, into: &output)
        try applier.finish()
        return output
    }
}

/// Applies a sequential patch as its bytes arrive, in bounded memory: the heatshrink window (2^window
/// bytes, 256 by default) and a few counters, reading the base a byte at a time. A device half rebuilds
/// an image into its other slot with it.
public struct DeltaPatchApplier: Sendable {
    public let header: DeltaPatchHeader
    let baseSize: Int
    private var decoder: Heatshrink.Decoder?
    /// Whether the heatshrink stream's own first byte (its parameters) is still to come.
    private var awaitingHeatshrinkHeader: Bool
    private enum Field: String {
        case dataFormatSize = "data-format size"
        case diffSize = "diff size"
        case diff = "diff data"
        case extraSize = "extra size"
        case extra = "extra data"
        case adjustment = "adjustment"
        case end = "end"
    }
    private var field = Field.dataFormatSize
    private var sizeReader = DeltaSize.Reader()
    private var remaining = 0
    private var basePosition = 0
    /// New image bytes made so far.
    public private(set) var produced = 0
    /// Decompressed body bytes read so far (an error's ``DeltaPatchError/dataOffset`` counts these).
    private var bodyOffset = 0
    /// Patch bytes taken so far, the header's included: the offset in the file of the next one
    /// (an error's ``DeltaPatchError/offset``).
    private var patchOffset: Int
    private var scratch: [UInt8] = []

    public init(header: DeltaPatchHeader, baseSize: Int) {
        self.header = header
        self.baseSize = baseSize
        patchOffset = header.size
        awaitingHeatshrinkHeader = header.compression == .heatshrink && header.newSize > 0
        if header.newSize == 0 { field = .end }
    }

    /// Takes the next patch bytes (those after the header), appending the new image bytes they
    /// complete to `output`. `base` reads the old image at an offset below `baseSize`.
    public mutating func consume(
        _ bytes: some Sequence<UInt8>, base: (Int) -> UInt8, into output: inout [UInt8]
    ) throws(DeltaPatchError) {
        switch header.compression {
        case .none:
            for byte in bytes {
                do { try body(byte, base: base, into: &output) } catch { throw located(error) }
                patchOffset += 1
            }
        case .heatshrink:
            for byte in bytes {
                if awaitingHeatshrinkHeader {
                    guard let parameters = Heatshrink.Parameters(headerByte: byte) else {
                        throw DeltaPatchError(
                            .invalid(String(format: "0x%02x names no heatshrink window and lookahead", byte)), field: "heatshrink parameters", offset: patchOffset)
                    }
                    decoder = Heatshrink.Decoder(parameters: parameters)
                    awaitingHeatshrinkHeader = false
                    patchOffset += 1
                    continue
                }
                if field == .end {
                    // Only the last byte's zero padding may follow the end.
                    guard byte == 0, decoder?.endsCleanly ?? true else { throw DeltaPatchError(.trailingData, field: "end", offset: patchOffset) }
                }
                scratch.removeAll(keepingCapacity: true)
                decoder?.decode(CollectionOfOne(byte), into: &scratch)
                for decoded in scratch {
                    do { try body(decoded, base: base, into: &output) } catch { throw located(error) }
                }
                patchOffset += 1
            }
        }
    }

    /// An error `body` raised at a decompressed offset, placed at the patch byte being read; a
    /// compressed patch keeps the decompressed offset beside it.
    private func located(_ error: DeltaPatchError) -> DeltaPatchError {
        var located = error
        located.dataOffset = header.compression == .heatshrink ? error.offset : nil
        located.offset = patchOffset
        return located
    }

    /// Says the patch has ended: throws unless the new image is complete and nothing is left over.
    public func finish() throws(DeltaPatchError) {
        let dataOffset = header.compression == .heatshrink ? bodyOffset : nil
        if awaitingHeatshrinkHeader { throw DeltaPatchError(.truncated, field: "heatshrink parameters", offset: patchOffset) }
        guard field == .end else { throw DeltaPatchError(.truncated, field: field.rawValue, offset: patchOffset, dataOffset: dataOffset) }
        if let decoder, !decoder.endsCleanly {
            throw DeltaPatchError(.trailingData, field: "heatshrink stream", offset: patchOffset, dataOffset: dataOffset)
        }
    }

    private mutating func body(_ byte: UInt8, base: (Int) -> UInt8, into output: inout [UInt8]) throws(DeltaPatchError) {
        defer { bodyOffset += 1 }
        switch field {
        case .dataFormatSize:
            guard let size = try sizeReader.take(byte, field: field.rawValue, offset: bodyOffset) else { return }
            guard size == 0 else {
                throw DeltaPatchError(.unsupported("data-format pre-processing (detools --data-format)"), field: field.rawValue, offset: bodyOffset)
            }
            field = .diffSize
        case .diffSize, .extraSize:
            guard let size = try sizeReader.take(byte, field: field.rawValue, offset: bodyOffset) else { return }
            guard size >= 0, size <= header.newSize - produced else {
                throw DeltaPatchError(
                    .invalid("\(size) bytes, but \(header.newSize - produced) of the new image are left"), field: field.rawValue, offset: bodyOffset)
            }
            remaining = size
            if field == .diffSize {
                guard basePosition >= 0, basePosition + size <= baseSize else {
                    throw DeltaPatchError(
                        .invalid("it reads the base at \(basePosition)…\(basePosition + size), outside its \(baseSize) bytes: the base is not the one the patch was made for"),
                        field: field.rawValue, offset: bodyOffset)
                }
                field = size > 0 ? .diff : .extraSize
            } else {
                field = size > 0 ? .extra : .adjustment
            }
        case .diff:
            output.append(byte &+ base(basePosition))
            basePosition += 1
            produced += 1
            remaining -= 1
            if remaining == 0 { field = .extraSize }
        case .extra:
            output.append(byte)
            produced += 1
            remaining -= 1
            if remaining == 0 { field = .adjustment }
        case .adjustment:
            guard let step = try sizeReader.take(byte, field: field.rawValue, offset: bodyOffset) else { return }
            basePosition += step
            field = produced == header.newSize ? .end : .diffSize
        case .end:
            throw DeltaPatchError(.trailingData, field: field.rawValue, offset: bodyOffset)
        }
    }
}

extension DeltaPatch {
    /// The SHA-256 an ESP32 reports for the image it runs (`esp_partition_get_sha256`), which
    /// `esp_delta_ota` compares with a patch's header: for an ESP-IDF application image that carries
    /// its SHA-256 appended (magic 0xE9, `hash_appended` = 1 at offset 23, and the last 32 bytes the
    /// SHA-256 of the rest), that appended hash; for any other file, the SHA-256 of its bytes.
    public static func espBaseSHA256(of base: [UInt8]) -> [UInt8] {
        if base.count >= 24 + 32, base[0] == 0xE9, base[23] == 1 {
            let appended = Array(base[(base.count - 32)...])
            if SHA256Digest.hash(base[..<(base.count - 32)]) == appended { return appended }
        }
        return SHA256Digest.hash(base)
    }
}
