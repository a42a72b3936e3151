import Foundation

/// The on-disk formats bleota reads and writes.
public enum ImageFormat: String, Sendable, Hashable, Codable, CaseIterable {
    /// Raw bytes, loaded at a base address the user gives (default 0).
    case bin
    /// Intel HEX (Intel, "Hexadecimal Object File Format Specification", rev. A, 1988).
    case intelHex = "hex"
    /// Motorola S-record (srec(5)).
    case srec

    /// The format a file name's extension implies, if any.
    public init?(pathExtension path: String) {
        let ext = (path as NSString).pathExtension.lowercased()
        switch ext {
        case "bin", "img", "raw", "gbl": self = .bin
        case "hex", "ihex", "ihx", "h86": self = .intelHex
        case "srec", "s19", "s28", "s37", "mot", "mhx", "s": self = .srec
        default: return nil
        }
    }
}

/// A run of bytes at an address.
public struct ImageSegment: Sendable, Hashable {
    public var address: UInt32
    public var bytes: [UInt8]

    public init(address: UInt32, bytes: [UInt8]) {
        self.address = address
        self.bytes = bytes
    }

    /// One past the last byte's address (64-bit: a segment may end exactly at 4 GiB).
    public var end: UInt64 { UInt64(address) + UInt64(bytes.count) }
}

/// A firmware image as address-tagged segments, plus the flattened view that
/// is actually transferred: lowest address to highest end, gaps filled.
///
/// HEX and S-record files describe memory, not a byte stream: they may leave
/// gaps (an application at 0x8000 and a settings page at 0x7F000). Bootloaders
/// receive one contiguous stream, so bleota flattens with a fill byte — 0xFF by
/// default, what erased NOR flash reads as, so a gap costs no flash writes.
///
/// The image stays sparse until a caller flattens it: ``size``, ``crc32(fill:)``,
/// ``sha256(fill:)`` and `write(to:format:fill:)` (BleotaSystem) stream over the segments and
/// never materialise a gap, so a 74-byte HEX file whose two records sit 4 GiB
/// apart costs a few bytes of memory. A caller that needs the bytes checks
/// ``size`` first (against a slot, say) and flattens with a limit.
public struct FirmwareImage: Sendable, Hashable {
    public var format: ImageFormat
    /// Sorted by address, non-overlapping, non-empty.
    public private(set) var segments: [ImageSegment]
    /// Execution start address (HEX record 03/05, S7/S8/S9), if the file gave one.
    public var startAddress: UInt32?
    /// The S0 header text, if any.
    public var header: String?

    /// Builds an image from segments, checking they do not overlap.
    public init(
        format: ImageFormat, segments: [ImageSegment], startAddress: UInt32? = nil, header: String? = nil,
        fileName: String = "image"
    ) throws(ImageError) {
        let sorted = segments.filter { !$0.bytes.isEmpty }.sorted { $0.address < $1.address }
        for (previous, next) in zip(sorted, sorted.dropFirst()) where previous.end > UInt64(next.address) {
            throw ImageError(file: fileName, kind: .overlap(first: previous.address, firstEnd: previous.end, second: next.address))
        }
        self.format = format
        self.segments = sorted
        self.startAddress = startAddress
        self.header = header
    }

    /// A raw binary image at `baseAddress`.
    public init(binary bytes: [UInt8], baseAddress: UInt32 = 0, fileName: String = "image") throws(ImageError) {
        guard UInt64(baseAddress) + UInt64(bytes.count) <= 1 << 32 else {
            throw ImageError(file: fileName, kind: .beyondAddressSpace(address: UInt64(baseAddress) + UInt64(bytes.count)))
        }
        self.format = .bin
        self.segments = bytes.isEmpty ? [] : [ImageSegment(address: baseAddress, bytes: bytes)]
        self.startAddress = nil
        self.header = nil
    }

    /// Lowest address (0 for an empty image).
    public var baseAddress: UInt32 { segments.first?.address ?? 0 }

