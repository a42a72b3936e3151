import BleotaZlib
import Crypto

/// CRC-32/ISO-HDLC (poly 0x04C11DB7 reflected, init and xorout 0xFFFFFFFF; check
/// value 0xCBF43926), the CRC of zip, Ethernet, Intel HEX tools and most OTA
/// protocols. Computed by zlib, whose slicing implementation is several times
/// faster than a byte table, and incremental so a 64 MiB image never needs to be
/// in memory at once.
public struct CRC32: Sendable, Hashable {
    public private(set) var value: UInt32 = 0

    public init() {}

    public mutating func update(_ bytes: some Collection<UInt8>) {
        value = Zlib.crc32(value, bytes)
    }

    public static func checksum(_ bytes: some Collection<UInt8>) -> UInt32 {
        var crc = CRC32()
        crc.update(bytes)
        return crc.value
    }
}

/// The 16-bit CRCs that BLE OTA protocols use, each defined by the Rocksoft
/// parameters of the CRC catalogue (width 16, polynomial, init, reflection, xorout).
///
/// Written here rather than taken from zlib because zlib has no CRC-16; the table
/// is built once per variant.
public struct CRC16: Sendable, Hashable {
    public struct Variant: Sendable, Hashable {
        public let name: String
        public let polynomial: UInt16
        public let initial: UInt16
        public let reflected: Bool
        public let xorOut: UInt16
        /// The catalogue's check value: the CRC of the ASCII bytes `123456789`.
        public let check: UInt16

        /// CRC-16/CCITT-FALSE (a.k.a. CRC-16/IBM-3740): Nordic's DFU and many vendor protocols.
        public static let ccittFalse = Variant(name: "CRC-16/CCITT-FALSE", polynomial: 0x1021, initial: 0xFFFF, reflected: false, xorOut: 0, check: 0x29B1)
        /// CRC-16/XMODEM: MCUmgr's serial framing.
        public static let xmodem = Variant(name: "CRC-16/XMODEM", polynomial: 0x1021, initial: 0, reflected: false, xorOut: 0, check: 0x31C3)
        /// CRC-16/MODBUS.
        public static let modbus = Variant(name: "CRC-16/MODBUS", polynomial: 0x8005, initial: 0xFFFF, reflected: true, xorOut: 0, check: 0x4B37)
        /// CRC-16/ARC.
        public static let arc = Variant(name: "CRC-16/ARC", polynomial: 0x8005, initial: 0, reflected: true, xorOut: 0, check: 0xBB3D)

        public static let all: [Variant] = [.ccittFalse, .xmodem, .modbus, .arc]
    }

    public let variant: Variant
    private var register: UInt16
    private let table: [UInt16]

    public init(_ variant: Variant) {
        self.variant = variant
        self.register = variant.reflected ? Self.reflect(variant.initial) : variant.initial
        self.table = CRC16Tables.table(for: variant)
    }

    public var value: UInt16 {
        // Reflected variants run the register reflected, so reflect the init back
        // only at the start; the output needs no further reflection.
        register ^ variant.xorOut
    }

    public mutating func update(_ bytes: some Sequence<UInt8>) {
        // Contiguous bytes (arrays, slices) go through one tight pointer loop; this runs
        // twice per data packet, so a generic iterator here costs more than the rest of the engine.
        if bytes.withContiguousStorageIfAvailable({ update(buffer: UnsafeRawBufferPointer($0)) }) != nil { return }
        Array(bytes).withUnsafeBytes { update(buffer: $0) }
    }

    public mutating func update(buffer: UnsafeRawBufferPointer) {
        if !variant.reflected && variant.polynomial == 0x1021 {
            updateSliced(buffer)
            return
        }
        var crc = register
        table.withUnsafeBufferPointer { table in
            if variant.reflected {
                for byte in buffer { crc = (crc >> 8) ^ table[Int((crc ^ UInt16(byte)) & 0xFF)] }
            } else {
                for byte in buffer { crc = (crc << 8) ^ table[Int(((crc >> 8) ^ UInt16(byte)) & 0xFF)] }
            }
        }
        register = crc
    }

    /// Four bytes per step for the 0x1021 family (CCITT-FALSE, XMODEM): the CRC of every
    /// packet and message goes through here, twice per packet. T1…T3 are T0 advanced by
    /// 8, 16 and 24 more zero bits, so the four lookups of a step are independent.
    private mutating func updateSliced(_ buffer: UnsafeRawBufferPointer) {
        var crc = register
        CRC16Tables.normal1021Slices.withUnsafeBufferPointer { t in
            var index = 0
            let count = buffer.count
            while index + 4 <= count {
                let b0 = UInt16(buffer[index]), b1 = UInt16(buffer[index + 1])
                let b2 = Int(buffer[index + 2]), b3 = Int(buffer[index + 3])
                crc = t[768 + Int((crc >> 8) ^ b0)] ^ t[512 + Int((crc & 0xFF) ^ b1)] ^ t[256 + b2] ^ t[b3]
                index += 4
            }
            while index < count {
                crc = (crc << 8) ^ t[Int(((crc >> 8) ^ UInt16(buffer[index])) & 0xFF)]
                index += 1
            }
        }
        register = crc
    }

    public static func checksum(_ bytes: some Sequence<UInt8>, variant: Variant) -> UInt16 {
        var crc = CRC16(variant)
        crc.update(bytes)
        return crc.value
    }

    static func reflect(_ value: UInt16) -> UInt16 {
        var result: UInt16 = 0
        for bit in 0..<16 where value & (1 << bit) != 0 { result |= 1 << (15 - bit) }
        return result
    }
}

enum CRC16Tables {
    static let normal1021 = make(polynomial: 0x1021, reflected: false)
    static let reflected8005 = make(polynomial: 0x8005, reflected: true)
    /// T0…T3 of the slice-by-4 loop, 256 entries each.
    static let normal1021Slices: [UInt16] = {
        var tables = normal1021
        var previous = normal1021
        for _ in 1...3 {
            let next = previous.map { (($0 << 8) & 0xFFFF) ^ normal1021[Int($0 >> 8)] }
            tables += next
            previous = next
        }
        return tables
    }()

    static func table(for variant: CRC16.Variant) -> [UInt16] {
        switch (variant.polynomial, variant.reflected) {
        case (0x1021, false): return normal1021
        case (0x8005, true): return reflected8005
        default: return make(polynomial: variant.polynomial, reflected: variant.reflected)
        }
    }

    static func make(polynomial: UInt16, reflected: Bool) -> [UInt16] {
        let poly = reflected ? CRC16.reflect(polynomial) : polynomial
        return (0..<256).map { index -> UInt16 in
            if reflected {
                var crc = UInt16(index)
                for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ poly : crc >> 1 }
                return crc
            } else {
                var crc = UInt16(index) << 8
                for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ poly : crc << 1 }
                return crc
            }
        }
    }
}

/// Streaming SHA-256 (swift-crypto), for image identity and verification.
public struct SHA256Digest {
    private var hasher = Crypto.SHA256()

    public init() {}

    public mutating func update(_ bytes: some Collection<UInt8>) {
        if let done = bytes.withContiguousStorageIfAvailable({ hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }) {
            _ = done
        } else {
            hasher.update(data: Array(bytes))
        }
    }

    public func finalize() -> [UInt8] { Array(hasher.finalize()) }

    public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var digest = SHA256Digest()
        digest.update(bytes)
        return digest.finalize()
    }
}
