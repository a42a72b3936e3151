import BleotaSystem
import Foundation
import Testing

@testable import BleotaCodec

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
let samples = repositoryRoot.appendingPathComponent("samples/firmware")

/// Writes `text` to a fresh temporary file and returns its path.
func temporaryFile(_ name: String, _ contents: [UInt8]) throws -> String {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let url = directory.appendingPathComponent(name)
    try Data(contents).write(to: url)
    return url.path
}

func hexError(_ text: String, file: String = "t.hex") -> ImageError? {
    do {
        _ = try IntelHex.parse(Array(text.utf8), fileName: file)
        return nil
    } catch {
        return error
    }
}

func srecError(_ text: String, file: String = "t.srec") -> ImageError? {
    do {
        _ = try SRecord.parse(Array(text.utf8), fileName: file)
        return nil
    } catch {
        return error
    }
}

@Suite struct IntelHexTests {
    @Test func parsesTheSpecificationsExampleRecord() throws {
        let image = try IntelHex.parse(Array(":0B0010006164647265737320676170A7\n:00000001FF\n".utf8))
        #expect(image.segments == [ImageSegment(address: 0x10, bytes: Array("address gap".utf8))])
        #expect(image.startAddress == nil)
    }

    @Test func mergesContiguousRecordsAndKeepsGaps() throws {
        let text = """
            :020000040001F9
            :0400000001020304F2
            :0400040005060708DE
            :02001000AABB89
            :00000001FF
            """
        let image = try IntelHex.parse(Array(text.utf8))
        #expect(image.segments.count == 2)
        #expect(image.segments[0] == ImageSegment(address: 0x1_0000, bytes: [1, 2, 3, 4, 5, 6, 7, 8]))
        #expect(image.segments[1] == ImageSegment(address: 0x1_0010, bytes: [0xAA, 0xBB]))
        #expect(image.size == 0x12)
        #expect(image.flattened() == [1, 2, 3, 4, 5, 6, 7, 8] + [UInt8](repeating: 0xFF, count: 8) + [0xAA, 0xBB])
        #expect(image.flattened(fill: 0) == [1, 2, 3, 4, 5, 6, 7, 8] + [UInt8](repeating: 0, count: 8) + [0xAA, 0xBB])
    }

    @Test func extendedSegmentAndStartRecords() throws {
        // 02: segment 0x1000 → base 0x10000; 03: CS:IP 0x1000:0x0004 → 0x10004; data at offset 0x0100.
        let text = ":020000021000EC\n:040100001122334451\n:0400000310000004E5\n:00000001FF\n"
        let image = try IntelHex.parse(Array(text.utf8))
        #expect(image.segments == [ImageSegment(address: 0x10100, bytes: [0x11, 0x22, 0x33, 0x44])])
        #expect(image.startAddress == 0x10004)
        let linear = try IntelHex.parse(Array(":0400000508000101ED\n:00000001FF\n".utf8))
        #expect(linear.startAddress == 0x0800_0101)
    }

    @Test func acceptsCRLFAndBlankTrailingLines() throws {
        let image = try IntelHex.parse(Array(":0100000042BD\r\n:00000001FF\r\n\r\n\n".utf8))
        #expect(image.flattened() == [0x42])
    }

    @Test func badChecksumNamesLineRecordAndBothValues() {
        let error = hexError(":0100000042BD\n:0100010043BC\n:00000001FF\n", file: "app.hex")
        #expect(error?.kind == .badChecksum(expected: 0xBB, found: 0xBC))
        #expect(error?.description == "app.hex: line 2 (record 00): bad checksum: expected 0xBB, found 0xBC")
    }

    @Test func missingEndOfFileIsTruncation() {
        let error = hexError(":0100000042BD\n")
        #expect(error?.description == "t.hex: truncated: no end-of-file record (type 01): the file was cut short")
    }

