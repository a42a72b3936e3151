import BleotaCodec

/// One message of a described protocol as a byte template: literal bytes,
/// integers that carry a variable (the image's size, a packet's index) or must
/// hold a value, the data payload, padding, and checksums over what precedes
/// them. The same template encodes what a host sends and decodes what a device
/// receives (capturing the variables), so both halves agree by construction.
public struct MessageTemplate: Sendable, Hashable {
    public var name: String
    /// The characteristic it travels on, as a channel number.
    public var channel: UInt8
    public var fields: [Field]

    public enum Field: Sendable, Hashable {
        /// Bytes that must be exactly these.
        case bytes([UInt8])
        case integer(Integer)
        /// The image bytes of a data packet: whatever the other fields leave.
        case payload
        case checksum(Checksum)
        /// Bytes of `fill` up to a total length of `length` (a fixed-size command).
        case padTo(length: Int, fill: UInt8)
    }

    /// An unsigned integer of 1 to 8 bytes.
    public struct Integer: Sendable, Hashable {
        public var width: Int
        public var bigEndian: Bool
        public var value: Value
        /// Sent as its bitwise complement (a check copy, as Telink's end command has).
        public var inverted: Bool

        var mask: UInt64 { width >= 8 ? .max : (1 << (UInt64(width) * 8)) - 1 }
    }

    public enum Value: Sendable, Hashable {
        /// A fixed value: a command code.
        case literal(UInt64)
        /// A named value: set by the sender, captured by the receiver.
        case variable(String)
    }

    public struct Checksum: Sendable, Hashable {
        public enum Kind: Sendable, Hashable {
            case crc16(CRC16.Variant)
            /// CRC-32/ISO-HDLC.
            case crc32
            /// The sum of the bytes, modulo 256.
            case sum8
            /// The exclusive or of the bytes.
            case xor8
        }
        public var kind: Kind
        /// Leading bytes of the message it does not cover.
        public var skip: Int
        public var bigEndian: Bool

        public var width: Int {
            switch kind {
            case .crc16: 2
            case .crc32: 4
            case .sum8, .xor8: 1
            }
        }

        func compute(_ bytes: ArraySlice<UInt8>) -> UInt64 {
            let covered = bytes.dropFirst(skip)
            switch kind {
            case .crc16(let variant):
                var crc = CRC16(variant)
                crc.update(covered)
                return UInt64(crc.value)
            case .crc32: return UInt64(CRC32.checksum(covered))
            case .sum8: return UInt64(covered.reduce(UInt8(0), &+))
            case .xor8: return UInt64(covered.reduce(UInt8(0), ^))
            }
        }
    }

    /// The variables the template carries, in order.
    public var variables: [String] {
        fields.compactMap { field in
            if case .integer(let integer) = field, case .variable(let name) = integer.value { return name }
            return nil
        }
    }

    public var hasPayload: Bool { fields.contains(.payload) }

    /// Bytes of everything but the payload (padding counted at its target length).
    public var overhead: Int {
        var length = 0
        for field in fields {
            switch field {
            case .bytes(let bytes): length += bytes.count
            case .integer(let integer): length += integer.width
            case .payload: break
            case .checksum(let checksum): length += checksum.width
            case .padTo(let target, _): length = max(length, target)
            }
        }
        return length
    }

