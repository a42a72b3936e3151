import BleotaATT
import BleotaLink

/// The characteristics of Nordic's DFU service (0xFE59) as the channels of a
/// ``/BleotaLink/ChannelLink``: the bootloader offers the control point
/// and the packet characteristic, the application one of the buttonless ones.
package enum NordicDFUChannel: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// 8EC90001-…: requests written with response, answers notified.
    case controlPoint = 0
    /// 8EC90002-…: object data written without response, never answered.
    case packet = 1
    /// 8EC90003-… (SDK 13+): buttonless jump without bonds; the bootloader then advertises at address + 1.
    case buttonless = 2
    /// 8EC90004-… (SDK 14+): buttonless jump for bonded devices; the bootloader keeps the address.
    case bondedButtonless = 3
    /// 8E400001-… (SDK 12, "experimental"): its own service and characteristic, answers notified.
    case experimentalButtonless = 4

    package static let service = BluetoothUUID.bit16(0xFE59)
    package static let experimentalService = BluetoothUUID("8E400001-F315-4F60-9FB8-838830DAEA50")!

    package var uuid: BluetoothUUID {
        switch self {
        case .controlPoint: BluetoothUUID("8EC90001-F315-4F60-9FB8-838830DAEA50")!
        case .packet: BluetoothUUID("8EC90002-F315-4F60-9FB8-838830DAEA50")!
        case .buttonless: BluetoothUUID("8EC90003-F315-4F60-9FB8-838830DAEA50")!
        case .bondedButtonless: BluetoothUUID("8EC90004-F315-4F60-9FB8-838830DAEA50")!
        case .experimentalButtonless: Self.experimentalService
        }
    }

    package var description: String {
        switch self {
        case .controlPoint: "DFU control point"
        case .packet: "DFU packet"
        case .buttonless: "buttonless DFU (unbonded)"
        case .bondedButtonless: "buttonless DFU (bonded)"
        case .experimentalButtonless: "buttonless DFU (SDK 12 experimental)"
        }
    }

    /// The characteristic as a GATT channel: how it is written and how it answers.
    package var gattChannel: GATTChannel {
        switch self {
        case .controlPoint: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .request, update: .notify)
        case .packet: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .command, update: .none)
        case .buttonless, .bondedButtonless:
            GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .request, update: .indicate)
        case .experimentalButtonless:
            GATTChannel(number: rawValue, service: Self.experimentalService, characteristic: uuid, write: .request, update: .notify)
        }
    }

    /// The buttonless characteristics, in the order a host prefers them.
    package static let buttonlessKinds: [NordicDFUChannel] = [.buttonless, .bondedButtonless, .experimentalButtonless]
}

/// Requests and answers of the buttonless DFU characteristics (`ble_dfu.h`):
/// the application's way into its bootloader.
package enum NordicButtonless {
    /// Enter bootloader.
    package static let enterBootloader: UInt8 = 0x01
    /// Set the name the bootloader advertises (unbonded, SDK 14+): `02 len name`.
    package static let setAdvertisingName: UInt8 = 0x02
    /// The first byte of every answer.
    package static let responseCode: UInt8 = 0x20

    /// `ble_dfu_buttonless_rsp_code_t`.
    package enum Status: UInt8, Sendable, Hashable, CustomStringConvertible {
        case success = 0x01
        case operationNotSupported = 0x02
        case operationFailed = 0x04
        case invalidAdvertisingName = 0x05
        case busy = 0x06
        case notBonded = 0x07

        package var description: String {
            switch self {
            case .success: "success"
            case .operationNotSupported: "operation not supported"
            case .operationFailed: "operation failed"
            case .invalidAdvertisingName: "the advertising name is invalid (1 to 20 characters)"
            case .busy: "busy with an earlier request"
            case .notBonded: "the host is not bonded with the device: pair it first, or use the unbonded buttonless service"
            }
        }
    }

    /// `02 len name`: the name must be 1…20 bytes.
    package static func setName(_ name: String) -> [UInt8] {
        let bytes = Array(name.utf8)
        return [setAdvertisingName, UInt8(truncatingIfNeeded: bytes.count)] + bytes
    }

    /// An answer: `20 op status`.
    package static func response(to operation: UInt8, _ status: Status) -> [UInt8] { [responseCode, operation, status.rawValue] }
}
