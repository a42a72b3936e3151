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

    /// Management commands as bytes: `[opcode LE][controller index LE][length LE][parameters]`.
    public struct Command: Equatable, Sendable {
        public var opcode: UInt16
        public var index: UInt16
        public var parameters: [UInt8]

        public func encode() -> [UInt8] {
            var writer = ByteWriter(capacity: 6 + parameters.count)
            writer.write(opcode)
            writer.write(index)
            writer.write(UInt16(parameters.count))
            writer.write(contentsOf: parameters)
            return writer.bytes
        }

        public static func setPowered(_ index: UInt16, _ on: Bool) -> Command { Command(opcode: 0x0005, index: index, parameters: [on ? 1 : 0]) }
        public static func setConnectable(_ index: UInt16, _ on: Bool) -> Command { Command(opcode: 0x0007, index: index, parameters: [on ? 1 : 0]) }

        /// Set Local Name: 249 bytes of name and 11 of short name, NUL padded.
        public static func setLocalName(_ index: UInt16, _ name: String) -> Command {
            let full = Array(name.utf8.prefix(248)), short = Array(name.utf8.prefix(10))
            return Command(opcode: 0x000F, index: index,
                           parameters: full + [UInt8](repeating: 0, count: 249 - full.count) + short + [UInt8](repeating: 0, count: 11 - short.count))
        }

        /// Add Advertising: connectable, general discoverable, the flags field managed by the kernel,
        /// and our own scan response (the complete name: the kernel's would fall back to the
        /// 10-byte short name).
        public static func addAdvertising(_ index: UInt16, instance: UInt8, data: [UInt8], scanResponse: [UInt8]) -> Command {
            let flags: UInt32 = 1 << 0 | 1 << 1 // connectable, general discoverable
            var writer = ByteWriter()
            writer.write(instance)
            writer.write(flags)
            writer.write(UInt16(0)) // duration: the default
            writer.write(UInt16(0)) // timeout: none
            writer.write(UInt8(data.count))
            writer.write(UInt8(scanResponse.count))
            writer.write(contentsOf: data)
            writer.write(contentsOf: scanResponse)
            return Command(opcode: 0x003E, index: index, parameters: writer.bytes)
        }

        public static func removeAdvertising(_ index: UInt16, instance: UInt8) -> Command {
            Command(opcode: 0x003F, index: index, parameters: [instance])
        }
    }

    /// The status a management event reports for `opcode`, or nil if the event is about something else.
    public static func status(of event: [UInt8], for opcode: UInt16) -> UInt8? {
        guard event.count >= 9 else { return nil }
        let code = UInt16(event[0]) | UInt16(event[1]) << 8
        let answered = UInt16(event[6]) | UInt16(event[7]) << 8
        guard code == 0x0001 || code == 0x0002, answered == opcode else { return nil }
        return event[8]
    }

    static func statusName(_ status: UInt8) -> String {
        switch status {
        case 0x01: "unknown command"
        case 0x03: "failed"
        case 0x05: "busy"
        case 0x0C: "not supported"
        case 0x0D: "invalid parameters"
        case 0x0F: "not powered"
        case 0x11: "invalid index"
        case 0x14: "permission denied"
        default: "status 0x\(String(status, radix: 16))"
        }
    }

    /// Starts advertising `service` as `name` (and `version`, when given) from `adapter`
    /// until ``stop(adapter:)``; called again, it replaces what is advertised.
    public static func start(adapter: String, name: String, service: BluetoothUUID, version: MCUbootImage.Version? = nil) throws(Failure) {
        let index = try controllerIndex(adapter)
        let socket = try ManagementSocket()
        defer { socket.close() }
        try socket.run(.setPowered(index, true), "power on \(adapter)")
        try socket.run(.setConnectable(index, true), "make \(adapter) connectable")
        try socket.run(.setLocalName(index, name), "name \(adapter)")
        _ = try? socket.run(.removeAdvertising(index, instance: instance), "remove an old advertising instance")
        // The kernel adds the flags field itself (it is "managed"): the data carries the UUID only.
        let data = Array(advertisingData(service: service).dropFirst(3))
        try socket.run(.addAdvertising(index, instance: instance, data: data, scanResponse: scanResponse(name: name, version: version)),
                       "add an advertising instance to \(adapter)")
    }

    public static func stop(adapter: String) {
        guard let index = try? controllerIndex(adapter), let socket = try? ManagementSocket() else { return }
        _ = try? socket.run(.removeAdvertising(index, instance: instance), "stop advertising")
        socket.close()
    }

    static func controllerIndex(_ adapter: String) throws(Failure) -> UInt16 {
        let id = hci_devid(adapter)
        guard id >= 0 else { throw Failure(description: BluetoothAvailability.noAdapter(adapter).description) }
        return UInt16(id)
    }
}

/// The kernel's Bluetooth management socket (needs `CAP_NET_ADMIN`).
final class ManagementSocket {
    let fd: Int32

    init() throws(Advertiser.Failure) {
        fd = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_HCI)
        guard fd >= 0 else { throw Advertiser.Failure(description: "cannot open the Bluetooth management socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_hci()
        address.hci_family = sa_family_t(AF_BLUETOOTH)
        address.hci_dev = 0xFFFF // HCI_DEV_NONE
        address.hci_channel = UInt16(HCI_CHANNEL_CONTROL)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_hci>.size)) }
        }
        guard bound == 0 else {
            let code = errno
            Glibc.close(fd)
            let hint = code == EPERM || code == EACCES ? ": advertising needs CAP_NET_ADMIN (run as root)" : ""
            throw Advertiser.Failure(description: "cannot bind the Bluetooth management socket: \(String(cString: strerror(code)))\(hint)")
        }
    }

    func close() { Glibc.close(fd) }

    /// Sends `command` and waits (up to 2 s) for its Command Complete or Status.
    @discardableResult
    func run(_ command: Advertiser.Command, _ what: String) throws(Advertiser.Failure) -> UInt8 {
        let bytes = command.encode()
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw Advertiser.Failure(description: "cannot \(what): \(String(cString: strerror(errno)))") }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 200) > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { continue }
            if let status = Advertiser.status(of: Array(buffer[..<count]), for: command.opcode) {
                guard status == 0 else { throw Advertiser.Failure(description: "cannot \(what): \(Advertiser.statusName(status))") }
                return status
            }
        }
        throw Advertiser.Failure(description: "cannot \(what): the kernel did not answer")
    }
}
