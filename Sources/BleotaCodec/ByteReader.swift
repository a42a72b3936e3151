import Foundation

/// Byte order of a multi-byte field. BLE (ATT, L2CAP) and most vendor protocols
/// are little-endian; SMP's header and CBOR are big-endian, so every read says which.
public enum Endianness: Sendable {
    case little
    case big
}

/// Why bytes could not be decoded: which field, at which offset, what was wrong.
///
/// Untrusted bytes arrive from radios and files; a parser must throw this rather
/// than trap, and the message must be good enough to debug a capture with.
public struct DecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        /// The input ended `needed` bytes short of the field.
        case truncated(needed: Int)
        /// A field held a value the format does not allow.
        case invalidValue(String)
        /// Bytes remained after a message that must fill its buffer exactly.
        case trailingBytes(Int)
    }

    /// The field being decoded, e.g. `"ATT opcode"` or `"start.size"`.
    public var field: String
    /// Offset into the buffer where the field starts.
    public var offset: Int
    public var reason: Reason

    public init(field: String, offset: Int, reason: Reason) {
        self.field = field
        self.offset = offset
        self.reason = reason
    }

    public var description: String {
        switch reason {
        case .truncated(let needed):
            return "\(field) at offset \(offset): input ends \(needed) byte\(needed == 1 ? "" : "s") too early"
        case .invalidValue(let why):
            return "\(field) at offset \(offset): \(why)"
        case .trailingBytes(let count):
            return "\(field) at offset \(offset): \(count) unexpected trailing byte\(count == 1 ? "" : "s")"
        }
    }
}

/// A cursor over untrusted bytes. Every read checks the length first and throws
/// ``DecodingError`` naming the field; nothing here can trap on short input.
public struct ByteReader: Sendable {
    public let bytes: [UInt8]
    /// Index of the next unread byte.
    public private(set) var offset: Int

    public init(_ bytes: some Sequence<UInt8>) {
        self.bytes = Array(bytes)
        self.offset = 0
    }

    public var remaining: Int { bytes.count - offset }
    public var isAtEnd: Bool { offset >= bytes.count }

    private func require(_ count: Int, _ field: String) throws(DecodingError) {
        guard count >= 0 else {
            throw DecodingError(field: field, offset: offset, reason: .invalidValue("negative length \(count)"))
        }
        guard remaining >= count else {
            throw DecodingError(field: field, offset: offset, reason: .truncated(needed: count - remaining))
        }
    }

    public mutating func readUInt8(_ field: String = "byte") throws(DecodingError) -> UInt8 {
        try require(1, field)
        defer { offset += 1 }
        return bytes[offset]
    }

    /// Reads an unsigned integer of `T`'s width in the given byte order.
    public mutating func read<T: FixedWidthInteger & UnsignedInteger>(
        _ type: T.Type, _ endianness: Endianness = .little, _ field: String = "integer"
    ) throws(DecodingError) -> T {
        let size = MemoryLayout<T>.size
        try require(size, field)
        var value: T = 0
        for index in 0..<size {
            let byte = T(bytes[offset + index])
            switch endianness {
            case .little: value |= byte << (8 * index)
            case .big: value = (value << 8) | byte
            }
        }
        offset += size
        return value
    }

    public mutating func readUInt16(_ endianness: Endianness = .little, _ field: String = "uint16") throws(DecodingError) -> UInt16 {
        try read(UInt16.self, endianness, field)
    }

    public mutating func readUInt32(_ endianness: Endianness = .little, _ field: String = "uint32") throws(DecodingError) -> UInt32 {
        try read(UInt32.self, endianness, field)
    }

    public mutating func readUInt64(_ endianness: Endianness = .little, _ field: String = "uint64") throws(DecodingError) -> UInt64 {
        try read(UInt64.self, endianness, field)
    }

    /// Reads a 24-bit unsigned integer (BLE uses them for counters and lengths).
    public mutating func readUInt24(_ endianness: Endianness = .little, _ field: String = "uint24") throws(DecodingError) -> UInt32 {
        try require(3, field)
        let b = bytes[offset..<offset + 3].map(UInt32.init)
        offset += 3
        return endianness == .little ? b[0] | b[1] << 8 | b[2] << 16 : b[0] << 16 | b[1] << 8 | b[2]
    }

