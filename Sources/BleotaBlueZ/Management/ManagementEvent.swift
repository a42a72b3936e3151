import BleotaCodec

/// The management events bleota acts on (`doc/mgmt-api.txt`, "Management
/// Events"), decoded from a ``ManagementPacket``; the rest keep their code and bytes.
/// A malformed event is a typed error naming the field, never a crash.
public enum ManagementEvent: Sendable, Hashable {
    /// 0x0001: a command finished.
    case commandComplete(opcode: UInt16, status: ManagementStatus, returnParameters: [UInt8])
    /// 0x0002: a command failed or is under way.
    case commandStatus(opcode: UInt16, status: ManagementStatus)
    /// 0x0006
    case newSettings(ManagementSettings)
    /// 0x000A: pairing made a key; `storeHint` says it is meant to be kept (both sides bonded).
    case newLongTermKey(storeHint: Bool, key: LongTermKey)
    /// 0x000B
    case deviceConnected(ManagementAddress)
    /// 0x000C, with the kernel's reason (4: authentication failure).
    case deviceDisconnected(ManagementAddress, reason: UInt8)
    /// 0x000F: Just Works (`confirmHint`) asks for a yes, numeric comparison for a yes to `value`.
    case userConfirmationRequest(ManagementAddress, confirmHint: Bool, value: UInt32)
    /// 0x0010: passkey entry, this side types.
    case userPasskeyRequest(ManagementAddress)
    /// 0x0011: pairing failed (status 0x05 for every LE Security Manager failure).
    case authenticationFailed(ManagementAddress, status: ManagementStatus)
    /// 0x0017: passkey entry, this side shows `passkey`.
    case passkeyNotify(ManagementAddress, passkey: UInt32)
    /// 0x0018: the peer's identity and IRK; `rpa` is the private address it used (all zero if none).
    case newIdentityResolvingKey(storeHint: Bool, rpa: BluetoothAddress, key: IdentityResolvingKey)
    /// 0x0016
    case deviceUnpaired(ManagementAddress)
    /// 0x0012: a device seen while discovering, with its advertising data and scan response.
    case deviceFound(ManagementAddress, rssi: Int?, flags: UInt32, data: [UInt8])
    /// 0x0013: discovery of `type` started or stopped (by any client).
    case discovering(type: UInt8, active: Bool)
    case other(code: UInt16, parameters: [UInt8])

    public init(decoding packet: ManagementPacket) throws(DecodingError) {
        var reader = ByteReader(packet.parameters)
        switch packet.code {
        case 0x0001:
            let opcode = try reader.readUInt16(.little, "command opcode")
            let status = ManagementStatus(rawValue: try reader.readUInt8("status"))
            self = .commandComplete(opcode: opcode, status: status, returnParameters: reader.readRemaining())
        case 0x0002:
            let opcode = try reader.readUInt16(.little, "command opcode")
            self = .commandStatus(opcode: opcode, status: ManagementStatus(rawValue: try reader.readUInt8("status")))
        case 0x0006:
            self = .newSettings(ManagementSettings(rawValue: try reader.readUInt32(.little, "settings")))
        case 0x000A:
            let hint = try reader.readUInt8("store hint") != 0
            self = .newLongTermKey(storeHint: hint, key: try LongTermKey(decoding: &reader))
        case 0x000B:
            self = .deviceConnected(try ManagementAddress(decoding: &reader))
        case 0x000C:
            let address = try ManagementAddress(decoding: &reader)
            self = .deviceDisconnected(address, reason: try reader.readUInt8("reason"))
        case 0x000F:
            let address = try ManagementAddress(decoding: &reader)
            let hint = try reader.readUInt8("confirm hint") != 0
            self = .userConfirmationRequest(address, confirmHint: hint, value: try reader.readUInt32(.little, "value"))
        case 0x0010:
            self = .userPasskeyRequest(try ManagementAddress(decoding: &reader))
        case 0x0011:
            let address = try ManagementAddress(decoding: &reader)
            self = .authenticationFailed(address, status: ManagementStatus(rawValue: try reader.readUInt8("status")))
        case 0x0016:
            self = .deviceUnpaired(try ManagementAddress(decoding: &reader))
        case 0x0012:
            let address = try ManagementAddress(decoding: &reader)
            let rssi = Int8(bitPattern: try reader.readUInt8("rssi"))
            let flags = try reader.readUInt32(.little, "flags")
            let length = Int(try reader.readUInt16(.little, "data length"))
            self = .deviceFound(address, rssi: rssi == 127 ? nil : Int(rssi), flags: flags, data: try reader.readBytes(length, "advertising data"))
        case 0x0013:
            let type = try reader.readUInt8("address types")
            self = .discovering(type: type, active: try reader.readUInt8("discovering") != 0)
        case 0x0017:
            let address = try ManagementAddress(decoding: &reader)
            self = .passkeyNotify(address, passkey: try reader.readUInt32(.little, "passkey"))
        case 0x0018:
            let hint = try reader.readUInt8("store hint") != 0
            let rpa = BluetoothAddress(littleEndian: try reader.readBytes(6, "random address"))
            self = .newIdentityResolvingKey(storeHint: hint, rpa: rpa, key: try IdentityResolvingKey(decoding: &reader))
        default:
            self = .other(code: packet.code, parameters: packet.parameters)
        }
    }
}
