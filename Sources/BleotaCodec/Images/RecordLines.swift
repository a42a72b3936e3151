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
    /// Calls `body` with each line of `bytes` in order; blank lines (only
    /// spaces/tabs) are skipped. Lines are slices of `bytes`, never copies, and
    /// are not collected: a large file costs no memory per line.
    static func forEach(_ bytes: [UInt8], _ body: (RecordLine) throws(ImageError) -> Void) throws(ImageError) {
        var start = 0
        var number = 1
        func line(_ end: Int) -> RecordLine? {
            var slice = bytes[start..<end]
            while let last = slice.last, last == 0x0D || last == 0x20 || last == 0x09 { slice = slice.dropLast() }
            while let first = slice.first, first == 0x20 || first == 0x09 { slice = slice.dropFirst() }
            return slice.isEmpty ? nil : RecordLine(number: number, text: slice, indent: slice.startIndex - start)
        }
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x0A {
                if let line = line(index) { try body(line) }
                start = index + 1
                number += 1
            }
            index += 1
        }
        if start < bytes.count, let line = line(bytes.count) { try body(line) }
    }

    /// A byte of the input as an error message quotes it: printable ASCII as
    /// itself, anything else (control bytes, bytes of a multi-byte character)
    /// and the quote and backslash as `\xNN`, so a message never carries raw
    /// control bytes to a terminal and always says exactly which byte it was.
    static func quote(_ byte: UInt8) -> String {
        switch byte {
        case 0x20...0x7E where byte != 0x27 && byte != 0x5C: String(UnicodeScalar(byte))
        default: "\\x" + hex2(byte)
        }
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
        // Find the first byte that is not a hex digit before decoding, so the
        // decoding loop below is a plain pointer loop (fast in debug builds too).
        let bad = digits.withUnsafeBufferPointer { buffer in buffer.firstIndex { hexValue($0) == nil } }
        if let bad {
            throw ImageError(
                file: file, line: line.number, record: record,
                kind: .nonHexCharacter(digits[digits.startIndex + bad], column: line.indent + skip + bad + 1))
        }
        guard digits.count % 2 == 0 else {
            throw ImageError(file: file, line: line.number, record: record, kind: .badLength("odd number of hex digits"))
        }
        return [UInt8](unsafeUninitializedCapacity: digits.count / 2) { result, count in
            digits.withUnsafeBufferPointer { buffer in
                for index in 0..<buffer.count / 2 {
                    result[index] = hexValue(buffer[2 * index])! << 4 | hexValue(buffer[2 * index + 1])!
                }
            }
            count = digits.count / 2
        }
    }
}

/// Collects data records into segments, merging contiguous runs.
///
/// The run being extended is kept apart from the finished segments, so each
/// record appends to an array nothing else refers to: no copy per record (a
/// copy of the last segment held while appending made loading quadratic).
struct SegmentBuilder {
    private var finished: [ImageSegment] = []
    private var runAddress: UInt64 = 0
    private var run: [UInt8] = []

    mutating func add(address: UInt64, bytes: ArraySlice<UInt8>, file: String, line: Int, record: String) throws(ImageError) {
        guard !bytes.isEmpty else { return }
        let end = address + UInt64(bytes.count)
        guard end <= 1 << 32 else {
            throw ImageError(file: file, line: line, record: record, kind: .beyondAddressSpace(address: end))
        }
        if run.isEmpty || runAddress + UInt64(run.count) != address {
            closeRun()
            runAddress = address
        }
        run.append(contentsOf: bytes)
    }

    private mutating func closeRun() {
        guard !run.isEmpty else { return }
        finished.append(ImageSegment(address: UInt32(runAddress), bytes: run))
        run = []
    }

    /// The segments in file order (``FirmwareImage`` sorts and checks them).
    mutating func segments() -> [ImageSegment] {
        closeRun()
        return finished
    }
}