    @Test func shortRecordIsTruncation() {
        #expect(
            hexError(":0100\n:00000001FF\n")?.description
                == "t.hex: line 1: truncated: a record needs at least 5 bytes (count, address, type, checksum), this one has 2")
    }

    @Test func countThatDisagreesWithTheRecordIsABadLength() {
        #expect(
            hexError(":0200000042BC\n:00000001FF\n")?.description
                == "t.hex: line 1 (record 00): bad record length: byte count says 2 data bytes, the record has 1")
        #expect(hexError(":0100000142BC\n")?.kind == .badLength("type 01 needs 0 data bytes, found 1"))
        #expect(hexError(":0100000401FA\n:00000001FF\n")?.kind == .badLength("type 04 needs 2 data bytes, found 1"))
        #expect(hexError(":0100000201FC\n:00000001FF\n")?.kind == .badLength("type 02 needs 2 data bytes, found 1"))
        #expect(hexError(":0100000501F9\n:00000001FF\n")?.kind == .badLength("type 05 needs 4 data bytes, found 1"))
        #expect(hexError(":0100000301FB\n:00000001FF\n")?.kind == .badLength("type 03 needs 4 data bytes, found 1"))
    }

    @Test func oddDigitsAndNonHexCharacters() {
        #expect(hexError(":0100000042B\n")?.kind == .badLength("odd number of hex digits"))
        #expect(hexError(":01000000G2BD\n")?.description == "t.hex: line 1: 'G' at column 10 is not a hex digit")
    }

    @Test func missingStartCode() {
        #expect(hexError("0100000042BD\n")?.description == "t.hex: line 1: expected a record start code, found '0'")
    }

    @Test func unknownRecordType() {
        #expect(hexError(":00000006FA\n")?.description == "t.hex: line 1 (record 06): unknown record type 06")
    }

    @Test func recordsAfterEndOfFile() {
        #expect(hexError(":00000001FF\n:0100000042BD\n")?.description == "t.hex: line 2: records after the end-of-file record")
    }

    @Test func overlappingSegmentsNameBothAddresses() {
        let error = hexError(":020000001122CB\n:0100010033CB\n:00000001FF\n")
        #expect(error?.kind == .overlap(first: 0, firstEnd: 2, second: 1))
        #expect(error?.description.contains("overlapping segments: 0x00000000–0x00000001 and one starting at 0x00000001") == true)
    }

    @Test func dataBeyondThe32BitAddressSpace() {
        // Upper 0xFFFF, offset 0xFFFF, two bytes → ends at 0x1_0000_0001.
        let error = hexError(":02000004FFFFFC\n:02FFFF001122CD\n:00000001FF\n")
        #expect(error?.kind == .beyondAddressSpace(address: 0x1_0000_0001))
    }

    @Test func encoderSplitsAt64KiBBoundariesWithLinearAddressRecords() throws {
        let bytes = (0..<40).map { UInt8($0) }
        let image = try FirmwareImage(format: .intelHex, segments: [ImageSegment(address: 0x1_FFF0, bytes: bytes)], startAddress: 0x1_FFF1)
        let text = IntelHex.encode(image)
        let lines = text.split(separator: "\n")
        #expect(lines.first == ":020000040001F9")
        #expect(lines.contains(":020000040002F8"))
        #expect(lines.last == ":00000001FF")
        let back = try IntelHex.parse(Array(text.utf8))
        #expect(back.segments == image.segments)
        #expect(back.startAddress == 0x1_FFF1)
    }
}

@Suite struct SRecordTests {
    @Test func parsesHeaderDataCountAndStart() throws {
        let text = "S00F000068656C6C6F202020202000003C\nS11F00007C0802A6900100049421FFF07C6C1B787C8C23783C6000003863000026\nS5030001FB\nS9030000FC\n"
        let image = try SRecord.parse(Array(text.utf8))
        #expect(image.header == "hello     ")
        #expect(image.segments.count == 1)
        #expect(image.segments[0].address == 0)
        #expect(image.segments[0].bytes.count == 28)
        #expect(image.startAddress == 0)
    }

