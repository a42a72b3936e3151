import BleotaLink

/// A Bluetooth device address, written most significant byte first
/// (`AA:BB:CC:DD:EE:FF`), stored as written. The kernel's `bdaddr_t` holds the
/// bytes the other way round; ``littleEndian`` gives that order.
public struct BluetoothAddress: Sendable, Hashable, CustomStringConvertible {
    public var bytes: [UInt8]  // as written

    public init?(_ text: String) {
        let parts = text.split(separator: ":")
        guard parts.count == 6 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard part.count == 2, let byte = UInt8(part, radix: 16) else { return nil }
            bytes.append(byte)
        }
        self.bytes = bytes
    }

    public init(littleEndian: [UInt8]) { bytes = littleEndian.reversed() }

    public static let any = BluetoothAddress("00:00:00:00:00:00")!

    public var littleEndian: [UInt8] { bytes.reversed() }

    public var description: String {
        bytes.map { byte in
            let digits = String(byte, radix: 16, uppercase: true)
            return digits.count == 1 ? "0" + digits : digits
        }.joined(separator: ":")
    }
}

/// LE address types (Core v5.4, Vol 6, Part B, §1.3); the kernel's
/// `BDADDR_LE_PUBLIC` (1) and `BDADDR_LE_RANDOM` (2).
public enum AddressType: String, Sendable, Hashable, Codable {
    case `public`
    case random

    var kernelValue: UInt8 { self == .public ? 1 : 2 }
}

extension SecurityLevel {
    /// The kernel's `BT_SECURITY_*` value: the same numbering (low 1 … fips 4).
    var kernelValue: UInt8 { UInt8(rawValue) }
}

extension BluetoothAddress: Codable {
    /// Written as text, `AA:BB:CC:DD:EE:FF`.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let address = BluetoothAddress(text) else {
            throw Swift.DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "'\(text)' is not a Bluetooth address"))
        }
        self = address
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// A `ble://AA:BB:CC:DD:EE:FF[?type=random&adapter=hci0&security=medium&psm=0x80&phy=2m&interval=7.5-15]` device address.
public struct BLEDeviceAddress: Sendable, Hashable {
    public var address: BluetoothAddress
    public var type: AddressType = .public
    public var adapter: String?
    public var security: SecurityLevel = .low
    /// An LE credit-based channel to use instead of GATT, if the device offers one.
    public var psm: UInt16?
    /// PHY and connection interval to ask for once connected.
    public var connection = ConnectionRequest()

    public static let keys = ["type", "adapter", "security", "psm", "phy", "interval"]

    /// Parses the address; the error is one line naming what is wrong and what is valid.
    public static func parse(_ text: String) -> Result<BLEDeviceAddress, BLEAddressError> {
        guard text.hasPrefix("ble://") else { return .failure(.init("'\(text)' is not a ble:// address")) }
        let rest = text.dropFirst("ble://".count)
        let parts = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = BluetoothAddress(String(parts[0])) else {
            return .failure(.init("'\(parts[0])' is not a Bluetooth address: write six hex bytes like ble://C0:FF:EE:00:00:01"))
        }
        var result = BLEDeviceAddress(address: address)
        if parts.count == 2 {
            for pair in parts[1].split(separator: "&") {
                let keyValue = pair.split(separator: "=", maxSplits: 1).map(String.init)
                guard keyValue.count == 2 else { return .failure(.init("ble:// key '\(keyValue[0])' needs a value")) }
                switch keyValue[0] {
                case "type":
                    guard let type = AddressType(rawValue: keyValue[1]) else {
                        return .failure(.init("ble:// type '\(keyValue[1])' is not public or random"))
                    }
                    result.type = type
                case "adapter": result.adapter = keyValue[1]
                case "security":
                    guard let level = SecurityLevel(name: keyValue[1]) else {
                        return .failure(.init("ble:// security '\(keyValue[1])' is not \(SecurityLevel.names)"))
                    }
                    result.security = level
                case "psm":
                    let digits = keyValue[1].lowercased().hasPrefix("0x") ? String(keyValue[1].dropFirst(2)) : keyValue[1]
                    let radix = keyValue[1].lowercased().hasPrefix("0x") ? 16 : 10
                    guard let psm = UInt16(digits, radix: radix), (0x80...0xFF).contains(psm) else {
                        return .failure(.init("ble:// psm '\(keyValue[1])' is out of range: LE dynamic PSMs are 0x80…0xFF"))
                    }
                    result.psm = psm
                case "phy":
                    guard let phy = LEPHY(rawValue: keyValue[1].lowercased()) else {
                        return .failure(.init("ble:// phy '\(keyValue[1])' is not 1m, 2m or coded"))
                    }
                    result.connection.phy = phy
                case "interval":
                    switch ConnectionRequest.parseInterval(keyValue[1]) {
                    case .success(let range): result.connection.interval = range
                    case .failure(let error): return .failure(error)
                    }
                default:
                    return .failure(.init("unknown ble:// key '\(keyValue[0])': use \(keys.joined(separator: ", "))"))
                }
            }
        }
        return .success(result)
    }
}

public struct BLEAddressError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
