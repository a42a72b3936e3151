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
        case "bin", "img", "raw": self = .bin
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
/// CRC-32 and SHA-256 are always of that flattened stream, computed streaming so
/// gaps are never materialised just to be hashed.
public struct FirmwareImage: Sendable, Hashable {
    public var format: ImageFormat
    /// Sorted by address, non-overlapping, non-empty.
    public private(set) var segments: [ImageSegment]
    /// Execution start address (HEX record 03/05, S7/S8/S9), if the file gave one.
    public var startAddress: UInt32?
    /// The S0 header text, if any.
    public var header: String?

    /// Builds an image from segments, checking they do not overlap.
    public init(format: ImageFormat, segments: [ImageSegment], startAddress: UInt32? = nil, header: String? = nil,
                fileName: String = "image") throws(ImageError) {
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
    public init(binary bytes: [UInt8], baseAddress: UInt32 = 0) throws(ImageError) {
        guard UInt64(baseAddress) + UInt64(bytes.count) <= 1 << 32 else {
            throw ImageError(file: "image", kind: .beyondAddressSpace(address: UInt64(baseAddress) + UInt64(bytes.count)))
        }
        self.format = .bin
        self.segments = bytes.isEmpty ? [] : [ImageSegment(address: baseAddress, bytes: bytes)]
        self.startAddress = nil
        self.header = nil
    }

    /// Lowest address (0 for an empty image).
    public var baseAddress: UInt32 { segments.first?.address ?? 0 }

    /// Length of the flattened view.
    public var size: Int {
        guard let first = segments.first, let last = segments.last else { return 0 }
        return Int(last.end - UInt64(first.address))
    }

    /// Bytes that come from the file (excluding gap fill).
    public var dataSize: Int { segments.reduce(0) { $0 + $1.bytes.count } }

    /// The flattened image. A single segment is returned as is (no copy).
    public func flattened(fill: UInt8 = 0xFF) -> [UInt8] {
        if segments.count == 1 { return segments[0].bytes }
        var result: [UInt8] = []
        result.reserveCapacity(size)
        forEachChunk(fill: fill) { result.append(contentsOf: $0) }
        return result
    }

    /// Feeds the flattened view in chunks: each segment's bytes, and gaps as
    /// fill in pieces of at most 64 KiB.
    public func forEachChunk(fill: UInt8 = 0xFF, _ body: (ArraySlice<UInt8>) -> Void) {
        let gapChunk = [UInt8](repeating: fill, count: 64 * 1024)
        var cursor = UInt64(baseAddress)
        for segment in segments {
            var gap = Int(UInt64(segment.address) - cursor)
            while gap > 0 {
                let piece = min(gap, gapChunk.count)
                body(gapChunk[0..<piece])
                gap -= piece
            }
            body(segment.bytes[...])
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
}

extension FirmwareImage {
    /// Loads `path`, taking the format from `format` or else the extension.
    ///
    /// Only regular files are read (see ``InputFile``): a FIFO, a device or a
    /// directory is refused with what it is.
    public static func load(path: String, format: ImageFormat? = nil) throws(ImageError) -> FirmwareImage {
        let name = (path as NSString).lastPathComponent
        // What the path is comes first: `/dev/null` is a device, not a file of unknown format.
        do { _ = try InputFile.size(path) } catch { throw ImageError(file: name, kind: .inputFile(error)) }
        guard let format = format ?? ImageFormat(pathExtension: path) else {
            throw ImageError(file: name, kind: .unknownFormat)
        }
        let bytes: [UInt8]
        do { bytes = try InputFile.read(path) } catch { throw ImageError(file: name, kind: .inputFile(error)) }
        guard !bytes.isEmpty else { throw ImageError(file: name, kind: .empty) }
        switch format {
        case .bin:
            var image = try FirmwareImage(binary: bytes)
            image.format = .bin
            return image
        case .intelHex: return try IntelHex.parse(bytes, fileName: name)
        case .srec: return try SRecord.parse(bytes, fileName: name)
        }
    }

    /// Writes the image in `format`, atomically: a temporary file in the same
    /// directory, synced, then renamed over `path`.
    public func write(to path: String, format: ImageFormat, fill: UInt8 = 0xFF) throws(ImageError) {
        let bytes: [UInt8]
        switch format {
        case .bin: bytes = flattened(fill: fill)
        case .intelHex: bytes = Array(IntelHex.encode(self).utf8)
        case .srec: bytes = Array(SRecord.encode(self).utf8)
        }
        try ImageFile.writeAtomically(bytes, to: path)
    }
}

/// Atomic writes for images, with errors that name the file.
enum ImageFile {
    static func writeAtomically(_ bytes: [UInt8], to path: String) throws(ImageError) {
        do {
            try AtomicFile.write(bytes, to: path)
        } catch {
            throw ImageError(file: (path as NSString).lastPathComponent, kind: .unwritable(String(cString: strerror(error.code))))
        }
    }
}

/// Writes a file so that it is either the old one or the complete new one:
/// a temporary file in the same directory, written, synced, then renamed over
/// the target. Used for converted images and pulled files alike.
public enum AtomicFile {
    public struct Failure: Error, Sendable, Equatable {
        /// The errno of the failed step.
        public var code: Int32
    }

    public static func write(_ bytes: [UInt8], to path: String) throws(Failure) {
        let name = (path as NSString).lastPathComponent
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = (directory.isEmpty ? "." : directory) + "/.\(name).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw Failure(code: errno) }
        var failure: Int32 = 0
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 { if errno == EINTR { continue }; failure = errno; return }
                offset += written
            }
        }
        if failure == 0 && fsync(descriptor) != 0 { failure = errno }
        close(descriptor)
        if failure == 0 && rename(temporary, path) != 0 { failure = errno }
        if failure != 0 {
            unlink(temporary)
            throw Failure(code: failure)
        }
    }
}
