import CBlueZ
import Glibc

/// The Linux Bluetooth stack, reached through BlueZ's libbluetooth and the
/// kernel's `AF_BLUETOOTH` sockets.
///
/// This module is the only one that imports `CBlueZ`. It starts with the
/// question every real-device command asks first — can this machine do
/// Bluetooth at all? — because the answer differs in ways that need different
/// fixes: a kernel built without Bluetooth (most containers and many VMs), no
/// adapter, an adapter that is down, or a user without permission.
public enum BluetoothAvailability: Sendable, Equatable, CustomStringConvertible {
    case available(adapter: String)
    /// `socket(AF_BLUETOOTH)` fails with EAFNOSUPPORT: the kernel has no Bluetooth.
    case noKernelSupport
    /// The kernel has Bluetooth but there is no adapter (or not the one named).
    case noAdapter(String?)
    /// The adapter exists but is powered off / down.
    case adapterDown(String)
    /// The socket calls were refused (EPERM/EACCES).
    case permissionDenied

    public var description: String {
        switch self {
        case .available(let adapter):
            return "Bluetooth available on \(adapter)"
        case .noKernelSupport:
            return
                "this machine's kernel has no Bluetooth support (socket(AF_BLUETOOTH) failed with EAFNOSUPPORT): run on a Linux machine or VM with Bluetooth, or use a sim:// device"
        case .noAdapter(let name):
            if let name { return "no Bluetooth adapter named \(name): list adapters with `btmgmt info` or `hciconfig`" }
            return "no Bluetooth adapter found: plug one in or check `btmgmt info`"
        case .adapterDown(let name):
            return "Bluetooth adapter \(name) is down: power it on with `btmgmt -i \(name) power on`"
        case .permissionDenied:
            return "permission denied opening a Bluetooth socket: run as root or grant CAP_NET_RAW and CAP_NET_ADMIN"
        }
    }

    /// The adapter's name when it is available.
    public var adapterName: String? {
        if case .available(let name) = self { return name }
        return nil
    }

    /// Probes the kernel and the adapter (`hciN`, or the first one when nil).
    public static func probe(adapter: String? = nil) -> BluetoothAvailability {
        let probe = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_HCI)
        if probe < 0 {
            switch errno {
            case EAFNOSUPPORT, EPROTONOSUPPORT: return .noKernelSupport
            case EPERM, EACCES: return .permissionDenied
            default: return .noKernelSupport
            }
        }
        close(probe)
        // libbluetooth's hci_devid and hci_get_route find only adapters that are up: look the
        // adapter up by its number instead, so one that is down is named as down, not missing.
        guard let deviceID = deviceID(adapter) else { return .noAdapter(adapter) }
        var info = hci_dev_info()
        guard hci_devinfo(deviceID, &info) == 0 else {
            return errno == EPERM || errno == EACCES ? .permissionDenied : .noAdapter(adapter)
        }
        let name = withUnsafeBytes(of: info.name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        // HCI_UP is bit 0 of the device flags.
        guard info.flags & 1 != 0 else { return .adapterDown(name) }
        return .available(adapter: name)
    }

    /// The kernel's number for `hciN` (N), or for nil the first adapter that is up (else the first there is).
    static func deviceID(_ adapter: String?) -> Int32? {
        if let adapter {
            guard adapter.hasPrefix("hci"), let number = Int32(adapter.dropFirst(3)) else { return nil }
            var info = hci_dev_info()
            return hci_devinfo(number, &info) == 0 ? number : nil
        }
        let routed = hci_get_route(nil)
        if routed >= 0 { return routed }
        for number in Int32(0)..<32 {
            var info = hci_dev_info()
            if hci_devinfo(number, &info) == 0 { return number }
        }
        return nil
    }

    /// The address of adapter `name` (`hci0`), or of the first adapter.
    public static func address(of name: String?) -> BluetoothAddress? {
        guard let deviceID = deviceID(name) else { return nil }
        var info = hci_dev_info()
        guard hci_devinfo(deviceID, &info) == 0 else { return nil }
        return BluetoothAddress(littleEndian: withUnsafeBytes(of: info.bdaddr) { Array($0) })
    }
}
