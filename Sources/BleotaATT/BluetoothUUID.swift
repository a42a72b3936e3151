import BleotaCodec

/// A Bluetooth UUID: 16-bit (an alias inside the Bluetooth Base UUID), or full
/// 128-bit. Core v5.4, Vol 3, Part B, §2.5.1.
public enum BluetoothUUID: Sendable, Hashable, CustomStringConvertible {
    case bit16(UInt16)
    case bit128([UInt8])  // big-endian, as written: 0000xxxx-0000-1000-8000-00805F9B34FB

    /// 00000000-0000-1000-8000-00805F9B34FB
    static let base: [UInt8] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]

    public static let primaryService = BluetoothUUID.bit16(0x2800)
    public static let secondaryService = BluetoothUUID.bit16(0x2801)
    public static let include = BluetoothUUID.bit16(0x2802)
    public static let characteristic = BluetoothUUID.bit16(0x2803)
    public static let clientCharacteristicConfiguration = BluetoothUUID.bit16(0x2902)
    public static let deviceName = BluetoothUUID.bit16(0x2A00)

    /// Parses `180A`, `0x180A` or `6E400001-B5A3-F393-E0A9-E50E24DCCA9E`.
    public init?(_ text: String) {
        var hex = text.lowercased()
        if hex.hasPrefix("0x") { hex.removeFirst(2) }
        hex.removeAll { $0 == "-" }
        guard let bytes = [UInt8](hex: hex) else { return nil }
        switch bytes.count {
        case 2: self = .bit16(UInt16(bytes[0]) << 8 | UInt16(bytes[1]))
        case 16: self.init(bytes128: bytes)
        default: return nil
        }
    }

    /// A 128-bit UUID, shortened to 16 bits when it lies in the base range.
    public init(bytes128 bytes: [UInt8]) {
        if bytes[0] == 0, bytes[1] == 0, Array(bytes[4...]) == Array(Self.base[4...]) {
            self = .bit16(UInt16(bytes[2]) << 8 | UInt16(bytes[3]))
        } else {
            self = .bit128(bytes)
        }
    }

    /// The full 128-bit form, big-endian.
    public var bytes128: [UInt8] {
        switch self {
        case .bit16(let short):
            var bytes = Self.base
            bytes[2] = UInt8(short >> 8)
            bytes[3] = UInt8(short & 0xFF)
            return bytes
        case .bit128(let bytes): return bytes
        }
    }

    /// Bytes on the wire: little-endian, 2 or 16 of them.
    public var littleEndian: [UInt8] {
        switch self {
        case .bit16(let short): [UInt8(short & 0xFF), UInt8(short >> 8)]
        case .bit128(let bytes): bytes.reversed()
        }
    }

    public var wireSize: Int { littleEndian.count }

    /// Reads a 2- or 16-byte little-endian UUID.
    public init(decoding reader: inout ByteReader, size: Int, field: String) throws(DecodingError) {
        let at = reader.offset
        switch size {
        case 2: self = .bit16(try reader.readUInt16(.little, field))
        case 16: self = .bit128(try reader.readBytes(16, field).reversed())
        default: throw reader.invalid(field, "a UUID is 2 or 16 bytes, not \(size)", at: at)
        }
    }

    public var description: String {
        switch self {
        case .bit16(let short):
            let digits = String(short, radix: 16, uppercase: true)
            return String(repeating: "0", count: 4 - digits.count) + digits
        case .bit128(let bytes):
            let hex = bytes.hexString.uppercased()
            let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
            return parts.joined(separator: "-")
        }
    }

    public static func == (lhs: BluetoothUUID, rhs: BluetoothUUID) -> Bool { lhs.bytes128 == rhs.bytes128 }
    public func hash(into hasher: inout Hasher) { hasher.combine(bytes128) }
}
