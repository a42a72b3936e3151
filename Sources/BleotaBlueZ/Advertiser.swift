import BleotaATT
import BleotaCodec
import CBlueZ
import Glibc

/// LE advertising through the kernel's Bluetooth management interface (the
/// `HCI_CHANNEL_CONTROL` socket btmgmt and bluetoothd use; BlueZ's
/// doc/mgmt-api.txt): the adapter is powered, made connectable, named, and
/// given an advertising instance with the service UUID. The kernel owns the
/// instance from then on, so it advertises again by itself after every
/// connection ends — which raw HCI advertising commands, issued behind the
/// kernel's back, do not get.
public enum Advertiser {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// The advertising instance bleota adds (1…the controller's maximum).
    static let instance: UInt8 = 1

    /// The advertising payload: flags (LE general discoverable, no BR/EDR) and the service UUID.
    public static func advertisingData(service: BluetoothUUID) -> [UInt8] {
        let uuid = service.littleEndian
        let type: UInt8 = uuid.count == 2 ? 0x03 : 0x07
        return [0x02, 0x01, 0x06, UInt8(uuid.count + 1), type] + uuid
    }

    /// The scan response: the complete local name and, when given, the firmware
    /// version (``AdvertisedVersion``), the name cut so that both fit 31 bytes.
    public static func scanResponse(name: String, version: MCUbootImage.Version? = nil) -> [UInt8] {
        let versionField = version.map { AdvertisedVersion.structure($0) } ?? []
        let bytes = Array(name.utf8.prefix(29 - versionField.count))
        return [UInt8(bytes.count + 1), 0x09] + bytes + versionField
    }

    /// Starts advertising `service` as `name` (and `version`, when given) from `adapter`
    /// until ``stop(adapter:)``; called again, it replaces what is advertised.
    public static func start(adapter: String, name: String, service: BluetoothUUID, version: MCUbootImage.Version? = nil) async throws(Failure) {
        let index = try controllerIndex(adapter)
        let channel: ManagementChannel
        do { channel = try ManagementChannel.open() } catch {
            throw Failure(description: "\(error.description): advertising needs CAP_NET_ADMIN (run as root)")
        }
        defer { channel.close() }
        func run(_ command: ManagementCommand, _ what: String) async throws(Failure) {
            do { _ = try await channel.send(command, index: index) } catch {
                throw Failure(description: "cannot \(what): \(error.status)")
            }
        }
        try await run(.setPowered(true), "power on \(adapter)")
        try await run(.setConnectable(true), "make \(adapter) connectable")
        try await run(.setLocalName(name), "name \(adapter)")
        _ = try? await channel.send(.removeAdvertising(instance: instance), index: index)
        // The kernel adds the flags field itself (it is "managed"): the data carries the UUID only.
        let data = Array(advertisingData(service: service).dropFirst(3))
        try await run(
            .addAdvertising(instance: instance, data: data, scanResponse: scanResponse(name: name, version: version)),
            "add an advertising instance to \(adapter)")
    }

    public static func stop(adapter: String) async {
        guard let index = try? controllerIndex(adapter), let channel = try? ManagementChannel.open() else { return }
        _ = try? await channel.send(.removeAdvertising(instance: instance), index: index)
        channel.close()
    }

    static func controllerIndex(_ adapter: String) throws(Failure) -> UInt16 {
        guard let id = BluetoothAvailability.deviceID(adapter) else { throw Failure(description: BluetoothAvailability.noAdapter(adapter).description) }
        return UInt16(id)
    }
}
