import BleotaCodec

/// Checks shared by the Intel HEX and S-record targets.
public enum ImageChecks {
    /// The segments with touching neighbours joined: two files describe the
    /// same memory exactly when these are equal, however their records split it.
    public static func memory(_ image: FirmwareImage) -> [ImageSegment] {
        var merged: [ImageSegment] = []
        for segment in image.segments {
            if let last = merged.last, last.end == UInt64(segment.address) {
                merged[merged.count - 1].bytes += segment.bytes
            } else {
                merged.append(segment)
            }
        }
        return merged
    }

    /// What ``FirmwareImage`` promises about a parsed image, and that its
    /// flattened view, CRC-32 and SHA-256 agree with the segments.
    public static func check(_ image: FirmwareImage, inputSize: Int) {
        for segment in image.segments {
            invariant(!segment.bytes.isEmpty, "empty segment at 0x\(String(segment.address, radix: 16))")
            invariant(segment.end <= 1 << 32, "segment ends at 0x\(String(segment.end, radix: 16)), beyond 32 bits")
        }
        for (previous, next) in zip(image.segments, image.segments.dropFirst()) {
            invariant(previous.end <= UInt64(next.address), "segments out of order or overlapping")
        }
        // Two hex digits per byte at least: the data cannot outgrow the text.
        invariant(image.dataSize <= inputSize / 2, "\(image.dataSize) data bytes from \(inputSize) bytes of text")
        guard let first = image.segments.first, let last = image.segments.last else {
            invariant(image.size == 0 && image.flattened().isEmpty, "an image without segments has a size")
            return
        }
        invariant(image.size == Int(last.end - UInt64(first.address)), "size disagrees with the segments")
        // Flatten only what is cheap: gaps may span gigabytes.
        guard image.size <= 1 << 20 else { return }
        for fill: UInt8 in [0xFF, 0x00] {
            let flat = image.flattened(fill: fill)
            invariant(flat.count == image.size, "flattened \(flat.count) bytes, size says \(image.size)")
            var cursor = 0
            for segment in image.segments {
                let offset = Int(segment.address - first.address)
                invariant(flat[cursor..<offset].allSatisfy { $0 == fill }, "a gap is not filled with 0x\(String(fill, radix: 16))")
                invariant(Array(flat[offset..<offset + segment.bytes.count]) == segment.bytes, "a segment's bytes moved when flattened")
                cursor = offset + segment.bytes.count
            }
            invariant(image.crc32(fill: fill) == CRC32.checksum(flat), "streamed CRC-32 differs from the flattened image's")
            invariant(image.sha256(fill: fill) == SHA256Digest.hash(flat), "streamed SHA-256 differs from the flattened image's")
        }
    }

    /// A parse error must name a line of the input, and a column inside that line.
    public static func check(_ error: ImageError, input: [UInt8]) {
        let textLines = lines(of: input)
        if let line = error.line {
            invariant(line >= 1 && line <= textLines.count, "error on line \(line) of a \(textLines.count)-line input: \(error)")
            if case .nonHexCharacter(let character, let column) = error.kind {
                // Columns count from 1 at the start of the line as the file has it.
                let text = textLines[line - 1]
                invariant(column >= 1 && column <= text.count, "column \(column) of a \(text.count)-byte line: \(error)")
                let found = text[text.startIndex + column - 1]
                invariant(found == character, "column \(column) holds 0x\(String(found, radix: 16)), the error names 0x\(String(character, radix: 16)): \(error)")
            }
        }
        _ = error.description
    }
}
