/// Protocol Buffers' binary wire format, as far as firmware-update metadata
/// needs it (Nordic's init packet): varints, 32/64-bit fixed fields and
/// length-delimited fields, read field by field with each field's offset kept,
/// so an error names the field and where it is, and a signed sub-message can
/// be checked over exactly the bytes that arrived.
///
/// Why not swift-protobuf: its errors carry neither field nor offset, and a
/// signature check needs the sub-message's original bytes, which a decoded
/// message does not keep. The format itself is small (protobuf.dev's
/// "Encoding" page); the messages it carries are typed elsewhere.
public enum ProtobufWireType: UInt8, Sendable {
    case varint = 0
    case fixed64 = 1
    case lengthDelimited = 2
    case fixed32 = 5
}

/// One field as it stood in the input.
public struct ProtobufField: Sendable, Equatable {
    public var number: UInt32
    public var wireType: ProtobufWireType
    /// Offset of the field's tag in the message's buffer.
    public var offset: Int
    /// Offset of the field's value (after the tag and, for a length-delimited field, the length).
    public var valueOffset: Int
    /// A varint's value, or a fixed field's bits.
    public var integer: UInt64
    /// A length-delimited field's bytes (empty for other wire types).
    public var bytes: ArraySlice<UInt8>
}

/// Reads the fields of one message in order. Every failure is a
/// ``DecodingError`` naming `name` (the message) and the offset of the bad
/// tag, length or value; nothing traps on any input.
public struct ProtobufReader: Sendable {
    private let buffer: [UInt8]
    private var position: Int
    private let end: Int
    private let name: String

    /// Reads `buffer[range]` (the whole buffer by default) as the message `name`.
    /// Offsets in errors count from the start of `buffer`.
    public init(_ buffer: [UInt8], range: Range<Int>? = nil, name: String) {
        self.buffer = buffer
        let range = range ?? buffer.startIndex..<buffer.endIndex
        position = range.lowerBound
        end = range.upperBound
        self.name = name
    }

    /// Reads the field inside `field` (length-delimited) as the message `name`.
    public init(_ buffer: [UInt8], field: ProtobufField, name: String) {
        self.init(buffer, range: field.bytes.startIndex..<field.bytes.endIndex, name: name)
    }

    /// The next field, or nil at the end of the message.
    public mutating func next() throws(DecodingError) -> ProtobufField? {
        guard position < end else { return nil }
        let offset = position
        let tag = try varint("\(name) field tag")
        guard tag >> 3 > 0, tag >> 3 <= 0x1FFF_FFFF else {
            throw DecodingError(field: "\(name) field tag", offset: offset, reason: .invalidValue("field number \(tag >> 3) is outside 1…536870911"))
        }
        guard let wireType = ProtobufWireType(rawValue: UInt8(tag & 7)) else {
            throw DecodingError(
                field: "\(name) field \(tag >> 3)", offset: offset,
                reason: .invalidValue("wire type \(tag & 7) is not one of 0, 1, 2, 5 (groups, 3 and 4, are not used)"))
        }
        let number = UInt32(tag >> 3)
        let label = "\(name) field \(number)"
        var field = ProtobufField(number: number, wireType: wireType, offset: offset, valueOffset: position, integer: 0, bytes: [])
        switch wireType {
        case .varint:
            field.integer = try varint(label)
        case .fixed32, .fixed64:
            let size = wireType == .fixed32 ? 4 : 8
            guard end - position >= size else { throw DecodingError(field: label, offset: position, reason: .truncated(needed: size - (end - position))) }
            for index in 0..<size { field.integer |= UInt64(buffer[position + index]) << (8 * UInt64(index)) }
            position += size
        case .lengthDelimited:
            let lengthOffset = position
            let length = try varint("\(label) length")
            guard length <= UInt64(end - position) else {
                throw DecodingError(
                    field: label, offset: lengthOffset,
                    reason: .truncated(needed: length > UInt64(Int.max / 2) ? Int.max / 2 : Int(length) - (end - position)))
            }
            field.valueOffset = position
            field.bytes = buffer[position..<position + Int(length)]
            position += Int(length)
        }
        return field
    }