    public mutating func readBytes(_ count: Int, _ field: String = "bytes") throws(DecodingError) -> [UInt8] {
        try require(count, field)
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    /// Everything not read yet.
    public mutating func readRemaining() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }

    public mutating func skip(_ count: Int, _ field: String = "padding") throws(DecodingError) {
        try require(count, field)
        offset += count
    }

    public func peekUInt8() -> UInt8? { isAtEnd ? nil : bytes[offset] }

    /// Throws unless every byte has been read (for messages of exact length).
    public func expectEnd(_ field: @autoclosure () -> String = "message") throws(DecodingError) {
        guard remaining == 0 else {
            throw DecodingError(field: field(), offset: offset, reason: .trailingBytes(remaining))
        }
    }

    /// A ``DecodingError`` for a bad value at the current offset, for callers' own checks.
    public func invalid(_ field: String, _ why: String, at offset: Int? = nil) -> DecodingError {
        DecodingError(field: field, offset: offset ?? self.offset, reason: .invalidValue(why))
    }
}

/// Appends fields in an explicit byte order.
public struct ByteWriter: Sendable {
    public private(set) var bytes: [UInt8]

    public init(capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public var count: Int { bytes.count }

    public mutating func write(_ value: UInt8) { bytes.append(value) }

    public mutating func write<T: FixedWidthInteger>(_ value: T, _ endianness: Endianness = .little) {
        let size = MemoryLayout<T>.size
        for index in 0..<size {
            let shift = endianness == .little ? 8 * index : 8 * (size - 1 - index)
            bytes.append(UInt8(truncatingIfNeeded: value >> shift))
        }
    }

    public mutating func writeUInt24(_ value: UInt32, _ endianness: Endianness = .little) {
        let parts = [UInt8(truncatingIfNeeded: value), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value >> 16)]
        bytes.append(contentsOf: endianness == .little ? parts : parts.reversed())
    }

    public mutating func write(contentsOf data: some Sequence<UInt8>) { bytes.append(contentsOf: data) }

    /// Overwrites bytes already written (for length fields known only at the end).
    public mutating func patch<T: FixedWidthInteger>(_ value: T, at offset: Int, _ endianness: Endianness = .little) {
        var scratch = ByteWriter()
        scratch.write(value, endianness)
        bytes.replaceSubrange(offset..<offset + scratch.count, with: scratch.bytes)
    }
}

/// A wire message that can write itself.
public protocol WireEncodable: Sendable {
    func encode(into writer: inout ByteWriter)
}

extension WireEncodable {
    public func encode() -> [UInt8] {
        var writer = ByteWriter()
        encode(into: &writer)
        return writer.bytes
    }
}

/// A wire message that can be read back from untrusted bytes.
public protocol WireDecodable: Sendable {
    init(decoding reader: inout ByteReader) throws(DecodingError)
}

extension WireDecodable {
    /// Decodes a message that must fill `bytes` exactly.
    public init(decoding bytes: some Sequence<UInt8>) throws(DecodingError) {
        var reader = ByteReader(bytes)
        try self.init(decoding: &reader)
        try reader.expectEnd(String(describing: Self.self))
    }
}

public typealias WireCodable = WireEncodable & WireDecodable

extension Sequence<UInt8> {
    /// Lowercase hex without separators, e.g. `"0a1b"`.
    public var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    /// Parses hex (spaces, colons and `0x` prefixes ignored); nil if malformed.
    public init?(hex: String) {
        var cleaned = hex.replacingOccurrences(of: "0x", with: "")
        cleaned.removeAll { $0 == " " || $0 == ":" || $0 == "\n" || $0 == "_" }
        guard cleaned.count % 2 == 0 else { return nil }
        var result: [UInt8] = []
        result.reserveCapacity(cleaned.count / 2)
        var iterator = cleaned.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let h = high.hexDigitValue, let l = low.hexDigitValue else { return nil }
            result.append(UInt8(h << 4 | l))
        }
        self = result
    }
}

/// A 32-bit value as `0x` and eight lowercase hex digits (addresses, CRCs).
public func hex32(_ value: UInt32) -> String {
    let digits = String(value, radix: 16)
    return "0x" + String(repeating: "0", count: max(0, 8 - digits.count)) + digits
}