    /// Length of the flattened view, known without flattening (up to 4 GiB).
    public var size: Int {
        guard let first = segments.first, let last = segments.last else { return 0 }
        return Int(last.end - UInt64(first.address))
    }

    /// What bleota flattens (or writes as a `.bin`) at most unless told otherwise (`--max-span`):
    /// 256 MiB, more than any microcontroller's flash, so a HEX file whose few records lie far
    /// apart (option bytes at 0x1FFF7800 beside flash at 0x08000000, or a hostile 4 GiB) is
    /// refused from its segments instead of filled in.
    public static let defaultMaximumSpan = 256 << 20

    /// Refuses the image, before anything is flattened, when its segments span more than `limit`
    /// bytes: ``ImageError/Kind/spanTooLarge(base:end:last:limit:)`` names the span, the limit
    /// and the fix.
    public func checkSpan(limit: Int, fileName: String = "image") throws(ImageError) {
        guard size > limit, let first = segments.first, let last = segments.last else { return }
        throw ImageError(file: fileName, kind: .spanTooLarge(base: first.address, end: last.end, last: last.address, limit: UInt64(max(0, limit))))
    }

    /// Bytes that come from the file (excluding gap fill).
    public var dataSize: Int { segments.reduce(0) { $0 + $1.bytes.count } }

    /// The flattened image. A single segment is returned as is (no copy).
    ///
    /// This allocates ``size`` bytes whatever the file's own size: for an image
    /// from an untrusted file use ``flattened(fill:limit:fileName:)``.
    public func flattened(fill: UInt8 = 0xFF) -> [UInt8] {
        prefix(size, fill: fill)
    }

    /// The flattened image, or ``ImageError/Kind/tooLarge(size:limit:)`` naming
    /// both sizes when it would be more than `limit` bytes — checked before
    /// anything is allocated.
    public func flattened(fill: UInt8 = 0xFF, limit: Int, fileName: String = "image") throws(ImageError) -> [UInt8] {
        guard size <= limit else {
            throw ImageError(file: fileName, kind: .tooLarge(size: UInt64(size), limit: UInt64(max(0, limit))))
        }
        return prefix(size, fill: fill)
    }

    /// The first `count` bytes of the flattened view (all of it when shorter),
    /// e.g. to look for a header's magic without flattening the rest.
    public func prefix(_ count: Int, fill: UInt8 = 0xFF) -> [UInt8] {
        let length = min(max(0, count), size)
        if segments.count >= 1, length <= segments[0].bytes.count {
            return length == segments[0].bytes.count ? segments[0].bytes : Array(segments[0].bytes[0..<length])
        }
        var result: [UInt8] = []
        result.reserveCapacity(length)
        forEachChunk(fill: fill, length: length) { result.append(contentsOf: $0) }
        return result
    }

    /// Feeds the flattened view in chunks: each segment's bytes, and gaps as
    /// fill in pieces of at most 64 KiB.
    public func forEachChunk(fill: UInt8 = 0xFF, _ body: (ArraySlice<UInt8>) -> Void) {
        forEachChunk(fill: fill, length: size, body)
    }

    /// Feeds the first `length` bytes of the flattened view in chunks.
    func forEachChunk(fill: UInt8, length: Int, _ body: (ArraySlice<UInt8>) -> Void) {
        var remaining = length
        guard remaining > 0 else { return }
        let gapChunk = [UInt8](repeating: fill, count: 64 * 1024)
        var cursor = UInt64(baseAddress)
        for segment in segments {
            var gap = Int(UInt64(segment.address) - cursor)
            while gap > 0 {
                let piece = min(gap, gapChunk.count, remaining)
                body(gapChunk[0..<piece])
                gap -= piece
                remaining -= piece
                if remaining == 0 { return }
            }
            let piece = min(segment.bytes.count, remaining)
            body(segment.bytes[0..<piece])
            remaining -= piece
            if remaining == 0 { return }
            cursor = segment.end
        }
    }