    /// The message with `variables` filled in and `payload` where the template has it.
    /// A variable the template names but `variables` lacks is sent as 0 (the
    /// description's checks make sure a host never lacks one).
    public func encode(_ variables: [String: UInt64], payload: ArraySlice<UInt8> = []) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(overhead + payload.count)
        for field in fields {
            switch field {
            case .bytes(let literal): bytes += literal
            case .integer(let integer):
                var value: UInt64
                switch integer.value {
                case .literal(let literal): value = literal
                case .variable(let name): value = variables[name] ?? 0
                }
                if integer.inverted { value = ~value }
                Self.append(value & integer.mask, width: integer.width, bigEndian: integer.bigEndian, to: &bytes)
            case .payload: bytes += payload
            case .checksum(let checksum):
                Self.append(checksum.compute(bytes[...]), width: checksum.width, bigEndian: checksum.bigEndian, to: &bytes)
            case .padTo(let length, let fill):
                if bytes.count < length { bytes += repeatElement(fill, count: length - bytes.count) }
            }
        }
        return bytes
    }

    /// What decoding a received message found.
    public enum Decoded: Sendable, Equatable {
        case matched(variables: [String: UInt64], payload: Range<Int>)
        /// Everything matched but a checksum: the variables read are not to be trusted.
        case badChecksum
        /// Not this message.
        case mismatch
    }

    /// Reads `bytes` against the template: literals must match, variables are
    /// captured (a variable that appears twice, once inverted, must agree), the
    /// payload is what the fixed fields leave. Never traps on any input.
    public func decode(_ bytes: ArraySlice<UInt8>) -> Decoded {
        var variables: [String: UInt64] = [:]
        var position = bytes.startIndex
        var payload = position..<position
        var checksumFailed = false
        // Fixed bytes that follow the payload, so its length is known.
        let suffixWidth: Int = {
            guard let at = fields.firstIndex(of: .payload) else { return 0 }
            return fields[(at + 1)...].reduce(0) { sum, field in
                switch field {
                case .bytes(let literal): sum + literal.count
                case .integer(let integer): sum + integer.width
                case .checksum(let checksum): sum + checksum.width
                case .payload, .padTo: sum
                }
            }
        }()
        for field in fields {
            switch field {
            case .bytes(let literal):
                guard bytes.endIndex - position >= literal.count, bytes[position..<position + literal.count].elementsEqual(literal) else { return .mismatch }
                position += literal.count
            case .integer(let integer):
                guard bytes.endIndex - position >= integer.width else { return .mismatch }
                var value = Self.read(bytes[position..<position + integer.width], bigEndian: integer.bigEndian)
                position += integer.width
                if integer.inverted { value = ~value & integer.mask }
                switch integer.value {
                case .literal(let literal):
                    guard value == literal & integer.mask else { return .mismatch }
                case .variable(let name):
                    if let earlier = variables[name], earlier & integer.mask != value { return .mismatch }
                    variables[name] = value
                }
            case .payload:
                let end = bytes.endIndex - suffixWidth
                guard end >= position else { return .mismatch }
                payload = (position - bytes.startIndex)..<(end - bytes.startIndex)
                position = end
            case .checksum(let checksum):
                guard bytes.endIndex - position >= checksum.width else { return .mismatch }
                let found = Self.read(bytes[position..<position + checksum.width], bigEndian: checksum.bigEndian)
                if found != checksum.compute(bytes[bytes.startIndex..<position]) { checksumFailed = true }
                position += checksum.width
            case .padTo(let length, _):
                let target = bytes.startIndex + length
                if target > position {
                    guard bytes.endIndex >= target else { return .mismatch }
                    position = target
                }
            }
        }
        guard position == bytes.endIndex else { return .mismatch }
        return checksumFailed ? .badChecksum : .matched(variables: variables, payload: payload)
    }

    static func append(_ value: UInt64, width: Int, bigEndian: Bool, to bytes: inout [UInt8]) {
        for index in 0..<width {
            let shift = bigEndian ? (width - 1 - index) * 8 : index * 8
            bytes.append(shift < 64 ? UInt8(truncatingIfNeeded: value >> UInt64(shift)) : 0)
        }
    }

    static func read(_ bytes: ArraySlice<UInt8>, bigEndian: Bool) -> UInt64 {
        var value: UInt64 = 0
        for (index, byte) in bytes.enumerated() where index < 8 {
            let shift = bigEndian ? (bytes.count - 1 - index) * 8 : index * 8
            if shift < 64 { value |= UInt64(byte) << UInt64(shift) }
        }
        return value
    }
}
