import Foundation
import Synchronization

/// Bytes that can be read by range: an image in memory, or a file read as it
/// is sent.
///
/// A 256 MiB image must not be held whole to be flashed: the transfer engine
/// asks for each packet's bytes when it sends (or resends) it, and the hashes
/// the device checks are computed in one pass beforehand. In-memory arrays are
/// sources too, so small images and tests need nothing new.
public protocol ByteSource: Sendable {
    var count: Int { get }
    /// Bytes `range` (within `0..<count`). Throws if they cannot be read any more
    /// (the file shrank or an I/O error): the transfer stops rather than send wrong bytes.
    func bytes(in range: Range<Int>) throws(InputFileError) -> ArraySlice<UInt8>
}

extension Array: ByteSource where Element == UInt8 {
    public func bytes(in range: Range<Int>) throws(InputFileError) -> ArraySlice<UInt8> { self[range] }
}

extension ByteSource {
    /// CRC-32 and SHA-256 of every byte, read a mebibyte at a time.
    public func digests() throws(InputFileError) -> (crc32: UInt32, sha256: [UInt8]) {
        var crc = CRC32()
        var sha = SHA256Digest()
        var offset = 0
        while offset < count {
            let chunk = try bytes(in: offset..<min(count, offset + (1 << 20)))
            crc.update(chunk)
            sha.update(chunk)
            offset += chunk.count
        }
        return (crc.value, sha.finalize())
    }

}

/// A regular file read on demand, a few blocks kept: what the engine needs
/// for sending in order and resending a recent packet, in bounded memory.
public final class FileByteSource: ByteSource {
    public let path: String
    public let count: Int
    private let descriptor: Int32
    private struct Cache {
        var blocks: [(index: Int, bytes: [UInt8])] = []
    }
    private let cache = Mutex(Cache())

    /// Bytes read from the file at a time.
    public static let blockSize = 256 << 10
    /// Blocks kept: resends reach back at most a window of packets.
    static let blocksKept = 4

    /// Opens `path`, which must be a regular file (see ``InputFile``).
    public init(path: String) throws(InputFileError) {
        _ = try InputFile.size(path)
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else { throw InputFile.failure(path, errno) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw InputFile.failure(path, code)
        }
        let type = FileType(mode: info.st_mode)
        guard type == .regular else {
            close(descriptor)
            throw InputFileError(path: path, kind: .notRegularFile(type))
        }
        self.path = path
        self.descriptor = descriptor
        count = Int(info.st_size)
    }

    deinit { close(descriptor) }

    public func bytes(in range: Range<Int>) throws(InputFileError) -> ArraySlice<UInt8> {
        guard range.lowerBound >= 0, range.upperBound <= count else {
            throw InputFileError(path: path, kind: .unreadable("bytes \(range) lie outside its \(count)"))
        }
        guard !range.isEmpty else { return [] }
        let first = range.lowerBound / Self.blockSize, last = (range.upperBound - 1) / Self.blockSize
        if first == last {
            let block = try self.block(first)
            let start = first * Self.blockSize
            return block[(range.lowerBound - start)..<(range.upperBound - start)]
        }
        var joined = [UInt8]()
        joined.reserveCapacity(range.count)
        for index in first...last {
            let block = try self.block(index)
            let start = index * Self.blockSize
            joined.append(contentsOf: block[(max(range.lowerBound, start) - start)..<(min(range.upperBound, start + block.count) - start)])
        }
        return joined[...]
    }

    private func block(_ index: Int) throws(InputFileError) -> [UInt8] {
        if let hit = cache.withLock({ cache -> [UInt8]? in
            guard let position = cache.blocks.firstIndex(where: { $0.index == index }) else { return nil }
            let entry = cache.blocks.remove(at: position)
            cache.blocks.append(entry)
            return entry.bytes
        }) {
            return hit
        }
        let offset = index * Self.blockSize
        let length = min(Self.blockSize, count - offset)
        let bytes = try InputFile.read(descriptor, count: length, at: offset, path: path)
        guard bytes.count == length else {
            throw InputFileError(path: path, kind: .unreadable("it shrank to \(offset + bytes.count) bytes while being sent"))
        }
        cache.withLock { cache in
            cache.blocks.append((index, bytes))
            if cache.blocks.count > Self.blocksKept { cache.blocks.removeFirst() }
        }
        return bytes
    }
}