    public func crc32(fill: UInt8 = 0xFF) -> UInt32 {
        var crc = CRC32()
        forEachChunk(fill: fill) { crc.update($0) }
        return crc.value
    }

    public func sha256(fill: UInt8 = 0xFF) -> [UInt8] {
        var digest = SHA256Digest()
        forEachChunk(fill: fill) { digest.update($0) }
        return digest.finalize()
    }

    /// CRC-32 and SHA-256 of the flattened view in one pass over it.
    public func checksums(fill: UInt8 = 0xFF) -> (crc32: UInt32, sha256: [UInt8]) {
        var crc = CRC32()
        var digest = SHA256Digest()
        forEachChunk(fill: fill) {
            crc.update($0)
            digest.update($0)
        }
        return (crc.value, digest.finalize())
    }
}

extension FirmwareImage {
    /// Loads `path`, taking the format from `format` or else the extension.
    ///
    /// Only regular files are read (see ``InputFile``). A raw binary is placed
    /// at `baseAddress` (text formats carry their own addresses) and refused by
    /// its file size, before it is read, when that exceeds `limit`; a HEX or
    /// S-record image is refused when its flattened size does, without being
    /// flattened. Either way the error is ``ImageError/Kind/tooLarge(size:limit:)``,
    /// or ``ImageError/Kind/spanTooLarge(base:end:last:limit:)`` when it is
    /// `maximumSpan` that the image exceeds (the limit a user can raise,
    /// `--max-span`), and that is the smaller.
    public static func load(
        path: String, format: ImageFormat? = nil, baseAddress: UInt32 = 0,
        limit: Int = .max, maximumSpan: Int = .max
    ) throws(ImageError) -> FirmwareImage {
        let name = (path as NSString).lastPathComponent
        let limit = UInt64(max(0, limit))
        func failure(_ error: InputFileError) -> ImageError {
            if case .tooLarge(let size, let limit) = error.kind { return ImageError(file: name, kind: .tooLarge(size: size, limit: limit)) }
            return ImageError(file: name, kind: .inputFile(error))
        }
        // What the path is comes first: `/dev/null` is a device, not a file of unknown format.
        let fileSize: UInt64
        do { fileSize = try InputFile.size(path) } catch { throw failure(error) }
        guard let format = format ?? ImageFormat(pathExtension: path) else {
            throw ImageError(file: name, kind: .unknownFormat)
        }
        if format == .bin, fileSize > UInt64(max(0, maximumSpan)), UInt64(max(0, maximumSpan)) <= limit, fileSize > 0 {
            let end = UInt64(baseAddress) + fileSize
            let kind = ImageError.Kind.spanTooLarge(base: baseAddress, end: end, last: baseAddress, limit: UInt64(max(0, maximumSpan)))
            throw ImageError(file: name, kind: kind)
        }
        if format == .bin, fileSize > limit { throw ImageError(file: name, kind: .tooLarge(size: fileSize, limit: limit)) }
        let bytes: [UInt8]
        do { bytes = try InputFile.read(path, limit: format == .bin ? limit : .max) } catch { throw failure(error) }
        guard !bytes.isEmpty else { throw ImageError(file: name, kind: .empty) }
        let image: FirmwareImage
        switch format {
        case .bin: image = try FirmwareImage(binary: bytes, baseAddress: baseAddress, fileName: name)
        case .intelHex: image = try IntelHex.parse(bytes, fileName: name)
        case .srec: image = try SRecord.parse(bytes, fileName: name)
        }
        if UInt64(max(0, maximumSpan)) <= limit { try image.checkSpan(limit: maximumSpan, fileName: name) }
        guard UInt64(image.size) <= limit else { throw ImageError(file: name, kind: .tooLarge(size: UInt64(image.size), limit: limit)) }
        return image
    }
}
