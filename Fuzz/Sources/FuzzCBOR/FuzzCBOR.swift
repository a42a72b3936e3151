import BleotaCodec
import FuzzSupport

/// CBOR (RFC 8949), as SMP bodies arrive from devices and clients.
///
/// - Decoding never traps; a ``DecodingError`` points inside the input.
/// - Whatever decodes re-encodes canonically: the encoding decodes to an equal
///   value and encodes to the same bytes again, and every float takes the
///   shortest of half, single and double that holds it exactly.
/// - The streaming decoder agrees with the whole-buffer one, and equal values
///   hash equally (`CBOR` is `Hashable`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCBOR(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)

    do {
        let value = try CBOR(decoding: input)
        checkCanonical(value)
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "error offset \(error.offset) outside \(input.count) input bytes: \(error)")
        _ = error.description
    }

    // Items one after another, as a reader leaves them.
    var reader = ByteReader(input)
    var items: [CBOR] = []
    while !reader.isAtEnd, items.count < 8 {
        let start = reader.offset
        guard let item = try? CBOR.decode(from: &reader) else { break }
        invariant(reader.offset > start, "decoding an item consumed nothing")
        invariant(
            (try? CBOR(decoding: input[start..<reader.offset])) == item,
            "the bytes a streamed item took do not decode to it alone")
        items.append(item)
    }
    for (a, b) in zip(items, items.dropFirst()) where a == b {
        invariant(a.hashValue == b.hashValue, "\(a) == \(b) but their hashes differ")
    }
    return 0
}

func checkCanonical(_ value: CBOR) {
    let encoded = value.encode()
    let again: CBOR
    do { again = try CBOR(decoding: encoded) } catch {
        fatalError("invariant violated: the encoding of \(value) does not decode: \(error)")
    }
    invariant(again == value, "\(value) re-encodes as \(encoded.hexString), which decodes to \(again)")
    invariant(again.encode() == encoded, "re-encoding \(value) is not stable")
    checkFloats(value)
    _ = value.description
}

/// Preferred serialisation of floats (RFC 8949 §4.1), checked against the
/// standard library's own conversions.
func checkFloats(_ value: CBOR) {
    switch value {
    case .double(let number):
        let size = CBOR.double(number).encode().count
        let expected: Int
        if number.isNaN || Double(Float16(number)) == number {
            expected = 3
        } else if Double(Float(number)) == number {
            expected = 5
        } else {
            expected = 9
        }
        invariant(size == expected, "\(number) (bits \(String(number.bitPattern, radix: 16))) encodes in \(size) bytes, the shortest exact form takes \(expected)")
    case .array(let items): items.forEach(checkFloats)
    case .map(let pairs):
        pairs.forEach {
            checkFloats($0.key)
            checkFloats($0.value)
        }
    case .tagged(_, let item): checkFloats(item)
    default: break
    }
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzCBOR($0, $1) } }
}