    @Test func addressWidthsOfS2AndS3() throws {
        let s2 = try SRecord.parse(Array("S2060100001122C5\nS804010000FA\n".utf8))
        #expect(s2.segments == [ImageSegment(address: 0x10000, bytes: [0x11, 0x22])])
        #expect(s2.startAddress == 0x10000)
        let s3 = try SRecord.parse(Array("S307080000001122BD\nS70508000101F0\n".utf8))
        #expect(s3.segments == [ImageSegment(address: 0x0800_0000, bytes: [0x11, 0x22])])
        #expect(s3.startAddress == 0x0800_0101)
    }

    @Test func badChecksumNamesTheRecord() {
        let error = srecError("S10500001122FF\nS9030000FC\n", file: "fw.s19")
        #expect(error?.description == "fw.s19: line 1 (record S1): bad checksum: expected 0xC7, found 0xFF")
    }

    @Test func countRecordMustMatchTheDataRecords() {
        #expect(
            srecError("S10500001122C7\nS5030002FA\nS9030000FC\n")?.description
                == "t.srec: line 2 (record S5): record count says 2 data records, the file has 1")
    }

    @Test func dataWithoutATerminationRecordLoadsWithoutAStartAddress() throws {
        let image = try SRecord.parse(Array("S10500001122C7\n".utf8))
        #expect(image.segments == [ImageSegment(address: 0, bytes: [0x11, 0x22])])
        #expect(image.startAddress == nil)
    }

    @Test func noDataAndNoTerminationIsTruncation() {
        // Only a header: nothing to load and nothing saying the file ended.
        #expect(
            srecError("S00600004844521B\n")?.description
                == "t.srec: truncated: no data records, count or termination record (S5, S7, S8 or S9): the file was cut short")
        // Only blank lines are not an empty file on disk, but hold no records either.
        #expect(srecError("\n  \n\t\n")?.kind == .truncated("no data records, count or termination record (S5, S7, S8 or S9): the file was cut short"))
    }

    /// An empty image without a start address, as bleota writes it (found by
    /// FuzzSRecord: an empty data record parsed, but its re-encoding did not).
    @Test func anEmptyImageWrittenWithoutAStartAddressReadsBack() throws {
        let empty = try SRecord.parse(Array("S3050010616227\n".utf8))  // one data record with no bytes
        #expect(empty.segments.isEmpty && empty.startAddress == nil)
        let written = SRecord.encode(empty)
        #expect(written == "S0090000626C656F74617F\nS5030000FC\n")  // header "bleota", count 0
        let again = try SRecord.parse(Array(written.utf8))
        #expect(again.segments.isEmpty && again.startAddress == nil)
    }

    @Test func aCountRecordIsStillCheckedWithoutATerminationRecord() {
        #expect(
            srecError("S10500001122C7\nS5030002FA\n")?.description
                == "t.srec: line 2 (record S5): record count says 2 data records, the file has 1")
    }

    @Test func malformedRecords() {
        #expect(srecError("S4030000FC\n")?.description == "t.srec: line 1 (record S4): unknown record type S4")
        #expect(srecError("X1050000112207\n")?.kind == .missingStartCode(found: UInt8(ascii: "X")))
        #expect(srecError("S\n")?.kind == .truncated("the record has no type digit"))
        #expect(srecError("S10300\n")?.kind == .truncated("S1 needs at least 4 bytes, the record has 2"))
        #expect(srecError("S10600001122C7\nS9030000FC\n")?.kind == .badLength("count says 6 bytes follow, the record has 5"))
        #expect(srecError("S105000011Z2C7\n")?.kind == .nonHexCharacter(UInt8(ascii: "Z"), column: 11))
        #expect(srecError("S9030000FC\nS10500001122C7\n")?.kind == .dataAfterEnd)
        #expect(srecError("S5040001AA50\n")?.kind == .badLength("S5 carries no data"))
        #expect(srecError("S10500001122C7\nS1050001334482\nS9030000FC\n")?.kind == .overlap(first: 0, firstEnd: 2, second: 1))
    }

    @Test func roundTripKeepsSegmentsAndStart() throws {
        let image = try FirmwareImage(
            format: .srec,
            segments: [
                ImageSegment(address: 0x2000_0000, bytes: (0..<100).map { UInt8($0) }),
                ImageSegment(address: 0x2000_1000, bytes: [9, 8, 7]),
            ], startAddress: 0x2000_0001, header: "rt")
        let text = SRecord.encode(image)
        #expect(text.hasPrefix("S0"))
        #expect(text.contains("\nS5"))
        #expect(text.split(separator: "\n").last?.hasPrefix("S7") == true)
        let back = try SRecord.parse(Array(text.utf8))
        #expect(back.segments == image.segments)
        #expect(back.startAddress == image.startAddress)
        #expect(back.header == "rt")
    }
}

