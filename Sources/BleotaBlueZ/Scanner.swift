import BleotaLink
import CBlueZ
import Foundation
import Glibc

/// LE scanning through an HCI socket (libbluetooth): set scan parameters,
/// enable scanning, read LE Advertising Report events until the duration
/// ends, then disable it again and restore the socket's filter. The socket is
/// non-blocking and waited on through the same epoll reactor as the L2CAP
/// sockets: no thread of its own, no polling loop.
public enum Scanner {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Scans on `adapter` for `duration`, returning one merged advertisement per address.
    public static func scan(adapter: String?, duration: Duration, active: Bool = true, filter: ScanFilter = ScanFilter()) async throws -> [Advertisement] {
        let deviceID = BluetoothAvailability.deviceID(adapter) ?? -1
        guard deviceID >= 0 else { throw Failure(description: BluetoothAvailability.noAdapter(adapter).description) }
        let dd = hci_open_dev(deviceID)
        guard dd >= 0 else { throw Failure(description: "cannot open \(adapter ?? "the adapter"): \(String(cString: strerror(errno)))") }
        defer { hci_close_dev(dd) }

        // Interval and window 10 ms (0x0010 × 0.625 ms), public own address, accept all.
        var status = hci_le_set_scan_parameters(dd, active ? 0x01 : 0x00, UInt16(0x0010).littleEndian, UInt16(0x0010).littleEndian, 0x00, 0x00, 1000)
        guard status >= 0 else {
            throw Failure(description: "the controller refused the scan parameters (\(String(cString: strerror(errno)))): is another scan running?")
        }
        status = hci_le_set_scan_enable(dd, 0x01, 0x00, 1000)
        guard status >= 0 else { throw Failure(description: "the controller refused to start scanning: \(String(cString: strerror(errno)))") }
        defer { _ = hci_le_set_scan_enable(dd, 0x00, 0x00, 1000) }

        var original = hci_filter()
        var length = socklen_t(MemoryLayout<hci_filter>.size)
        getsockopt(dd, SOL_HCI, HCI_FILTER, &original, &length)
        defer { setsockopt(dd, SOL_HCI, HCI_FILTER, &original, socklen_t(MemoryLayout<hci_filter>.size)) }
        var filterBits = hci_filter()
        // Only HCI event packets, only LE Meta events (hci_filter_set_ptype / set_event, inlined).
        filterBits.type_mask = 1 << UInt32(HCI_EVENT_PKT)
        let event = UInt32(EVT_LE_META_EVENT)
        withUnsafeMutableBytes(of: &filterBits.event_mask) { raw in
            let words = raw.bindMemory(to: UInt32.self)
            words[Int(event >> 5)] |= 1 << (event & 31)
        }
        setsockopt(dd, SOL_HCI, HCI_FILTER, &filterBits, socklen_t(MemoryLayout<hci_filter>.size))

        var found: [String: Advertisement] = [:]
        var order: [String] = []
        let flags = fcntl(dd, F_GETFL)
        _ = fcntl(dd, F_SETFL, flags | O_NONBLOCK)
        let system = LinuxSocketSystem.shared
        defer { system.reactor.forget(dd) }
        let clock = SystemClock()
        let deadline = clock.now + duration
        var buffer = [UInt8](repeating: 0, count: 260)
        while clock.now < deadline {
            do {
                try await withDeadline(deadline - clock.now, clock: clock) { try await system.wait(dd, writable: false) }
            } catch {
                break // the duration is over (or the task was cancelled)
            }
            // Drain everything that arrived, then wait again.
            while true {
                let count = buffer.withUnsafeMutableBytes { read(dd, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                // [packet type 0x04][event 0x3E][parameter length][parameters…]
                guard count > 3, buffer[0] == UInt8(HCI_EVENT_PKT), buffer[1] == UInt8(EVT_LE_META_EVENT) else { continue }
                for report in parseAdvertisingReports(Array(buffer[3..<count])) {
                    if var existing = found[report.address] {
                        // A scan response adds to what the advertisement said.
                        existing.rssi = report.rssi ?? existing.rssi
                        existing.localName = report.localName ?? existing.localName
                        existing.flags = report.flags ?? existing.flags
                        existing.txPower = report.txPower ?? existing.txPower
                        existing.manufacturer = report.manufacturer ?? existing.manufacturer
                        existing.iBeacon = report.iBeacon ?? existing.iBeacon
                        existing.version = report.version ?? existing.version
                        for uuid in report.serviceUUIDs where !existing.serviceUUIDs.contains(uuid) { existing.serviceUUIDs.append(uuid) }
                        found[report.address] = existing
                    } else {
                        found[report.address] = report
                        order.append(report.address)
                    }
                }
            }
        }
        return order.compactMap { found[$0] }.filter(filter.matches)
    }
}
