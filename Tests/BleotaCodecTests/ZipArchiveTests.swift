import BleotaZlib
import Foundation
import Testing

@testable import BleotaCodec

/// ZIP archives assembled here byte by byte (so each field can be made to
/// lie), plus the archive FuzzNordicPackage found hanging ZIPFoundation.
@Suite struct ZipArchiveTests {
    struct Built {
        var name: String
        var data: [UInt8]
        var deflate: Bool
        var claimedSize: Int? = nil
        var claimedCRC: UInt32? = nil
    }

    /// A single-disk archive of `members` as PKZIP lays it out: local headers
    /// and data, the central directory, the end record.
    static func archive(_ members: [Built]) throws -> [UInt8] {
        var out = ByteWriter()
        var directory = ByteWriter()
        for member in members {
            let stored =
                member.deflate
                ? try {
                    let d = try Deflater(format: .raw)
                    return try d.update(member.data) + d.finish()
                }() : member.data
            let crc = member.claimedCRC ?? Zlib.crc32(0, member.data)
            let name = Array(member.name.utf8)
            let offset = out.bytes.count
            out.write(UInt32(0x0403_4B50))
            out.write(UInt16(20))
            out.write(UInt16(0))
            out.write(UInt16(member.deflate ? 8 : 0))
            out.write(UInt32(0))
            out.write(crc)
            out.write(UInt32(stored.count))
            out.write(UInt32(member.claimedSize ?? member.data.count))
            out.write(UInt16(name.count))
            out.write(UInt16(0))
            out.write(contentsOf: name)
            out.write(contentsOf: stored)
            directory.write(UInt32(0x0201_4B50))
            directory.write(UInt16(20))
            directory.write(UInt16(20))
            directory.write(UInt16(0))
            directory.write(UInt16(member.deflate ? 8 : 0))
            directory.write(UInt32(0))
            directory.write(crc)
            directory.write(UInt32(stored.count))
            directory.write(UInt32(member.claimedSize ?? member.data.count))
            directory.write(UInt16(name.count))
            directory.write(UInt16(0))
            directory.write(UInt16(0))
            directory.write(UInt16(0))
            directory.write(UInt16(0))
            directory.write(UInt32(0))
            directory.write(UInt32(offset))
            directory.write(contentsOf: name)
        }
        let directoryOffset = out.bytes.count
        out.write(contentsOf: directory.bytes)
        out.write(UInt32(0x0605_4B50))
        out.write(UInt16(0))
        out.write(UInt16(0))
        out.write(UInt16(members.count))
        out.write(UInt16(members.count))
        out.write(UInt32(directory.bytes.count))
        out.write(UInt32(directoryOffset))
        out.write(UInt16(0))
        return out.bytes
    }

    static let text = Array(String(repeating: "bleota reads zip archives. ", count: 40).utf8)

    @Test func storedAndDeflatedMembersReadBack() throws {
        let bytes = try Self.archive([Built(name: "a.txt", data: Self.text, deflate: true), Built(name: "dir/b.bin", data: [1, 2, 3], deflate: false)])
        let archive = try ZipArchive(bytes)
        #expect(archive.members.map(\.name) == ["a.txt", "dir/b.bin"])
        #expect(archive.members[0].method == .deflated && archive.members[0].compressedSize < Self.text.count)
        #expect(try archive.contents(of: archive.members[0], limit: 1 << 20) == Self.text)
        #expect(try archive.contents(of: archive.members[1], limit: 1 << 20) == [1, 2, 3])
    }

    @Test func membersThatLieAreRefusedNamingThem() throws {
        // Says 10 bytes, inflates to 1080.
        let short = try ZipArchive(Self.archive([Built(name: "a", data: Self.text, deflate: true, claimedSize: 10)]))
        #expect(throws: DecodingError.self) { try short.contents(of: short.members[0], limit: 1 << 20) }
        // Right size, wrong CRC.
        let crc = try ZipArchive(Self.archive([Built(name: "c", data: Self.text, deflate: true, claimedCRC: 0x1234_5678)]))
        #expect {
            try crc.contents(of: crc.members[0], limit: 1 << 20)
        } throws: { error in
            "\(error)".contains("CRC-32 is 0x") && "\(error)".contains("its entry says 0x12345678")
        }
        // Over the caller's limit: refused before inflating.
        let big = try ZipArchive(Self.archive([Built(name: "big", data: Self.text, deflate: true)]))
        #expect(throws: DecodingError(field: "member 'big'", offset: 0, reason: .invalidValue("unpacks to 1080 bytes, more than 1000"))) {
            try big.contents(of: big.members[0], limit: 1000)
        }
    }

    /// The archive FuzzNordicPackage produced: ZIPFoundation 0.9.20 spins
    /// forever inflating it (its deflate stream runs past the end of the
    /// file). bleota's reader stops at the member's bytes and says so.
    @Test func aDeflateStreamThatNeverEndsIsAnErrorNotAHang() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/fuzz-nordic-package-unended-deflate.zip")
        let bytes = [UInt8](try Data(contentsOf: url))
        var outcomes: [String] = []
        do {
            let archive = try ZipArchive(bytes)
            for member in archive.members {
                do { _ = try archive.contents(of: member, limit: 16 << 20) } catch { outcomes.append("\(error)") }
            }
        } catch {
            outcomes.append("\(error)")
        }
        #expect(!outcomes.isEmpty)

        // The same shape built on purpose: a deflate stream cut short.
        var cut = try Self.archive([Built(name: "cut", data: Self.text, deflate: true)])
        let archive = try ZipArchive(cut)
        let dataOffset = 30 + 3
        cut.replaceSubrange(
            dataOffset + archive.members[0].compressedSize / 2..<dataOffset + archive.members[0].compressedSize,
            with: [UInt8](repeating: 0, count: archive.members[0].compressedSize - archive.members[0].compressedSize / 2))
        let damaged = try ZipArchive(cut)
        #expect(throws: DecodingError.self) { try damaged.contents(of: damaged.members[0], limit: 1 << 20) }
    }

    @Test(
        arguments: [
            ([UInt8](), "end of central directory at offset 0: input ends 22 bytes too early"),
            (Array("not a zip archive, at all, no".utf8), "end of central directory at offset 0: no end record: not a ZIP archive, or cut short"),
        ] as [([UInt8], String)])
    func notAnArchive(bytes: [UInt8], message: String) {
        #expect { try ZipArchive(bytes) } throws: { "\($0)" == message }
    }

    /// Every prefix and every single-byte change of an archive parses or
    /// throws; none traps or hangs.
    @Test func everyPrefixAndByteChangeParsesOrThrows() throws {
        let bytes = try Self.archive([Built(name: "a.txt", data: Self.text, deflate: true), Built(name: "b", data: [9], deflate: false)])
        func attempt(_ input: [UInt8]) {
            guard let archive = try? ZipArchive(input) else { return }
            for member in archive.members { _ = try? archive.contents(of: member, limit: 1 << 16) }
        }
        for length in 0...bytes.count { attempt(Array(bytes.prefix(length))) }
        for index in bytes.indices {
            var changed = bytes
            changed[index] ^= 0xA5
            attempt(changed)
        }
    }
}
