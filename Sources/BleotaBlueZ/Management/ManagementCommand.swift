import BleotaCodec
import BleotaLink

/// The management commands bleota sends (`doc/mgmt-api.txt`, "Management
/// Commands"), each a value that names itself for error messages.
public struct ManagementCommand: Sendable, Hashable {
    public var opcode: UInt16
    public var parameters: [UInt8]
    /// The command's name as the documentation writes it.
    public var name: String

    public init(opcode: UInt16, name: String, parameters: [UInt8] = []) {
        self.opcode = opcode
        self.name = name
        self.parameters = parameters
    }

    public func packet(index: UInt16) -> ManagementPacket { ManagementPacket(code: opcode, index: index, parameters: parameters) }

    private static func setting(_ opcode: UInt16, _ name: String, _ on: Bool) -> ManagementCommand {
        ManagementCommand(opcode: opcode, name: name, parameters: [on ? 1 : 0])
    }

    private static func addressed(_ opcode: UInt16, _ name: String, _ address: ManagementAddress, extra: [UInt8] = []) -> ManagementCommand {
        var writer = ByteWriter(capacity: ManagementAddress.size + extra.count)
        address.encode(into: &writer)
        writer.write(contentsOf: extra)
        return ManagementCommand(opcode: opcode, name: name, parameters: writer.bytes)
    }

    public static let readIndexList = ManagementCommand(opcode: 0x0003, name: "Read Controller Index List")
    public static let readControllerInformation = ManagementCommand(opcode: 0x0004, name: "Read Controller Information")
    public static func setPowered(_ on: Bool) -> ManagementCommand { setting(0x0005, "Set Powered", on) }
    public static func setBondable(_ on: Bool) -> ManagementCommand { setting(0x0009, "Set Bondable", on) }
    public static func setLowEnergy(_ on: Bool) -> ManagementCommand { setting(0x000D, "Set Low Energy", on) }
    public static func setSecureConnections(_ on: Bool) -> ManagementCommand { setting(0x002D, "Set Secure Connections", on) }

    public static func setConnectable(_ on: Bool) -> ManagementCommand { setting(0x0007, "Set Connectable", on) }

    /// Set Local Name: 249 bytes of name and 11 of short name, NUL padded.
    public static func setLocalName(_ name: String) -> ManagementCommand {
        let full = Array(name.utf8.prefix(248)), short = Array(name.utf8.prefix(10))
        return ManagementCommand(
            opcode: 0x000F, name: "Set Local Name",
            parameters: full + [UInt8](repeating: 0, count: 249 - full.count) + short + [UInt8](repeating: 0, count: 11 - short.count))
    }

    /// Add Advertising: connectable, general discoverable, the flags field managed by the kernel,
    /// and our own scan response (the complete name: the kernel's would fall back to the
    /// 10-byte short name).
    public static func addAdvertising(instance: UInt8, data: [UInt8], scanResponse: [UInt8]) -> ManagementCommand {
        let flags: UInt32 = 1 << 0 | 1 << 1  // connectable, general discoverable
        var writer = ByteWriter()
        writer.write(instance)
        writer.write(flags)
        writer.write(UInt16(0))  // duration: the default
        writer.write(UInt16(0))  // timeout: none
        writer.write(UInt8(data.count))
        writer.write(UInt8(scanResponse.count))
        writer.write(contentsOf: data)
        writer.write(contentsOf: scanResponse)
        return ManagementCommand(opcode: 0x003E, name: "Add Advertising", parameters: writer.bytes)
    }

    public static func removeAdvertising(instance: UInt8) -> ManagementCommand {
        ManagementCommand(opcode: 0x003F, name: "Remove Advertising", parameters: [instance])
    }

    /// The address types to discover: LE public and random.
    public static let leAddressTypes: UInt8 = 0x06

    /// Start Discovery (active scanning, as the kernel schedules it: extended scanning where the
    /// controller has it, which raw LE Set Scan commands would be refused beside).
    public static func startDiscovery(types: UInt8 = leAddressTypes) -> ManagementCommand {
        ManagementCommand(opcode: 0x0023, name: "Start Discovery", parameters: [types])
    }

    public static func stopDiscovery(types: UInt8 = leAddressTypes) -> ManagementCommand {
        ManagementCommand(opcode: 0x0024, name: "Stop Discovery", parameters: [types])
    }

    public static func setIOCapability(_ capability: PairingIOCapability) -> ManagementCommand {
        ManagementCommand(opcode: 0x0018, name: "Set IO Capability", parameters: [capability.rawValue])
    }

    public static func loadLongTermKeys(_ keys: [LongTermKey]) -> ManagementCommand {
        var writer = ByteWriter(capacity: 2 + keys.count * LongTermKey.size)
        writer.write(UInt16(keys.count))
        for key in keys { key.encode(into: &writer) }
        return ManagementCommand(opcode: 0x0013, name: "Load Long Term Keys", parameters: writer.bytes)
    }

    public static func loadIdentityResolvingKeys(_ keys: [IdentityResolvingKey]) -> ManagementCommand {
        var writer = ByteWriter(capacity: 2 + keys.count * IdentityResolvingKey.size)
        writer.write(UInt16(keys.count))
        for key in keys { key.encode(into: &writer) }
        return ManagementCommand(opcode: 0x0030, name: "Load Identity Resolving Keys", parameters: writer.bytes)
    }

    public static func unpairDevice(_ address: ManagementAddress, disconnect: Bool) -> ManagementCommand {
        addressed(0x001B, "Unpair Device", address, extra: [disconnect ? 1 : 0])
    }

    public static func userConfirmationReply(_ address: ManagementAddress, accept: Bool) -> ManagementCommand {
        accept ? addressed(0x001C, "User Confirmation Reply", address) : addressed(0x001D, "User Confirmation Negative Reply", address)
    }

    public static func userPasskeyReply(_ address: ManagementAddress, passkey: UInt32?) -> ManagementCommand {
        guard let passkey else { return addressed(0x001F, "User Passkey Negative Reply", address) }
        var extra = ByteWriter(capacity: 4)
        extra.write(passkey)
        return addressed(0x001E, "User Passkey Reply", address, extra: extra.bytes)
    }
}

/// What Read Controller Information returns (280 bytes): the address, the settings
/// the controller supports and those in force, and its name.
public struct ControllerInformation: Sendable, Hashable {
    public var address: BluetoothAddress
    public var supported: ManagementSettings
    public var current: ManagementSettings
    public var name: String

    public init(address: BluetoothAddress, supported: ManagementSettings, current: ManagementSettings, name: String) {
        self.address = address
        self.supported = supported
        self.current = current
        self.name = name
    }

    public init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        address = BluetoothAddress(littleEndian: try reader.readBytes(6, "address"))
        _ = try reader.readUInt8("Bluetooth version")
        _ = try reader.readUInt16(.little, "manufacturer")
        supported = ManagementSettings(rawValue: try reader.readUInt32(.little, "supported settings"))
        current = ManagementSettings(rawValue: try reader.readUInt32(.little, "current settings"))
        _ = try reader.readBytes(3, "class of device")
        let nameBytes = try reader.readBytes(249, "name")
        name = String(decoding: nameBytes.prefix { $0 != 0 }, as: UTF8.self)
    }
}
