import BleotaCodec

/// One packet of the kernel's Bluetooth Management interface (BlueZ
/// `doc/mgmt-api.txt`, "Packet Structures"): a command to the kernel or an
/// event from it, on an `HCI_CHANNEL_CONTROL` socket, one packet per datagram.
///
/// `[opcode u16][controller index u16][parameter length u16][parameters]`, all little-endian.
public struct ManagementPacket: Sendable, Hashable {
    /// A command code (to the kernel) or an event code (from it).
    public var code: UInt16
    /// The controller (`hciN` is index N), or ``noController`` for commands about none.
    public var index: UInt16
    public var parameters: [UInt8]

    public static let noController: UInt16 = 0xFFFF
    public static let headerSize = 6

    public init(code: UInt16, index: UInt16, parameters: [UInt8] = []) {
        self.code = code
        self.index = index
        self.parameters = parameters
    }

    public func encode() -> [UInt8] {
        var writer = ByteWriter(capacity: Self.headerSize + parameters.count)
        writer.write(code)
        writer.write(index)
        writer.write(UInt16(parameters.count))
        writer.write(contentsOf: parameters)
        return writer.bytes
    }

    /// Decodes one datagram; the length field must match what follows it.
    public init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        code = try reader.readUInt16(.little, "management code")
        index = try reader.readUInt16(.little, "controller index")
        let length = Int(try reader.readUInt16(.little, "parameter length"))
        parameters = try reader.readBytes(length, "parameters")
        try reader.expectEnd("management packet")
    }
}

/// An LE or BR/EDR device address as the management interface writes it:
/// six bytes least significant first, then the type (0 BR/EDR, 1 LE public, 2 LE random).
public struct ManagementAddress: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Kind: UInt8, Sendable, Hashable, Codable {
        case bredr = 0
        case lePublic = 1
        case leRandom = 2
    }

    public var address: BluetoothAddress
    public var kind: Kind

    public init(_ address: BluetoothAddress, kind: Kind) {
        self.address = address
        self.kind = kind
    }

    /// An LE address of `type`.
    public init(_ address: BluetoothAddress, type: AddressType) {
        self.init(address, kind: type == .public ? .lePublic : .leRandom)
    }

    public static let size = 7

    func encode(into writer: inout ByteWriter) {
        writer.write(contentsOf: address.littleEndian)
        writer.write(kind.rawValue)
    }

    init(decoding reader: inout ByteReader, _ field: String = "address") throws(DecodingError) {
        let bytes = try reader.readBytes(6, field)
        let start = reader.offset
        let raw = try reader.readUInt8("\(field) type")
        guard let kind = Kind(rawValue: raw) else {
            throw reader.invalid("\(field) type", "\(raw) is not 0 (BR/EDR), 1 (LE public) or 2 (LE random)", at: start)
        }
        address = BluetoothAddress(littleEndian: bytes)
        self.kind = kind
    }

    /// The LE address type, nil for BR/EDR.
    public var addressType: AddressType? {
        switch kind {
        case .bredr: nil
        case .lePublic: .public
        case .leRandom: .random
        }
    }

    public var description: String {
        "\(address) (\(kind == .bredr ? "BR/EDR" : kind == .lePublic ? "public" : "random"))"
    }
}

/// A management command's outcome (`doc/mgmt-api.txt`, "Error Codes"); unknown values keep their number.
public struct ManagementStatus: Error, RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let success = ManagementStatus(rawValue: 0x00)
    public static let unknownCommand = ManagementStatus(rawValue: 0x01)
    public static let notConnected = ManagementStatus(rawValue: 0x02)
    public static let failed = ManagementStatus(rawValue: 0x03)
    public static let connectFailed = ManagementStatus(rawValue: 0x04)
    public static let authenticationFailed = ManagementStatus(rawValue: 0x05)
    public static let notPaired = ManagementStatus(rawValue: 0x06)
    public static let noResources = ManagementStatus(rawValue: 0x07)
    public static let timeout = ManagementStatus(rawValue: 0x08)
    public static let alreadyConnected = ManagementStatus(rawValue: 0x09)
    public static let busy = ManagementStatus(rawValue: 0x0A)
    public static let rejected = ManagementStatus(rawValue: 0x0B)
    public static let notSupported = ManagementStatus(rawValue: 0x0C)
    public static let invalidParameters = ManagementStatus(rawValue: 0x0D)
    public static let disconnected = ManagementStatus(rawValue: 0x0E)
    public static let notPowered = ManagementStatus(rawValue: 0x0F)
    public static let cancelled = ManagementStatus(rawValue: 0x10)
    public static let invalidIndex = ManagementStatus(rawValue: 0x11)
    public static let rfKilled = ManagementStatus(rawValue: 0x12)
    public static let alreadyPaired = ManagementStatus(rawValue: 0x13)
    public static let permissionDenied = ManagementStatus(rawValue: 0x14)

    public var description: String {
        switch self {
        case .success: "success"
        case .unknownCommand: "unknown command"
        case .notConnected: "not connected"
        case .failed: "failed"
        case .connectFailed: "connect failed"
        case .authenticationFailed: "authentication failed"
        case .notPaired: "not paired"
        case .noResources: "no resources"
        case .timeout: "timeout"
        case .alreadyConnected: "already connected"
        case .busy: "busy"
        case .rejected: "rejected"
        case .notSupported: "not supported"
        case .invalidParameters: "invalid parameters"
        case .disconnected: "disconnected"
        case .notPowered: "not powered"
        case .cancelled: "cancelled"
        case .invalidIndex: "invalid index"
        case .rfKilled: "blocked by rfkill"
        case .alreadyPaired: "already paired"
        case .permissionDenied: "permission denied (the management interface needs CAP_NET_ADMIN)"
        default: "status 0x\(String(rawValue, radix: 16))"
        }
    }
}

/// A command the kernel refused, named with its status.
public struct ManagementError: Error, Sendable, Equatable, CustomStringConvertible {
    public var command: String
    public var status: ManagementStatus
    public init(command: String, status: ManagementStatus) {
        self.command = command
        self.status = status
    }
    public var description: String { "\(command) failed: \(status)" }
}

/// The controller settings bits of Read Controller Information and New Settings.
public struct ManagementSettings: OptionSet, Sendable, Hashable {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let powered = ManagementSettings(rawValue: 1 << 0)
    public static let connectable = ManagementSettings(rawValue: 1 << 1)
    public static let bondable = ManagementSettings(rawValue: 1 << 4)
    public static let lowEnergy = ManagementSettings(rawValue: 1 << 9)
    public static let advertising = ManagementSettings(rawValue: 1 << 10)
    public static let secureConnections = ManagementSettings(rawValue: 1 << 11)
    public static let privacy = ManagementSettings(rawValue: 1 << 13)
}
