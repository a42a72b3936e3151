import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaCodec

/// Files read on demand, in bounded memory, for streaming large images.
@Suite struct ByteSourceTests {
    static func file(_ bytes: [UInt8]) throws -> String {
        let path = try InputFileTests.temporaryDirectory() + "/image.bin"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    static func bytes(_ count: Int, _ name: String) -> [UInt8] {
        var random = seededGenerator(name)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    /// Every range, inside a block, across one or two block edges, at the ends: the file's bytes.
    @Test func rangesReadTheFilesBytes() throws {
        let block = FileByteSource.blockSize
        let content = Self.bytes(block * 3 + 1234, "rangesReadTheFilesBytes content")
        let source = try FileByteSource(path: Self.file(content))
        #expect(source.count == content.count)
        var random = seededGenerator("rangesReadTheFilesBytes ranges")
        var ranges: [Range<Int>] = [
            0..<1, 0..<block, block - 10..<block + 10, block - 1..<2 * block + 1,
            content.count - 5..<content.count, 17..<17, 0..<content.count,
        ]
        for _ in 0..<200 {
            let start = Int(random.next() % UInt64(content.count))
            ranges.append(start..<min(content.count, start + Int(random.next() % 600)))
        }
        for range in ranges {
            #expect(Array(try source.bytes(in: range)) == Array(content[range]), "range \(range)")
        }
        let digests = try source.digests()
        #expect(digests.crc32 == CRC32.checksum(content))
        #expect(digests.sha256 == SHA256Digest.hash(content))
        #expect(Array(try source.bytes(in: 0..<content.count)) == content)
    }

    @Test func arraysAreSourcesWithoutCopies() throws {
        let content: [UInt8] = [1, 2, 3, 4, 5]
        #expect(try content.bytes(in: 1..<3) == [2, 3])
        #expect(try content.digests().crc32 == CRC32.checksum(content))
    }

    /// A file cut short while it is sent: the read fails with what happened, never returns zeros.
    @Test func aFileThatShrinksFailsTheRead() throws {
        let content = Self.bytes(FileByteSource.blockSize * 2, "aFileThatShrinksFailsTheRead")
        let path = try Self.file(content)
        let source = try FileByteSource(path: path)
        _ = try source.bytes(in: 0..<10)
        #expect(truncate(path, off_t(FileByteSource.blockSize + 100)) == 0)
        #expect(throws: InputFileError.self) { _ = try source.bytes(in: FileByteSource.blockSize + 50..<FileByteSource.blockSize + 150) }
        do {
            _ = try source.bytes(in: FileByteSource.blockSize + 50..<FileByteSource.blockSize + 150)
        } catch {
            #expect(error.description.contains("shrank"))
        }
        #expect(throws: InputFileError.self) { _ = try source.bytes(in: 0..<(content.count + 1)) }
    }

    @Test func onlyRegularFilesOpen() throws {
        let directory = try InputFileTests.temporaryDirectory()
        #expect(throws: InputFileError.self) { _ = try FileByteSource(path: directory) }
        #expect(throws: InputFileError.self) { _ = try FileByteSource(path: directory + "/missing.bin") }
    }
}