@Suite struct FirmwareImageTests {
    struct Expected: Decodable {
        var size: Int
        var crc32: String
        var sha256: String
        var baseAddress: UInt32
    }

    static func expected(_ name: String) throws -> Expected {
        let data = try Data(contentsOf: samples.appendingPathComponent("checksums.json"))
        return try #require(try JSONDecoder().decode([String: Expected].self, from: data)[name])
    }

    @Test(arguments: ["blinky.hex", "blinky.srec", "blinky.bin"])
    func samplesMatchTheIndependentlyComputedChecksums(file: String) throws {
        let image = try FirmwareImage.load(path: samples.appendingPathComponent(file).path)
        let expected = try Self.expected("blinky")
        #expect(image.size == expected.size)
        #expect("0x" + String(format: "%08x", image.crc32()) == expected.crc32)
        #expect(image.sha256().hexString == expected.sha256)
        #expect(CRC32.checksum(image.flattened()) == image.crc32())
        #expect(SHA256Digest.hash(image.flattened()) == image.sha256())
        if file != "blinky.bin" {
            #expect(image.baseAddress == expected.baseAddress)
            #expect(image.segments.map(\.bytes.count) == [10240, 1024])
            #expect(image.startAddress == 0x8101)
        }
    }

    @Test func hexToBinToHexKeepsTheContent() throws {
        let hex = try FirmwareImage.load(path: samples.appendingPathComponent("blinky.hex").path)
        let binPath = try temporaryFile("out.bin", [])
        try hex.write(to: binPath, format: .bin)
        let bin = try FirmwareImage(binary: FirmwareImage.load(path: binPath).flattened(), baseAddress: hex.baseAddress)
        let hexPath = (binPath as NSString).deletingLastPathComponent + "/again.hex"
        try bin.write(to: hexPath, format: .intelHex)
        let again = try FirmwareImage.load(path: hexPath)
        #expect(again.flattened() == hex.flattened())
        #expect(again.baseAddress == hex.baseAddress)
        #expect(again.crc32() == hex.crc32())
    }

    @Test func checksumsStreamOverGapsWithAnyFill() throws {
        let image = try FirmwareImage(
            format: .intelHex,
            segments: [
                ImageSegment(address: 0x100, bytes: [1, 2, 3]),
                ImageSegment(address: 0x100 + 200_000, bytes: [4]),
            ])
        for fill: UInt8 in [0xFF, 0x00, 0x5A] {
            let flat = image.flattened(fill: fill)
            #expect(flat.count == 200_001)
            #expect(image.crc32(fill: fill) == CRC32.checksum(flat))
            #expect(image.sha256(fill: fill) == SHA256Digest.hash(flat))
        }
    }

