/// Intel HEX: reading and writing (Intel, "Hexadecimal Object File Format
/// Specification", rev. A, 1988).
///
/// A record is `:LLAAAATT<data>CC` in hex: byte count, 16-bit address, type,
/// data, and a checksum that makes all the record's bytes sum to zero. Types:
/// 00 data, 01 end of file, 02 extended segment address (base = value × 16),
/// 03 start segment address (CS:IP), 04 extended linear address (upper 16
/// bits), 05 start linear address.
public enum IntelHex {
    public static func parse(_ bytes: [UInt8], fileName: String = "image.hex") throws(ImageError) -> FirmwareImage {
        var builder = SegmentBuilder()
        var base: UInt64 = 0
        var start: UInt32?
        var ended = false
        try RecordLines.forEach(bytes) { line throws(ImageError) in
            if ended { throw ImageError(file: fileName, line: line.number, kind: .dataAfterEnd) }
            guard line.text.first == UInt8(ascii: ":") else {
                throw ImageError(file: fileName, line: line.number, kind: .missingStartCode(found: line.text.first!))
            }
            let record = try RecordLines.decode(line, skip: 1, file: fileName, record: nil)
            guard record.count >= 5 else {
                throw ImageError(
                    file: fileName, line: line.number,
                    kind: .truncated("a record needs at least 5 bytes (count, address, type, checksum), this one has \(record.count)"))
            }
            let type = record[3]
            let typeName = hex2(type)
            let count = Int(record[0])
            guard record.count == count + 5 else {
                throw ImageError(
                    file: fileName, line: line.number, record: typeName,
                    kind: .badLength("byte count says \(count) data bytes, the record has \(record.count - 5)"))
            }
            let sum = record.dropLast().reduce(UInt8(0)) { $0 &+ $1 }
            let expected = 0 &- sum
            guard expected == record.last! else {
                throw ImageError(file: fileName, line: line.number, record: typeName, kind: .badChecksum(expected: expected, found: record.last!))
            }
            let offset = UInt64(record[1]) << 8 | UInt64(record[2])
            let data = record[4..<(4 + count)]
            func requireLength(_ length: Int) throws(ImageError) {
                guard count == length else {
                    throw ImageError(
                        file: fileName, line: line.number, record: typeName,
                        kind: .badLength("type \(typeName) needs \(length) data bytes, found \(count)"))
                }
            }
            switch type {
            case 0x00:
                try builder.add(address: base + offset, bytes: data, file: fileName, line: line.number, record: typeName)
            case 0x01:
                try requireLength(0)
                ended = true
            case 0x02:
                try requireLength(2)
                base = (UInt64(record[4]) << 8 | UInt64(record[5])) << 4
            case 0x03:
                try requireLength(4)
                let segment = UInt32(record[4]) << 8 | UInt32(record[5])
                let pointer = UInt32(record[6]) << 8 | UInt32(record[7])
                start = segment << 4 &+ pointer
            case 0x04:
                try requireLength(2)
                base = (UInt64(record[4]) << 8 | UInt64(record[5])) << 16
            case 0x05:
                try requireLength(4)
                start = data.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            default:
                throw ImageError(file: fileName, line: line.number, record: typeName, kind: .unknownRecordType(typeName))
            }
        }
        guard ended else {
            throw ImageError(file: fileName, kind: .truncated("no end-of-file record (type 01): the file was cut short"))
        }
        return try FirmwareImage(format: .intelHex, segments: builder.segments(), startAddress: start, fileName: fileName)
    }

    /// Writes `image` as Intel HEX with type 04 records wherever the upper 16
    /// address bits change; records never cross a 64 KiB boundary. A start
    /// address record (05) is written only when the image has a start address.
    public static func encode(_ image: FirmwareImage, bytesPerRecord: Int = 16) -> String {
        var text: [UInt8] = []
        encode(image, bytesPerRecord: bytesPerRecord) { text.append(contentsOf: $0) }
        return String(decoding: text, as: UTF8.self)
    }

    /// Writes `image` as ``encode(_:bytesPerRecord:)`` does, handing the text
    /// to `sink` in pieces of about 1 MiB as it is produced.
    public static func encode(_ image: FirmwareImage, bytesPerRecord: Int = 16, to sink: (UnsafeRawBufferPointer) -> Void) {
        let perRecord = max(1, min(255, bytesPerRecord))
        let writer = RecordWriter()
        var fields: [UInt8] = []
        fields.reserveCapacity(5 + perRecord)
        func record(type: UInt8, address: UInt16, data: ArraySlice<UInt8>) {
            fields.removeAll(keepingCapacity: true)
            fields.append(UInt8(data.count))
            fields.append(UInt8(address >> 8))
            fields.append(UInt8(address & 0xFF))
            fields.append(type)
            fields.append(contentsOf: data)
            fields.append(0 &- fields.reduce(UInt8(0)) { $0 &+ $1 })
            writer.line(start: UInt8(ascii: ":"), fields: fields, sink: sink)
        }
        var upper: UInt32 = 0
        for segment in image.segments {
            var offset = 0
            while offset < segment.bytes.count {
                let address = segment.address + UInt32(offset)
                if address >> 16 != upper {
                    upper = address >> 16
                    record(type: 0x04, address: 0, data: [UInt8(upper >> 8), UInt8(upper & 0xFF)])
                }
                let toBoundary = Int(0x10000 - (address & 0xFFFF))
                let length = min(perRecord, segment.bytes.count - offset, toBoundary)
                record(type: 0x00, address: UInt16(address & 0xFFFF), data: segment.bytes[offset..<offset + length])
                offset += length
            }
        }
        if let start = image.startAddress {
            record(type: 0x05, address: 0, data: [UInt8(start >> 24), UInt8((start >> 16) & 0xFF), UInt8((start >> 8) & 0xFF), UInt8(start & 0xFF)])
        }
        record(type: 0x01, address: 0, data: [])
        writer.finish(sink: sink)
    }
}

func hex2(_ byte: UInt8) -> String {
    let digits = Array("0123456789ABCDEF")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
}
