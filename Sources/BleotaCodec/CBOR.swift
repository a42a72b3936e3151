/// A CBOR data item (RFC 8949), as MCUmgr's SMP bodies use them.
///
/// Decoding accepts everything a peer may legitimately send — definite and
/// indefinite lengths, tags, floats, simple values — and refuses malformed or
/// hostile input (truncation, lengths beyond the input, nesting deeper than
/// ``CBOR/maximumDepth``, a stray break) with a ``DecodingError`` instead of
/// trapping or allocating what the input merely claims. Encoding always uses
/// the shortest (preferred) form and definite lengths, which is what Zephyr's
/// zcbor and Python's cbor2 produce, so encoded bytes compare equal to theirs.
/// Maps keep their order: SMP servers and clients are order-insensitive, but
/// reproducible bytes make tests exact.
public indirect enum CBOR: Sendable, Hashable {
    case unsigned(UInt64)
    /// The negative integer −1 − n.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBOR])
    case map([(key: CBOR, value: CBOR)])
    case tagged(UInt64, CBOR)
    case bool(Bool)
    case null
    case undefined
    case simple(UInt8)
    case double(Double)

    public static let maximumDepth = 32

    // MARK: Convenience

    public init(_ value: Int) {
        self = value >= 0 ? .unsigned(UInt64(value)) : .negative(UInt64(-(value + 1)))
    }

    /// A map with text keys, in the order given.
    public static func textMap(_ pairs: KeyValuePairs<String, CBOR>) -> CBOR {
        .map(pairs.map { (key: CBOR.text($0.key), value: $0.value) })
    }

    public subscript(key: String) -> CBOR? {
        guard case .map(let pairs) = self else { return nil }
        return pairs.first { $0.key == .text(key) }?.value
    }

    /// The value as an `Int` when it is an integer that fits.
    public var int: Int? {
        switch self {
        case .unsigned(let value): value <= UInt64(Int.max) ? Int(value) : nil
        case .negative(let value): value <= UInt64(Int.max) ? -Int(value) - 1 : nil
        default: nil
        }
    }

    public var uint64: UInt64? { if case .unsigned(let value) = self { value } else { nil } }
    public var string: String? { if case .text(let value) = self { value } else { nil } }
    public var byteString: [UInt8]? { if case .bytes(let value) = self { value } else { nil } }
    public var boolean: Bool? { if case .bool(let value) = self { value } else { nil } }
    public var elements: [CBOR]? { if case .array(let value) = self { value } else { nil } }
    public var pairs: [(key: CBOR, value: CBOR)]? { if case .map(let value) = self { value } else { nil } }

    public static func == (lhs: CBOR, rhs: CBOR) -> Bool {
        switch (lhs, rhs) {
        case (.unsigned(let a), .unsigned(let b)), (.negative(let a), .negative(let b)): a == b
        case (.bytes(let a), .bytes(let b)): a == b
        case (.text(let a), .text(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.map(let a), .map(let b)): a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        case (.tagged(let t, let a), .tagged(let u, let b)): t == u && a == b
        case (.bool(let a), .bool(let b)): a == b
        case (.null, .null), (.undefined, .undefined): true
        case (.simple(let a), .simple(let b)): a == b
        // Bit for bit, as they encode and hash: 0.0 and -0.0 are distinct items (all NaNs encode alike).
        case (.double(let a), .double(let b)): a.bitPattern == b.bitPattern || (a.isNaN && b.isNaN)
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(encode())
    }
}

// MARK: - Encoding

extension CBOR {
    public func encode() -> [UInt8] {
        var writer = ByteWriter()
        encode(into: &writer)
        return writer.bytes
    }

    public func encode(into writer: inout ByteWriter) {
        switch self {
        case .unsigned(let value): Self.head(0, value, &writer)
        case .negative(let value): Self.head(1, value, &writer)
        case .bytes(let bytes):
            Self.head(2, UInt64(bytes.count), &writer)
            writer.write(contentsOf: bytes)
        case .text(let text):
            Self.head(3, UInt64(text.utf8.count), &writer)
            writer.write(contentsOf: text.utf8)
        case .array(let items):
            Self.head(4, UInt64(items.count), &writer)
            for item in items { item.encode(into: &writer) }
        case .map(let pairs):
            Self.head(5, UInt64(pairs.count), &writer)
            for pair in pairs {
                pair.key.encode(into: &writer)
                pair.value.encode(into: &writer)
            }
        case .tagged(let tag, let item):
            Self.head(6, tag, &writer)
            item.encode(into: &writer)
        case .bool(let value): writer.write(UInt8(value ? 0xF5 : 0xF4))
        case .null: writer.write(UInt8(0xF6))
        case .undefined: writer.write(UInt8(0xF7))
        case .simple(let value):
            if value < 24 {
                writer.write(0xE0 | value)
            } else {
                writer.write(UInt8(0xF8))
                writer.write(value)
            }
        case .double(let value): Self.encodeFloat(value, &writer)
        }
    }

    static func head(_ major: UInt8, _ value: UInt64, _ writer: inout ByteWriter) {
        let type = major << 5
        switch value {
        case 0..<24: writer.write(type | UInt8(value))
        case 24...0xFF:
            writer.write(type | 24)
            writer.write(UInt8(value))
        case 0x100...0xFFFF:
            writer.write(type | 25)
            writer.write(UInt16(value), .big)
        case 0x1_0000...0xFFFF_FFFF:
            writer.write(type | 26)
            writer.write(UInt32(value), .big)
        default:
            writer.write(type | 27)
            writer.write(value, .big)
        }
    }

    /// The shortest float that holds the value exactly (half, single, double), as cbor2 does.
    static func encodeFloat(_ value: Double, _ writer: inout ByteWriter) {
        if value.isNaN {
            writer.write(UInt8(0xF9))
            writer.write(UInt16(0x7E00), .big)
            return
        }
        let single = Float(value)
        if Double(single) == value {
            #if arch(arm64)
            let half = Float16(single)
            if Float(half) == single {
                writer.write(UInt8(0xF9))
                writer.write(half.bitPattern, .big)
                return
            }
            #else
            if let half = halfBits(single) {
                writer.write(UInt8(0xF9))
                writer.write(half, .big)
                return
            }
            #endif
            writer.write(UInt8(0xFA))
            writer.write(single.bitPattern, .big)
            return
        }
        writer.write(UInt8(0xFB))
        writer.write(value.bitPattern, .big)
    }

    /// IEEE 754 half-precision bits for `value` when it converts exactly, else nil.
    static func halfBits(_ value: Float) -> UInt16? {
        let bits = value.bitPattern
        let sign = UInt16((bits >> 16) & 0x8000)
        let exponent = Int((bits >> 23) & 0xFF)
        let mantissa = bits & 0x7F_FFFF
        if exponent == 0xFF { return sign | 0x7C00 | UInt16(mantissa >> 13) }  // infinity (NaN handled earlier)
        if exponent == 0 && mantissa == 0 { return sign }
        let unbiased = exponent - 127
        if unbiased >= -14 && unbiased <= 15 {
            guard mantissa & 0x1FFF == 0 else { return nil }
            return sign | UInt16(unbiased + 15) << 10 | UInt16(mantissa >> 13)
        }
        if unbiased >= -24 && unbiased < -14 {
            // Subnormal half: the implicit bit joins the mantissa.
            let full = mantissa | 0x80_0000
            let shift = UInt32(-14 - unbiased + 13)
            guard full & ((1 << shift) - 1) == 0 else { return nil }
            return sign | UInt16(full >> shift)
        }
        return nil
    }

    static func halfToDouble(_ bits: UInt16) -> Double {
        let sign: Double = bits & 0x8000 != 0 ? -1 : 1
        let exponent = Int((bits >> 10) & 0x1F)
        let mantissa = Double(bits & 0x3FF)
        switch exponent {
        case 0: return sign * mantissa * 0x1p-24
        case 31: return mantissa == 0 ? sign * .infinity : .nan
        default: return sign * (1 + mantissa / 1024) * Double(sign: .plus, exponent: exponent - 15, significand: 1)
        }
    }
}

// MARK: - Decoding

extension CBOR {
    /// Decodes exactly one item filling `bytes`.
    public init(decoding bytes: some Sequence<UInt8>) throws(DecodingError) {
        var reader = ByteReader(bytes)
        self = try CBOR.decode(from: &reader, depth: 0)
        try reader.expectEnd("CBOR item")
    }

    /// Decodes one item from `reader`, leaving anything after it.
    public static func decode(from reader: inout ByteReader) throws(DecodingError) -> CBOR {
        try decode(from: &reader, depth: 0)
    }

    private static let breakMarker: UInt8 = 0xFF

    private static func decode(from reader: inout ByteReader, depth: Int) throws(DecodingError) -> CBOR {
        guard depth < maximumDepth else { throw reader.invalid("CBOR", "nested deeper than \(maximumDepth) levels") }
        let start = reader.offset
        let initial = try reader.readUInt8("CBOR initial byte")
        let major = initial >> 5
        let info = initial & 0x1F
        if major == 7 { return try simpleOrFloat(info, &reader, at: start) }
        if info == 31 {
            return try indefinite(major, &reader, depth: depth, at: start)
        }
        let argument = try Self.argument(info, &reader, at: start)
        switch major {
        case 0: return .unsigned(argument)
        case 1: return .negative(argument)
        case 2: return .bytes(try reader.readBytes(try length(argument, reader, at: start), "CBOR byte string"))
        case 3:
            let raw = try reader.readBytes(try length(argument, reader, at: start), "CBOR text string")
            guard let text = String(validating: raw, as: UTF8.self) else { throw reader.invalid("CBOR text string", "is not UTF-8", at: start) }
            return .text(text)
        case 4:
            // Each item takes at least one byte: a count beyond what is left is a lie.
            let count = try length(argument, reader, at: start)
            var items: [CBOR] = []
            items.reserveCapacity(count)
            for _ in 0..<count { items.append(try decode(from: &reader, depth: depth + 1)) }
            return .array(items)
        case 5:
            let count = try length(argument, reader, at: start)
            guard count <= reader.remaining / 2 else { throw reader.invalid("CBOR map", "claims \(count) pairs but only \(reader.remaining) bytes follow", at: start) }
            var pairs: [(key: CBOR, value: CBOR)] = []
            pairs.reserveCapacity(count)
            for _ in 0..<count {
                let key = try decode(from: &reader, depth: depth + 1)
                let value = try decode(from: &reader, depth: depth + 1)
                pairs.append((key, value))
            }
            return .map(pairs)
        default:  // 6
            return .tagged(argument, try decode(from: &reader, depth: depth + 1))
        }
    }

    private static func argument(_ info: UInt8, _ reader: inout ByteReader, at start: Int) throws(DecodingError) -> UInt64 {
        switch info {
        case 0..<24: return UInt64(info)
        case 24: return UInt64(try reader.readUInt8("CBOR argument"))
        case 25: return UInt64(try reader.readUInt16(.big, "CBOR argument"))
        case 26: return UInt64(try reader.readUInt32(.big, "CBOR argument"))
        case 27: return try reader.readUInt64(.big, "CBOR argument")
        default: throw reader.invalid("CBOR initial byte", "additional information \(info) is reserved", at: start)
        }
    }

    /// A length that must fit in what is left of the input.
    private static func length(_ argument: UInt64, _ reader: ByteReader, at start: Int) throws(DecodingError) -> Int {
        guard argument <= UInt64(reader.remaining) else {
            throw reader.invalid("CBOR length", "claims \(argument) but only \(reader.remaining) bytes follow", at: start)
        }
        return Int(argument)
    }

    private static func indefinite(_ major: UInt8, _ reader: inout ByteReader, depth: Int, at start: Int) throws(DecodingError) -> CBOR {
        switch major {
        case 2, 3:
            // Chunks of the same major type with definite lengths, then a break.
            var joined: [UInt8] = []
            while true {
                guard let next = reader.peekUInt8() else { throw reader.invalid("CBOR string", "indefinite string has no break", at: start) }
                if next == breakMarker {
                    _ = try reader.readUInt8()
                    break
                }
                let chunk = try decode(from: &reader, depth: depth + 1)
                switch (major, chunk) {
                case (2, .bytes(let bytes)): joined += bytes
                case (3, .text(let text)): joined += Array(text.utf8)
                default: throw reader.invalid("CBOR string", "an indefinite string's chunk has another type", at: start)
                }
            }
            if major == 2 { return .bytes(joined) }
            guard let text = String(validating: joined, as: UTF8.self) else { throw reader.invalid("CBOR text string", "is not UTF-8", at: start) }
            return .text(text)
        case 4:
            var items: [CBOR] = []
            while true {
                guard let next = reader.peekUInt8() else { throw reader.invalid("CBOR array", "indefinite array has no break", at: start) }
                if next == breakMarker {
                    _ = try reader.readUInt8()
                    return .array(items)
                }
                items.append(try decode(from: &reader, depth: depth + 1))
            }
        case 5:
            var pairs: [(key: CBOR, value: CBOR)] = []
            while true {
                guard let next = reader.peekUInt8() else { throw reader.invalid("CBOR map", "indefinite map has no break", at: start) }
                if next == breakMarker {
                    _ = try reader.readUInt8()
                    return .map(pairs)
                }
                let key = try decode(from: &reader, depth: depth + 1)
                guard reader.peekUInt8() != breakMarker else { throw reader.invalid("CBOR map", "a key has no value", at: start) }
                pairs.append((key, try decode(from: &reader, depth: depth + 1)))
            }
        default:
            throw reader.invalid("CBOR initial byte", "major type \(major) cannot have an indefinite length", at: start)
        }
    }

    private static func simpleOrFloat(_ info: UInt8, _ reader: inout ByteReader, at start: Int) throws(DecodingError) -> CBOR {
        switch info {
        case 20: return .bool(false)
        case 21: return .bool(true)
        case 22: return .null
        case 23: return .undefined
        case 0..<20: return .simple(info)
        case 24:
            let value = try reader.readUInt8("CBOR simple value")
            guard value >= 32 else { throw reader.invalid("CBOR simple value", "\(value) must use the one-byte form", at: start) }
            return .simple(value)
        case 25: return .double(halfToDouble(try reader.readUInt16(.big, "CBOR half float")))
        case 26: return .double(Double(Float(bitPattern: try reader.readUInt32(.big, "CBOR float"))))
        case 27: return .double(Double(bitPattern: try reader.readUInt64(.big, "CBOR double")))
        case 31: throw reader.invalid("CBOR", "break outside an indefinite-length item", at: start)
        default: throw reader.invalid("CBOR initial byte", "additional information \(info) is reserved", at: start)
        }
    }
}

extension CBOR: CustomStringConvertible {
    /// CBOR diagnostic notation (RFC 8949 §8), for messages and logs.
    public var description: String {
        switch self {
        case .unsigned(let value): String(value)
        case .negative(let value): value == .max ? "-18446744073709551616" : "-\(value + 1)"
        case .bytes(let bytes): "h'" + bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() + "'"
        case .text(let text): "\"" + text.flatMap { $0 == "\"" ? ["\\", "\""] : [$0] } + "\""
        case .array(let items): "[" + items.map(\.description).joined(separator: ", ") + "]"
        case .map(let pairs): "{" + pairs.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        case .tagged(let tag, let item): "\(tag)(\(item))"
        case .bool(let value): value ? "true" : "false"
        case .null: "null"
        case .undefined: "undefined"
        case .simple(let value): "simple(\(value))"
        case .double(let value): String(value)
        }
    }
}