    @Test func fileErrors() throws {
        let missing = "/nonexistent/dir/app.hex"
        #expect(throws: ImageError(file: "app.hex", kind: .inputFile(InputFileError(path: missing, kind: .notFound)))) {
            try FirmwareImage.load(path: missing)
        }
        let empty = try temporaryFile("empty.bin", [])
        #expect(throws: ImageError(file: "empty.bin", kind: .empty)) { try FirmwareImage.load(path: empty) }
        let directory = (empty as NSString).deletingLastPathComponent
        let folder = directory + "/folder.hex"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let directoryError = #expect(throws: ImageError.self) { try FirmwareImage.load(path: folder) }
        #expect(directoryError?.kind == .inputFile(InputFileError(path: folder, kind: .notRegularFile(.directory))))
        #expect(directoryError?.description == "\(folder) is a directory: give a regular file")
        let unknown = try temporaryFile("notes.txt", [1])
        let error = #expect(throws: ImageError.self) { try FirmwareImage.load(path: unknown) }
        #expect(error?.description == "notes.txt: cannot tell the format from the extension: add --input-format bin, hex or srec")
        #expect(try FirmwareImage.load(path: unknown, format: .bin).flattened() == [1])
        #expect(
            ImageError(file: "x.hex", kind: .inputFile(InputFileError(path: "/a/x.hex", kind: .notFound))).description
                == "/a/x.hex: no such file: check the path")
        #expect(ImageError(file: "x.hex", kind: .empty).description == "x.hex is empty: nothing to load")
    }

    @Test func unreadableFileIsReported() throws {
        guard getuid() != 0 else { return }  // root reads everything; the error text is covered below
        let path = try temporaryFile("secret.bin", [1, 2])
        chmod(path, 0)
        #expect(throws: ImageError(file: "secret.bin", kind: .inputFile(InputFileError(path: path, kind: .permissionDenied)))) {
            try FirmwareImage.load(path: path)
        }
    }

    @Test func unreadableMessageSaysWhatToDo() {
        #expect(
            ImageError(file: "s.bin", kind: .inputFile(InputFileError(path: "dir/s.bin", kind: .permissionDenied))).description
                == "dir/s.bin: cannot read (permission denied): check its permissions")
    }

    @Test func writesAreAtomicAndLeaveNoTemporaryFiles() throws {
        let path = try temporaryFile("target.hex", Array("old".utf8))
        let image = try FirmwareImage(binary: [1, 2, 3], baseAddress: 0x1000)
        try image.write(to: path, format: .intelHex)
        let directory = (path as NSString).deletingLastPathComponent
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["target.hex"])
        #expect(try FirmwareImage.load(path: path).segments == image.segments)
        // A write into a missing directory fails without creating anything.
        #expect(throws: ImageError.self) { try image.write(to: directory + "/missing/x.hex", format: .intelHex) }
    }

    @Test func largeBinaryLoadsAsOneBuffer() throws {
        let bytes = [UInt8](repeating: 0xA5, count: 4 << 20)
        let path = try temporaryFile("big.bin", bytes)
        let image = try FirmwareImage.load(path: path)
        #expect(image.size == bytes.count)
        #expect(image.segments.count == 1)
        #expect(image.crc32() == CRC32.checksum(bytes))
    }
}

/// S-record files as other tools write them, and what a conversion keeps of the start address.
@Suite struct ForeignRecordTests {
    /// bincopy's layout: S0 header, S1/S2/S3 data 32 bytes a line, S5 count, and no
    /// S7/S8/S9 when the image has no execution start address.
    static func bincopyStyle(_ segments: [ImageSegment], width: Int, header: String = "bincopy") -> String {
        var lines = [ReferenceRecords.srec(type: 0, address: 0, width: 2, data: Array(header.utf8))]
        var count = 0
        for segment in segments {
            for offset in stride(from: 0, to: segment.bytes.count, by: 32) {
                let data = Array(segment.bytes[offset..<min(offset + 32, segment.bytes.count)])
                lines.append(ReferenceRecords.srec(type: width - 1, address: segment.address + UInt32(offset), width: width, data: data))
                count += 1
            }
        }
        lines.append(ReferenceRecords.srec(type: 5, address: UInt32(count), width: 2))
        return lines.joined(separator: "\n") + "\n"
    }

