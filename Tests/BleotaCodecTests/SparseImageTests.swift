import BleotaSystem
import Foundation
import Testing

@testable import BleotaCodec

/// Images stay sparse: sizes, checksums and conversions never materialise gaps,
/// and flattening happens only under a limit the caller chooses.
@Suite struct SparseImageTests {
    /// Four bytes at 0, four bytes ending at the top of the 32-bit address
    /// space: a 4 GiB image from a 72-byte file.
    static let spanningText =
        [
            ReferenceRecords.intelHex(type: 0x00, address: 0x0000, data: [1, 2, 3, 4]),
            ReferenceRecords.intelHex(type: 0x04, address: 0, data: [0xFF, 0xFF]),
            ReferenceRecords.intelHex(type: 0x00, address: 0xFFFC, data: [5, 6, 7, 8]),
            ReferenceRecords.intelHex(type: 0x01, address: 0),
        ].joined(separator: "\r\n") + "\r\n"

    @Test func referenceCRCAgreesWithZlibOnShortRuns() {
        // The affine-map CRC used below, checked where both can be computed directly.
        for (byte, count) in [(UInt8(0xFF), 0), (0xFF, 1), (0x00, 7), (0xA5, 1000), (0xFF, 65_537)] {
            var reference = ReferenceCRC32()
            reference.update([9, 8])
            reference.update(repeating: byte, count: UInt64(count))
            var direct = ReferenceCRC32()
            direct.update([9, 8] + [UInt8](repeating: byte, count: count))
            #expect(reference.value == direct.value)
            #expect(reference.value == CRC32.checksum([9, 8] + [UInt8](repeating: byte, count: count)))
        }
        var check = ReferenceCRC32()
        check.update(Array("123456789".utf8))
        #expect(check.value == 0xCBF4_3926)
    }

    @Test func aSmallHexSpanning4GiBIsMeasuredWithoutFlattening() throws {
        let text = Self.spanningText
        #expect(text.utf8.count == 72)
        let before = peakResidentBytes()
        let image = try IntelHex.parse(Array(text.utf8))
        #expect(image.size == 1 << 32)
        #expect(image.dataSize == 8)
        #expect(image.segments.map(\.address) == [0, 0xFFFF_FFFC])

        let checksums = image.checksums()
        // CRC-32 of 1 2 3 4, 2³² − 8 bytes of 0xFF, 5 6 7 8, by GF(2) arithmetic.
        var expectedCRC = ReferenceCRC32()
        expectedCRC.update([1, 2, 3, 4])
        expectedCRC.update(repeating: 0xFF, count: (1 << 32) - 8)
        expectedCRC.update([5, 6, 7, 8])
        #expect(checksums.crc32 == expectedCRC.value)
        #expect(image.crc32() == expectedCRC.value)
        // SHA-256 has no shortcut: feed the same stream in pieces of our own choosing.
        var digest = SHA256Digest()
        digest.update([1, 2, 3, 4])
        let run = [UInt8](repeating: 0xFF, count: 1 << 20)
        var remaining = (1 << 32) - 8
        while remaining > 0 {
            let piece = min(remaining, run.count)
            digest.update(run[0..<piece])
            remaining -= piece
        }
        digest.update([5, 6, 7, 8])
        #expect(checksums.sha256 == digest.finalize())
        // Nothing near 4 GiB was ever resident.
        #expect(peakResidentBytes() - before < 1 << 30, "peak resident memory grew by \(peakResidentBytes() - before) bytes")
    }

    @Test func flatteningRefusesMoreThanTheLimitBeforeAllocating() throws {
        let image = try IntelHex.parse(Array(Self.spanningText.utf8))
        let error = #expect(throws: ImageError.self) { try image.flattened(limit: 1 << 20, fileName: "huge.hex") }
        #expect(error?.kind == .tooLarge(size: 1 << 32, limit: 1 << 20))
        #expect(error?.description == "huge.hex: the image is 4294967296 bytes flattened, more than the limit of 1048576 bytes")
        // The first bytes are there without flattening the rest.
        #expect(image.prefix(6) == [1, 2, 3, 4, 0xFF, 0xFF])
        #expect(image.prefix(3, fill: 0) == [1, 2, 3])
        // Under the limit, flattening gives the stream.
        let small = try FirmwareImage(
            format: .intelHex,
            segments: [
                ImageSegment(address: 0x100, bytes: [1, 2]),
                ImageSegment(address: 0x105, bytes: [3]),
            ])
        #expect(try small.flattened(fill: 0xEE, limit: 6) == [1, 2, 0xEE, 0xEE, 0xEE, 3])
        #expect(throws: ImageError(file: "image", kind: .tooLarge(size: 6, limit: 5))) { try small.flattened(limit: 5) }
        #expect(small.prefix(100) == small.flattened())
    }

