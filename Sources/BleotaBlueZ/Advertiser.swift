import BleotaATT
import CBlueZ
import Glibc

/// LE advertising through HCI commands (Core v5.4, Vol 4, Part E, §7.8.5–§7.8.9):
/// connectable undirected advertising every 100 ms with flags and one 128-bit
/// service UUID, and the device name in the scan response.
public enum Advertiser {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// The advertising payload: flags (LE general discoverable, no BR/EDR) and the service UUID.
    public static func advertisingData(service: BluetoothUUID) -> [UInt8] {
        let uuid = service.littleEndian
        let type: UInt8 = uuid.count == 2 ? 0x03 : 0x07
        return [0x02, 0x01, 0x06, UInt8(uuid.count + 1), type] + uuid
    }

    /// The scan response: the complete local name, cut to fit 31 bytes.
    public static func scanResponse(name: String) -> [UInt8] {
        let bytes = Array(name.utf8.prefix(29))
        return [UInt8(bytes.count + 1), 0x09] + bytes
    }

    public static func start(adapter: String, name: String, service: BluetoothUUID) throws(Failure) {
        let deviceID = hci_devid(adapter)
        guard deviceID >= 0 else { throw Failure(description: BluetoothAvailability.noAdapter(adapter).description) }
        let dd = hci_open_dev(deviceID)
        guard dd >= 0 else { throw Failure(description: "cannot open \(adapter): \(String(cString: strerror(errno)))") }
        defer { hci_close_dev(dd) }
        _ = send(dd, ocf: 0x000A, [0x00]) // stop any advertising first; ignore the answer
        // Interval 0x00A0 × 0.625 ms = 100 ms, ADV_IND, public own address, all three channels.
        try check(send(dd, ocf: 0x0006, [0xA0, 0x00, 0xA0, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0x07, 0x00]), "set advertising parameters")
        try check(send(dd, ocf: 0x0008, padded(advertisingData(service: service))), "set advertising data")
        try check(send(dd, ocf: 0x0009, padded(scanResponse(name: name))), "set scan response data")
        try check(send(dd, ocf: 0x000A, [0x01]), "enable advertising")
    }

    public static func stop(adapter: String) {
        let deviceID = hci_devid(adapter)
        guard deviceID >= 0 else { return }
        let dd = hci_open_dev(deviceID)
        guard dd >= 0 else { return }
        _ = send(dd, ocf: 0x000A, [0x00])
        hci_close_dev(dd)
    }

    /// Length byte plus 31 bytes, zero padded, as both data commands take.
    static func padded(_ data: [UInt8]) -> [UInt8] {
        [UInt8(data.count)] + data + [UInt8](repeating: 0, count: 31 - data.count)
    }

    /// Sends an LE controller command; returns the controller's status (0 = success) or −1.
    static func send(_ dd: Int32, ocf: UInt16, _ parameters: [UInt8]) -> Int {
        var parameters = parameters
        var status: UInt8 = 0xFF
        let result = parameters.withUnsafeMutableBytes { parameterBuffer in
            withUnsafeMutablePointer(to: &status) { statusPointer in
                var request = hci_request()
                request.ogf = UInt16(OGF_LE_CTL)
                request.ocf = ocf
                request.cparam = parameterBuffer.baseAddress
                request.clen = Int32(parameterBuffer.count)
                request.rparam = UnsafeMutableRawPointer(statusPointer)
                request.rlen = 1
                return hci_send_req(dd, &request, 1000)
            }
        }
        return result < 0 ? -1 : Int(status)
    }

    static func check(_ status: Int, _ what: String) throws(Failure) {
        guard status == 0 else {
            throw Failure(description: status < 0 ? "\(what) failed: \(String(cString: strerror(errno)))"
                                                  : "\(what) refused by the controller (HCI status 0x\(String(status, radix: 16)))")
        }
    }
}