    private mutating func varint(_ label: String) throws(DecodingError) -> UInt64 {
        try Self.varint(in: buffer[...], at: &position, end: end, label)
    }

    /// A base-128 varint at `position`: at most 10 bytes, the tenth holding only the 64th bit.
    static func varint(in buffer: ArraySlice<UInt8>, at position: inout Int, end: Int, _ label: String) throws(DecodingError) -> UInt64 {
        let start = position
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard position < end else { throw DecodingError(field: label, offset: start, reason: .truncated(needed: 1)) }
            let byte = buffer[position]
            position += 1
            if shift == 63 && byte > 1 {
                throw DecodingError(field: label, offset: start, reason: .invalidValue("varint longer than 64 bits"))
            }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
    }
}

extension ProtobufField {
    /// The field as a `uint32`, or an error naming it when it is not a varint or does not fit.
    public func uint32(_ label: String) throws(DecodingError) -> UInt32 {
        guard wireType == .varint else { throw mismatch(label, "a varint") }
        guard integer <= UInt64(UInt32.max) else {
            throw DecodingError(field: label, offset: valueOffset, reason: .invalidValue("\(integer) does not fit 32 bits"))
        }
        return UInt32(integer)
    }

    /// The field as a `bool` (any varint; non-zero is true, as protobuf reads it).
    public func bool(_ label: String) throws(DecodingError) -> Bool {
        guard wireType == .varint else { throw mismatch(label, "a varint") }
        return integer != 0
    }

    /// The field's bytes, or an error when it is not length-delimited.
    public func data(_ label: String) throws(DecodingError) -> [UInt8] {
        guard wireType == .lengthDelimited else { throw mismatch(label, "length-delimited") }
        return Array(bytes)
    }

    /// A repeated `uint32`: this field's one value, or all of a packed run.
    public func packedUInt32(_ label: String) throws(DecodingError) -> [UInt32] {
        switch wireType {
        case .varint: return [try uint32(label)]
        case .lengthDelimited:
            var values: [UInt32] = []
            var position = bytes.startIndex
            while position < bytes.endIndex {
                let offset = position
                let value = try ProtobufReader.varint(in: bytes, at: &position, end: bytes.endIndex, label)
                guard value <= UInt64(UInt32.max) else {
                    throw DecodingError(field: label, offset: offset, reason: .invalidValue("\(value) does not fit 32 bits"))
                }
                values.append(UInt32(value))
            }
            return values
        default: throw mismatch(label, "a varint or a packed run of varints")
        }
    }

    private func mismatch(_ label: String, _ expected: String) -> DecodingError {
        DecodingError(field: label, offset: offset, reason: .invalidValue("wire type \(wireType.rawValue), expected \(expected)"))
    }
}

/// Writes fields in the order given: the canonical encoding protobuf's own
/// serializers produce when fields are written in field-number order.
public struct ProtobufWriter: Sendable {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func varint(_ number: UInt32, _ value: UInt64) {
        tag(number, .varint)
        Self.appendVarint(value, to: &bytes)
    }

    public mutating func bool(_ number: UInt32, _ value: Bool) { varint(number, value ? 1 : 0) }

    public mutating func data(_ number: UInt32, _ value: [UInt8]) {
        tag(number, .lengthDelimited)
        Self.appendVarint(UInt64(value.count), to: &bytes)
        bytes += value
    }

    /// A packed repeated varint field (nothing at all when `values` is empty).
    public mutating func packed(_ number: UInt32, _ values: [UInt64]) {
        guard !values.isEmpty else { return }
        var run: [UInt8] = []
        for value in values { Self.appendVarint(value, to: &run) }
        data(number, run)
    }

    private mutating func tag(_ number: UInt32, _ type: ProtobufWireType) {
        Self.appendVarint(UInt64(number) << 3 | UInt64(type.rawValue), to: &bytes)
    }

    static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }
}