    /// GNU objcopy's layout cut after the data: S0 with the file name, S3 data 16 bytes a line, CRLF.
    static func objcopyStyle(_ segments: [ImageSegment]) -> String {
        var lines = [ReferenceRecords.srec(type: 0, address: 0, width: 2, data: Array("app.srec".utf8))]
        for segment in segments {
            for offset in stride(from: 0, to: segment.bytes.count, by: 16) {
                let data = Array(segment.bytes[offset..<min(offset + 16, segment.bytes.count)])
                lines.append(ReferenceRecords.srec(type: 3, address: segment.address + UInt32(offset), width: 4, data: data))
            }
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    static func randomSegments(_ generator: inout SeededGenerator, width: Int) -> [ImageSegment] {
        let top: UInt32 = width == 2 ? 0xF000 : width == 3 ? 0xF0_0000 : 0xF000_0000
        var address = UInt32.random(in: 0...(top / 2), using: &generator)
        var segments: [ImageSegment] = []
        for _ in 0..<Int.random(in: 1...4, using: &generator) {
            let length = Int.random(in: 1...700, using: &generator)
            segments.append(ImageSegment(address: address, bytes: (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }))
            address += UInt32(length) + UInt32.random(in: 1...300, using: &generator)
        }
        return segments
    }

    @Test(arguments: [2, 3, 4])
    func bincopyFilesWithoutATerminationRecordLoad(width: Int) throws {
        var generator = SeededGenerator.announced("bincopy width \(width)", seed: 7_000 + UInt64(width))
        let segments = Self.randomSegments(&generator, width: width)
        let image = try SRecord.parse(Array(Self.bincopyStyle(segments, width: width).utf8), fileName: "b.srec")
        #expect(image.segments == segments)
        #expect(image.startAddress == nil)
        #expect(image.header == "bincopy")
    }

    @Test func objcopyFilesWithoutCountOrTerminationLoad() throws {
        var generator = SeededGenerator.announced("objcopy", seed: 4_242)
        let segments = Self.randomSegments(&generator, width: 4)
        let image = try SRecord.parse(Array(Self.objcopyStyle(segments).utf8))
        #expect(image.segments == segments)
        #expect(image.startAddress == nil)
        #expect(image.header == "app.srec")
    }

    @Test func aWrongCountInAFileWithoutTerminationIsStillAnError() {
        var text = Self.bincopyStyle([ImageSegment(address: 0x100, bytes: [1, 2, 3])], width: 2)
        text = text.replacingOccurrences(
            of: ReferenceRecords.srec(type: 5, address: 1, width: 2),
            with: ReferenceRecords.srec(type: 5, address: 3, width: 2))
        #expect(srecError(text)?.description == "t.srec: line 3 (record S5): record count says 3 data records, the file has 1")
    }

    static let hexWithoutStart =
        [
            ReferenceRecords.intelHex(type: 0x00, address: 0x8000, data: [1, 2, 3, 4]),
            ReferenceRecords.intelHex(type: 0x01, address: 0),
        ].joined(separator: "\n") + "\n"

    static func terminationRecords(_ text: String) -> [Substring] {
        text.split(separator: "\n").filter { $0.hasPrefix("S7") || $0.hasPrefix("S8") || $0.hasPrefix("S9") }
    }

    @Test func aConversionWithoutAStartAddressWritesNoStartRecord() throws {
        let hex = try IntelHex.parse(Array(Self.hexWithoutStart.utf8))
        #expect(hex.startAddress == nil)
        let srecText = SRecord.encode(hex)
        #expect(Self.terminationRecords(srecText).isEmpty)
        #expect(srecText.split(separator: "\n").last == Substring(ReferenceRecords.srec(type: 5, address: 1, width: 2)))
        let srec = try SRecord.parse(Array(srecText.utf8))
        #expect(srec.startAddress == nil)
        #expect(srec.segments == hex.segments)
        let hexAgain = IntelHex.encode(srec)
        #expect(!hexAgain.split(separator: "\n").contains { $0.dropFirst(7).hasPrefix("05") || $0.dropFirst(7).hasPrefix("03") })
        #expect(hexAgain == Self.hexWithoutStart)
    }

    @Test(arguments: [(UInt32(0x0000_8101), "S9"), (0x0001_0001, "S8"), (0x0800_0101, "S7"), (0, "S9")])
    func aStartAddressSurvivesBothWays(start: UInt32, termination: String) throws {
        let text =
            [
                ReferenceRecords.intelHex(type: 0x00, address: 0x8000, data: [1, 2, 3, 4]),
                ReferenceRecords.intelHex(type: 0x05, address: 0, data: [UInt8(start >> 24), UInt8((start >> 16) & 0xFF), UInt8((start >> 8) & 0xFF), UInt8(start & 0xFF)]),
                ReferenceRecords.intelHex(type: 0x01, address: 0),
            ].joined(separator: "\n") + "\n"
        let hex = try IntelHex.parse(Array(text.utf8))
        #expect(hex.startAddress == start)
        let srecText = SRecord.encode(hex)
        let width = ["S9": 2, "S8": 3, "S7": 4][termination]!
        #expect(Self.terminationRecords(srecText) == [Substring(ReferenceRecords.srec(type: Int(termination.dropFirst())!, address: start, width: width))])
        let srec = try SRecord.parse(Array(srecText.utf8))
        #expect(srec.startAddress == start)
        #expect(IntelHex.encode(srec) == text)
    }
}

/// Error messages quote input bytes escaped, never raw.
@Suite struct QuotedInputTests {
    @Test func controlAndNonASCIIBytesAreQuotedAsEscapes() {
        #expect(RecordLines.quote(0x00) == "\\x00")
        #expect(RecordLines.quote(0x1B) == "\\x1B")
        #expect(RecordLines.quote(0x7F) == "\\x7F")
        #expect(RecordLines.quote(0xC3) == "\\xC3")
        #expect(RecordLines.quote(0x27) == "\\x27")
        #expect(RecordLines.quote(0x5C) == "\\x5C")
        #expect(RecordLines.quote(UInt8(ascii: "G")) == "G")
        #expect(RecordLines.quote(UInt8(ascii: " ")) == " ")
    }

    @Test func intelHexQuotesTheOffendingByte() {
        #expect(hexError(":01000000\u{0}2BD\n")?.description == "t.hex: line 1: '\\x00' at column 10 is not a hex digit")
        #expect(hexError(":01000000é2BD\n")?.description == "t.hex: line 1: '\\xC3' at column 10 is not a hex digit")
        #expect(hexError("\u{1B}[2J:00000001FF\n")?.description == "t.hex: line 1: expected a record start code, found '\\x1B'")
        #expect(hexError("'00000001FF\n")?.description == "t.hex: line 1: expected a record start code, found '\\x27'")
    }

    @Test func sRecordsQuoteTheOffendingByteAndTheRecordType() {
        #expect(srecError("S\u{7}030000FC\n")?.description == "t.srec: line 1 (record S\\x07): unknown record type S\\x07")
        #expect(srecError("S1050000\u{8}122C7\n")?.description == "t.srec: line 1 (record S1): '\\x08' at column 9 is not a hex digit")
        #expect(srecError("\u{FF}1050000112207\n")?.description == "t.srec: line 1: expected a record start code, found '\\xC3'")
    }

    @Test func noMessageCarriesAControlByte() {
        var generator = SeededGenerator.announced("noMessageCarriesAControlByte", seed: 99)
        for _ in 0..<2000 {
            var line = Array(":0100000042BD".utf8)
            line[Int.random(in: 0..<line.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            let text = line + Array("\n:00000001FF\n".utf8)
            var message: String?
            do { _ = try IntelHex.parse(text) } catch { message = error.description }
            var srec = Array("S10500001122C7".utf8)
            srec[Int.random(in: 0..<srec.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            var srecMessage: String?
            do { _ = try SRecord.parse(srec + [0x0A]) } catch { srecMessage = error.description }
            for text in [message, srecMessage].compactMap({ $0 }) {
                #expect(!text.unicodeScalars.contains { $0.value < 0x20 || ($0.value >= 0x7F && $0.value < 0xA0) }, "\(text.debugDescription)")
            }
        }
    }
}
