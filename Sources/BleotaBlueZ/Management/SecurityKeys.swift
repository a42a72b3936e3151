import BleotaCodec
import BleotaLink

/// An LE Long Term Key as the management interface carries it (`struct
/// mgmt_ltk_info`, 36 bytes): in New Long Term Key events, and in Load Long
/// Term Keys, which gives the kernel the keys of earlier pairings so a link
/// encrypts without pairing again.
///
/// Keys are secrets: ``description`` never shows the value.
public struct LongTermKey: Sendable, Hashable, Codable, CustomStringConvertible {
    /// How the key was made (`MGMT_LTK_*`).
    public enum Kind: UInt8, Sendable, Hashable, Codable {
        case unauthenticatedLegacy = 0x00
        case authenticatedLegacy = 0x01
        case unauthenticatedP256 = 0x02
        case authenticatedP256 = 0x03
        case debugP256 = 0x04

        /// The security level a link encrypted with the key has.
        public var level: SecurityLevel {
            switch self {
            case .unauthenticatedLegacy, .unauthenticatedP256, .debugP256: .medium
            case .authenticatedLegacy: .high
            case .authenticatedP256: .fips
            }
        }

        public var secureConnections: Bool { rawValue >= 0x02 }
    }

    /// The peer's identity address: public, or static random.
    public var peer: ManagementAddress
    public var kind: Kind
    /// For legacy keys: true for the key the peer distributed (used when this side is central),
    /// false for the one this side distributed (used as peripheral).
    public var central: Bool
    public var encryptionKeySize: UInt8
    public var ediv: UInt16
    public var rand: UInt64
    /// The key, least significant byte first.
    public var value: [UInt8]

    public init(peer: ManagementAddress, kind: Kind, central: Bool, encryptionKeySize: UInt8, ediv: UInt16, rand: UInt64, value: [UInt8]) {
        self.peer = peer
        self.kind = kind
        self.central = central
        self.encryptionKeySize = encryptionKeySize
        self.ediv = ediv
        self.rand = rand
        self.value = value
    }

    public static let size = 36

    public func encode(into writer: inout ByteWriter) {
        peer.encode(into: &writer)
        writer.write(kind.rawValue)
        writer.write(UInt8(central ? 1 : 0))
        writer.write(encryptionKeySize)
        writer.write(ediv)
        writer.write(rand)
        writer.write(contentsOf: (value + [UInt8](repeating: 0, count: 16)).prefix(16))
    }

    public init(decoding reader: inout ByteReader) throws(DecodingError) {
        peer = try ManagementAddress(decoding: &reader, "key address")
        let start = reader.offset
        let raw = try reader.readUInt8("key type")
        guard let kind = Kind(rawValue: raw) else { throw reader.invalid("key type", "\(raw) is not a key type (0…4)", at: start) }
        self.kind = kind
        let centralOffset = reader.offset
        let centralByte = try reader.readUInt8("key central")
        guard centralByte <= 1 else { throw reader.invalid("key central", "\(centralByte) is not a boolean (0 or 1)", at: centralOffset) }
        central = centralByte == 1
        encryptionKeySize = try reader.readUInt8("key encryption size")
        ediv = try reader.readUInt16(.little, "key ediv")
        rand = try reader.readUInt64(.little, "key rand")
        value = try reader.readBytes(16, "key value")
    }

    public var description: String { "\(kind) key for \(peer), \(encryptionKeySize)-byte (value not shown)" }
}

/// A peer's Identity Resolving Key (`struct mgmt_irk_info`, 23 bytes): with it
/// the resolvable private addresses a device advertises from can be told to be
/// that device's (Core v5.4, Vol 3, Part H, §2.4.2.1). Never shown in output.
public struct IdentityResolvingKey: Sendable, Hashable, Codable, CustomStringConvertible {
    public var identity: ManagementAddress
    /// The key, least significant byte first.
    public var value: [UInt8]

    public init(identity: ManagementAddress, value: [UInt8]) {
        self.identity = identity
        self.value = value
    }

    public static let size = 23

    public func encode(into writer: inout ByteWriter) {
        identity.encode(into: &writer)
        writer.write(contentsOf: (value + [UInt8](repeating: 0, count: 16)).prefix(16))
    }

    public init(decoding reader: inout ByteReader) throws(DecodingError) {
        identity = try ManagementAddress(decoding: &reader, "identity address")
        value = try reader.readBytes(16, "identity resolving key")
    }

    public var description: String { "identity resolving key of \(identity) (value not shown)" }
}
