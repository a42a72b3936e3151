/// Motorola S-records: reading and writing (srec(5)).
///
/// A record is `S<type><count><address><data><checksum>` in hex; the count
/// covers address, data and checksum bytes, and the checksum is the ones'
/// complement of the low byte of their sum (count included). Types: S0 header,
/// S1/S2/S3 data with 16/24/32-bit addresses, S5/S6 a 16/24-bit count of the
/// data records, S7/S8/S9 the start address (32/24/16-bit) that ends the file.
///
/// The termination record is optional in practice: bincopy writes one only
/// when there is a start address, and GNU objcopy's output is often cut after
/// the data or count records by tools that concatenate S-records. A file with
/// data records and no termination record is read as an image without a start
/// address; a file with neither is refused as truncated.
public enum SRecord {
    public static func parse(_ bytes: [UInt8], fileName: String = "image.srec") throws(ImageError) -> FirmwareImage {
        var builder = SegmentBuilder()
        var header: String?
        var start: UInt32?
        var dataRecords = 0
        var ended = false
        var counted = false  // a count record (S5/S6) closes a file that has no start address
        try RecordLines.forEach(bytes) { line throws(ImageError) in
            if ended { throw ImageError(file: fileName, line: line.number, kind: .dataAfterEnd) }
            guard line.text.first == UInt8(ascii: "S") || line.text.first == UInt8(ascii: "s") else {
                throw ImageError(file: fileName, line: line.number, kind: .missingStartCode(found: line.text.first!))
            }
            guard line.text.count >= 2 else {
                throw ImageError(file: fileName, line: line.number, kind: .truncated("the record has no type digit"))
            }
            let typeByte = line.text[line.text.startIndex + 1]
            let typeName = "S" + RecordLines.quote(typeByte)
            guard (0x30...0x39).contains(typeByte), [0, 1, 2, 3, 5, 6, 7, 8, 9].contains(typeByte - 0x30) else {
                throw ImageError(file: fileName, line: line.number, record: typeName, kind: .unknownRecordType(typeName))
            }
            let type = Int(typeByte - 0x30)
            let record = try RecordLines.decode(line, skip: 2, file: fileName, record: typeName)
            let addressLength = [0: 2, 1: 2, 2: 3, 3: 4, 5: 2, 6: 3, 7: 4, 8: 3, 9: 2][type]!
            guard record.count >= 1 + addressLength + 1 else {
                throw ImageError(
                    file: fileName, line: line.number, record: typeName,
                    kind: .truncated("\(typeName) needs at least \(addressLength + 2) bytes, the record has \(record.count)"))
            }
            let count = Int(record[0])
            guard record.count == count + 1 else {
                throw ImageError(
                    file: fileName, line: line.number, record: typeName,
                    kind: .badLength("count says \(count) bytes follow, the record has \(record.count - 1)"))
            }
            let expected = ~record.dropLast().reduce(UInt8(0)) { $0 &+ $1 }
            guard expected == record.last! else {
                throw ImageError(file: fileName, line: line.number, record: typeName, kind: .badChecksum(expected: expected, found: record.last!))
            }
            let address = record[1...addressLength].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let data = record[(1 + addressLength)..<(record.count - 1)]
            switch type {
            case 0:
                header = String(decoding: data.prefix { $0 != 0 }, as: UTF8.self)
            case 1, 2, 3:
                dataRecords += 1
                try builder.add(address: address, bytes: data, file: fileName, line: line.number, record: typeName)
            case 5, 6:
                guard data.isEmpty else {
                    throw ImageError(file: fileName, line: line.number, record: typeName, kind: .badLength("\(typeName) carries no data"))
                }
                guard Int(address) == dataRecords else {
                    throw ImageError(file: fileName, line: line.number, record: typeName, kind: .badCount(expected: dataRecords, found: Int(address)))
                }
                counted = true
            default:  // 7, 8, 9
                guard data.isEmpty else {
                    throw ImageError(file: fileName, line: line.number, record: typeName, kind: .badLength("\(typeName) carries no data"))
                }
                start = UInt32(address)
                ended = true
            }
        }
        // An empty image written without a start address is S0 and S5 only (bleota's
        // own, bincopy's); only S0, or nothing at all, is a file cut short.
        guard ended || dataRecords > 0 || counted else {
            throw ImageError(file: fileName, kind: .truncated("no data records, count or termination record (S5, S7, S8 or S9): the file was cut short"))
        }
        return try FirmwareImage(format: .srec, segments: builder.segments(), startAddress: start, header: header, fileName: fileName)
    }

    /// Writes `image` with the narrowest address width that fits, an S0 header
    /// and a count record; the termination record carrying the start address
    /// (S7, S8 or S9, matching the data records' width) only when the image has
    /// a start address, as bincopy does, so a conversion never invents one.
    public static func encode(_ image: FirmwareImage, bytesPerRecord: Int = 16) -> String {
        var text: [UInt8] = []
        encode(image, bytesPerRecord: bytesPerRecord) { text.append(contentsOf: $0) }
        return String(decoding: text, as: UTF8.self)
    }

    /// Writes `image` as ``encode(_:bytesPerRecord:)`` does, handing the text
    /// to `sink` in pieces of about 1 MiB as it is produced.
    public static func encode(_ image: FirmwareImage, bytesPerRecord: Int = 16, to sink: (UnsafeRawBufferPointer) -> Void) {
        let perRecord = max(1, min(250, bytesPerRecord))
        let highest = max(image.segments.last?.end ?? 0, image.startAddress.map { UInt64($0) + 1 } ?? 0)
        let (dataType, endType, width): (UInt8, UInt8, Int) = highest <= 0x1_0000 ? (1, 9, 2) : highest <= 0x100_0000 ? (2, 8, 3) : (3, 7, 4)
        let writer = RecordWriter()
        var fields: [UInt8] = []
        fields.reserveCapacity(6 + perRecord)
        func record(type: UInt8, address: UInt64, width: Int, data: ArraySlice<UInt8>) {
            fields.removeAll(keepingCapacity: true)
            fields.append(UInt8(width + data.count + 1))
            for index in stride(from: width - 1, through: 0, by: -1) { fields.append(UInt8((address >> (8 * UInt64(index))) & 0xFF)) }
            fields.append(contentsOf: data)
            fields.append(~fields.reduce(UInt8(0)) { $0 &+ $1 })
            writer.line(start: UInt8(ascii: "S"), type: 0x30 + type, fields: fields, sink: sink)
        }
        record(type: 0, address: 0, width: 2, data: Array((image.header ?? "bleota").utf8.prefix(64))[...])
        var count = 0
        for segment in image.segments {
            var offset = 0
            while offset < segment.bytes.count {
                let length = min(perRecord, segment.bytes.count - offset)
                record(
                    type: dataType, address: UInt64(segment.address) + UInt64(offset), width: width,
                    data: segment.bytes[offset..<offset + length])
                offset += length
                count += 1
            }
        }
        if count <= 0xFFFF {
            record(type: 5, address: UInt64(count), width: 2, data: [])
        } else if count <= 0xFF_FFFF {
            record(type: 6, address: UInt64(count), width: 3, data: [])
        }
        if let start = image.startAddress {
            record(type: endType, address: UInt64(start), width: width, data: [])
        }
        writer.finish(sink: sink)
    }
}
