/// Why an image file could not be loaded or written: the file, the line and
/// record where it applies, and what is wrong, in one line.
public struct ImageError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// Missing, not a regular file, unreadable, or over the caller's size limit.
        case inputFile(InputFileError)
        case unwritable(String)
        case empty
        case unknownFormat
        /// The file ended before it was complete (no end record, or a short record).
        case truncated(String)
        /// The byte the line starts with instead (quoted escaped in the message).
        case missingStartCode(found: UInt8)
        /// The byte that is not a hex digit (quoted escaped in the message), and its 1-based column.
        case nonHexCharacter(UInt8, column: Int)
        case badLength(String)
        case badChecksum(expected: UInt8, found: UInt8)
        case unknownRecordType(String)
        case dataAfterEnd
        case badCount(expected: Int, found: Int)
        case badRecord(String)
        case overlap(first: UInt32, firstEnd: UInt64, second: UInt32)
        case beyondAddressSpace(address: UInt64)
        /// The flattened image is larger than the caller accepts; it was not flattened.
        case tooLarge(size: UInt64, limit: UInt64)
        /// The segments lie further apart than the caller accepts (`--max-span`), from the lowest
        /// address to one past the highest; `last` is where the highest segment starts. Nothing
        /// was flattened.
        case spanTooLarge(base: UInt32, end: UInt64, last: UInt32, limit: UInt64)
    }

    public var file: String
    /// 1-based line number in a text format, if the problem is on a line.
    public var line: Int?
    /// The record's type as written (`"04"`, `"S3"`), if known.
    public var record: String?
    public var kind: Kind

    public init(file: String, line: Int? = nil, record: String? = nil, kind: Kind) {
        self.file = file
        self.line = line
        self.record = record
        self.kind = kind
    }

    public var description: String {
        var location = file + ":"
        let what: String
        switch kind {
        case .inputFile(let error): return error.description
        case .unwritable(let why): return "\(file): cannot write (\(why)); nothing was changed"
        case .empty: return "\(file) is empty: nothing to load"
        case .unknownFormat: return "\(file): cannot tell the format from the extension: add --input-format bin, hex or srec"
        case .truncated(let why): what = "truncated: \(why)"
        case .missingStartCode(let found): what = "expected a record start code, found '\(RecordLines.quote(found))'"
        case .nonHexCharacter(let byte, let column): what = "'\(RecordLines.quote(byte))' at column \(column) is not a hex digit"
        case .badLength(let why): what = "bad record length: \(why)"
        case .badChecksum(let expected, let found):
            what = "bad checksum: expected 0x\(hex(expected)), found 0x\(hex(found))"
        case .unknownRecordType(let type): what = "unknown record type \(type)"
        case .dataAfterEnd: what = "records after the end-of-file record"
        case .badCount(let expected, let found): what = "record count says \(found) data records, the file has \(expected)"
        case .badRecord(let why): what = why
        case .overlap(let first, let firstEnd, let second):
            what =
                "overlapping segments: 0x\(hex32(first))–0x\(hex32(UInt32(truncatingIfNeeded: firstEnd - 1))) and one starting at 0x\(hex32(second)); fix the build that produced it"
        case .beyondAddressSpace(let address):
            what = "data reaches 0x\(String(address, radix: 16, uppercase: true)), beyond the 32-bit address space"
        case .tooLarge(let size, let limit):
            return "\(file): the image is \(size) bytes flattened, more than the limit of \(limit) bytes"
        case .spanTooLarge(let base, let end, let last, let limit):
            let span = end - UInt64(base)
            return
                "\(file): its segments span 0x\(hex32(base))–0x\(hex32(UInt32(truncatingIfNeeded: end - 1))), \(span) bytes, more than the limit of \(limit) bytes: "
                + "leave out what the target does not hold\(last == base ? "" : " (the last segment starts at 0x\(hex32(last)))"), or give --max-span \(span)"
        }
        if let line { location += " line \(line)" + (record.map { " (record \($0))" } ?? "") + ":" }
        return "\(location) \(what)"
    }

    private func hex(_ value: UInt8) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return digits.count == 1 ? "0" + digits : digits
    }

    private func hex32(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 8 - digits.count)) + digits
    }
}
