/// The text of Intel HEX and S-record files as the encoders produce it: one
/// record line at a time into a fixed buffer that is handed to a sink each time
/// it holds about 1 MiB, and once more at the end.
///
/// The text is 2.8 times the size of the data it carries, so building it whole
/// (as a `String`, then as bytes to write) tripled a conversion's memory; with
/// this, converting a 64 MiB image holds the image and one piece of text.
/// The buffer is raw memory written through a pointer so that encoding stays
/// fast in debug builds too, where array appends cost a call per byte.
final class RecordWriter {
    static let pieceSize = 1 << 20
    /// A two-character start, 260 bytes (an S-record's count, a 32-bit address,
    /// 250 data bytes and a checksum, or Intel HEX's 255 + 5) as hex, a line feed.
    static let longestLine = 2 + 2 * 260 + 1

    private let storage = UnsafeMutablePointer<UInt8>.allocate(capacity: pieceSize + longestLine)
    private var used = 0

    deinit { storage.deallocate() }

    /// Appends `start`, the optional `type` character (an S-record's digit), each
    /// byte of `fields` as two uppercase hex digits, and a line feed.
    func line(start: UInt8, type: UInt8? = nil, fields: [UInt8], sink: (UnsafeRawBufferPointer) -> Void) {
        precondition(fields.count <= 260, "a record has at most 260 bytes")
        storage[used] = start
        used += 1
        if let type {
            storage[used] = type
            used += 1
        }
        fields.withUnsafeBufferPointer { bytes in
            for byte in bytes {
                storage[used] = Self.digit(byte >> 4)
                storage[used + 1] = Self.digit(byte & 0x0F)
                used += 2
            }
        }
        storage[used] = 0x0A
        used += 1
        if used >= Self.pieceSize { finish(sink: sink) }
    }

    /// Hands what is buffered to `sink`.
    func finish(sink: (UnsafeRawBufferPointer) -> Void) {
        guard used > 0 else { return }
        sink(UnsafeRawBufferPointer(start: storage, count: used))
        used = 0
    }

    private static func digit(_ value: UInt8) -> UInt8 {
        value < 10 ? 0x30 + value : 0x37 + value
    }
}