    @Test func loadRefusesAnOversizedBinaryByItsSizeWithoutReadingIt() throws {
        // A 4 GiB sparse file: ftruncate reserves no blocks, and a read would take 4 GiB.
        let path = try temporaryFile("huge.bin", [])
        #expect(truncate(path, 1 << 32) == 0)
        let error = #expect(throws: ImageError.self) { try FirmwareImage.load(path: path, limit: 64 << 20) }
        #expect(error == ImageError(file: "huge.bin", kind: .tooLarge(size: 1 << 32, limit: 64 << 20)))
        #expect(error?.description == "huge.bin: the image is 4294967296 bytes flattened, more than the limit of 67108864 bytes")
        #expect(throws: InputFileError(path: path, kind: .tooLarge(size: 1 << 32, limit: 1024))) { try InputFile.read(path, limit: 1024) }
        #expect(try InputFile.size(path) == 1 << 32)
    }

    @Test func loadRefusesAnOversizedTextImageByItsFlattenedSize() throws {
        let path = try temporaryFile("span.hex", Array(Self.spanningText.utf8))
        #expect(throws: ImageError(file: "span.hex", kind: .tooLarge(size: 1 << 32, limit: 1 << 31))) {
            try FirmwareImage.load(path: path, limit: 1 << 31)
        }
        #expect(try FirmwareImage.load(path: path).size == 1 << 32)
    }

    /// The span a caller allows (`--max-span`, 256 MiB by default) is checked from the segments'
    /// extent, before anything is flattened; the message names the span, the limit and the fix.
    @Test func loadRefusesASpanOverTheMaximumFromTheSegments() throws {
        let before = peakResidentBytes()
        let path = try temporaryFile("span.hex", Array(Self.spanningText.utf8))
        let error = #expect(throws: ImageError.self) { try FirmwareImage.load(path: path, maximumSpan: FirmwareImage.defaultMaximumSpan) }
        #expect(error?.kind == .spanTooLarge(base: 0, end: 1 << 32, last: 0xFFFF_FFFC, limit: 256 << 20))
        #expect(
            error?.description
                == "span.hex: its segments span 0x00000000–0xFFFFFFFF, 4294967296 bytes, more than the limit of 268435456 bytes: leave out what the target does not hold (the last segment starts at 0xFFFFFFFC), or give --max-span 4294967296"
        )
        // The smaller limit is the one named: a protocol's own is not one --max-span raises.
        #expect(throws: ImageError(file: "span.hex", kind: .tooLarge(size: 1 << 32, limit: 1 << 20))) {
            try FirmwareImage.load(path: path, limit: 1 << 20, maximumSpan: 256 << 20)
        }
        // Under it, loaded as before; and checkSpan says the same of an image in hand.
        let image = try FirmwareImage.load(path: path, maximumSpan: 1 << 32)
        #expect(throws: try #require(error)) { try image.checkSpan(limit: 256 << 20, fileName: "span.hex") }
        try image.checkSpan(limit: 1 << 32)
        // A raw binary by its file size, before it is read.
        let big = try temporaryFile("big.bin", [])
        #expect(truncate(big, 300 << 20) == 0)
        #expect(throws: ImageError(file: "big.bin", kind: .spanTooLarge(base: 0x1000, end: 0x1000 + (300 << 20), last: 0x1000, limit: 256 << 20))) {
            try FirmwareImage.load(path: big, baseAddress: 0x1000, maximumSpan: 256 << 20)
        }
        #expect(peakResidentBytes() - before < 256 << 20, "peak resident memory grew by \(peakResidentBytes() - before) bytes")
    }

    @Test func aRawBinaryLoadsAtTheGivenBaseAddress() throws {
        let path = try temporaryFile("app.bin", [1, 2, 3])
        let image = try FirmwareImage.load(path: path, baseAddress: 0x0800_0000)
        #expect(image.segments == [ImageSegment(address: 0x0800_0000, bytes: [1, 2, 3])])
        #expect(throws: ImageError(file: "app.bin", kind: .beyondAddressSpace(address: 0x1_0000_0002))) {
            try FirmwareImage.load(path: path, baseAddress: 0xFFFF_FFFF)
        }
    }

    @Test(arguments: [ImageFormat.bin, .intelHex, .srec])
    func writingStreamsTheSameBytesTheEncodersProduce(format: ImageFormat) throws {
        var generator = SeededGenerator.announced("writingStreams(\(format))", seed: 20_240_611)
        // Enough records that the text passes the writer's 1 MiB piece several times.
        let first = (0..<300_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let second = (0..<1000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let image = try FirmwareImage(
            format: .intelHex,
            segments: [
                ImageSegment(address: 0x2_0000, bytes: first),
                ImageSegment(address: 0x2_0000 + 400_000, bytes: second),
            ], startAddress: 0x2_0001)
        let path = try temporaryFile("out.\(format.rawValue)", [])
        try image.write(to: path, format: format, fill: 0x5A)
        let written = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        switch format {
        case .bin: #expect(written == image.flattened(fill: 0x5A))
        case .intelHex: #expect(written == Array(IntelHex.encode(image).utf8))
        case .srec: #expect(written == Array(SRecord.encode(image).utf8))
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: (path as NSString).deletingLastPathComponent) == [(path as NSString).lastPathComponent])
    }

    @Test func encodersHandTheirTextOnInBoundedPieces() throws {
        let image = try FirmwareImage(binary: [UInt8](repeating: 0x42, count: 1 << 20), baseAddress: 0x1000)
        var pieces: [Int] = []
        var text: [UInt8] = []
        IntelHex.encode(image) { buffer in
            pieces.append(buffer.count)
            text.append(contentsOf: buffer)
        }
        #expect(text == Array(IntelHex.encode(image).utf8))
        #expect(pieces.count == (text.count + RecordWriter.pieceSize - 1) / RecordWriter.pieceSize)
        #expect(pieces.allSatisfy { $0 <= RecordWriter.pieceSize + RecordWriter.longestLine })
        #expect(try IntelHex.parse(text).segments == image.segments)
    }

    @Test func anMCUbootImageIsParsedFromTheSparseImageOnlyAsFarAsItReaches() throws {
        let bytes = try mcubootSample("app-1.1.0-ecdsa-p256.bin")
        // The signed image, and 3 GiB further on a settings byte: only the first part is flattened.
        let image = try FirmwareImage(
            format: .intelHex,
            segments: [
                ImageSegment(address: 0, bytes: bytes),
                ImageSegment(address: 3 << 30, bytes: [0x42]),
            ])
        let before = peakResidentBytes()
        let parsed = try MCUbootImage(decoding: image)
        #expect(parsed == (try MCUbootImage(decoding: bytes)))
        #expect(parsed.totalSize == bytes.count)
        try parsed.verifySignature(with: try MCUbootPublicKey(try mcubootSample("ecdsa-p256.pub.pem")))
        #expect(peakResidentBytes() - before < 1 << 30)
    }

    @Test func anMCUbootHeaderClaimingMoreThanTheFileIsRefusedWithoutFlattening() throws {
        var header = Array(try mcubootSample("blinky-1.0.1-unsigned.bin").prefix(32))
        header.replaceSubrange(12..<16, with: [0xFF, 0xFF, 0xFF, 0xFF])  // image size 4 GiB − 1
        let image = try FirmwareImage(
            format: .intelHex,
            segments: [
                ImageSegment(address: 0, bytes: header),
                ImageSegment(address: 1 << 30, bytes: [0x42]),
            ])
        let error = #expect(throws: DecodingError.self) { try MCUbootImage(decoding: image) }
        #expect(
            error
                == DecodingError(
                    field: "image size", offset: 12,
                    reason: .invalidValue("header and image need \(0x200 + 0xFFFF_FFFF) bytes but the file has \((1 << 30) + 1)")))
        // Shorter than a header: the header's own fields are reported missing.
        let short = try FirmwareImage(binary: Array(header.prefix(10)))
        #expect(throws: DecodingError.self) { try MCUbootImage(decoding: short) }
    }

    @Test func aMegabyteOfRecordsParsesIntoOneSegment() throws {
        // 64 Ki records into one segment: appending used to copy the segment every record.
        let image = try FirmwareImage(binary: (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }, baseAddress: 0)
        let parsed = try IntelHex.parse(Array(IntelHex.encode(image).utf8))
        #expect(parsed.segments == image.segments)
        let srec = try SRecord.parse(Array(SRecord.encode(image).utf8))
        #expect(srec.segments == image.segments)
    }
}
