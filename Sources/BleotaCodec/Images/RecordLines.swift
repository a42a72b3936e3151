/// Splits a text image into lines and decodes the hex pairs of one record,
/// with positions good enough for an error message.
struct RecordLine {
    /// 1-based.
    var number: Int
    /// The line without its terminator (CR LF or LF).
    var text: ArraySlice<UInt8>
    /// Spaces and tabs trimmed from the front of `text`: columns count from the line's real start.
    var indent = 0
}

enum RecordLines {
    /// Lines of `bytes`; blank lines (only spaces/tabs) are dropped.
    static func split(_ bytes: [UInt8]) -> [RecordLine] {
        var lines: [RecordLine] = []
        var start = 0
        var number = 1
        func emit(_ end: Int) {
            var slice = bytes[start..<end]
            while let last = slice.last, last == 0x0D || last == 0x20 || last == 0x09 { slice = slice.dropLast() }
            while let first = slice.first, first == 0x20 || first == 0x09 { slice = slice.dropFirst() }
            if !slice.isEmpty { lines.append(RecordLine(number: number, text: slice, indent: slice.startIndex - start)) }
        }
        for index in bytes.indices where bytes[index] == 0x0A {
            emit(index)
            start = index + 1
            number += 1
        }
        if start < bytes.count { emit(bytes.count) }
        return lines
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    /// Decodes the hex digits after the start code (`skip` characters).
    static func decode(_ line: RecordLine, skip: Int, file: String, record: String?) throws(ImageError) -> [UInt8] {
        let digits = line.text.dropFirst(skip)
        var result: [UInt8] = []
        result.reserveCapacity(digits.count / 2)
        var high: UInt8?
        for (offset, byte) in digits.enumerated() {
            guard let value = hexValue(byte) else {
                throw ImageError(file: file, line: line.number, record: record,
                                 kind: .nonHexCharacter(Character(UnicodeScalar(byte)), column: line.indent + skip + offset + 1))
            }
            if let pending = high {
                result.append(pending << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        if high != nil {
            throw ImageError(file: file, line: line.number, record: record, kind: .badLength("odd number of hex digits"))
        }
        return result
    }
}

/// Collects data records into segments, merging contiguous runs.
struct SegmentBuilder {
    var segments: [ImageSegment] = []

    mutating func add(address: UInt64, bytes: [UInt8], file: String, line: Int, record: String) throws(ImageError) {
        guard !bytes.isEmpty else { return }
        let end = address + UInt64(bytes.count)
        guard end <= 1 << 32 else {
            throw ImageError(file: file, line: line, record: record, kind: .beyondAddressSpace(address: end))
        }
        if let last = segments.last, last.end == address {
            segments[segments.count - 1].bytes.append(contentsOf: bytes)
        } else {
            segments.append(ImageSegment(address: UInt32(address), bytes: bytes))
        }
    }
}
