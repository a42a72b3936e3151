import BleotaLink
import CBlueZ
import Foundation
import Glibc

/// LE scanning. Through the kernel's management interface (Start Discovery and
/// its Device Found events, as bluetoothd scans) when it can: the kernel then
/// schedules the scan itself, with extended scanning on controllers that have
/// it, beside bluetoothd's own discovery (whose Device Found events every
/// management socket receives), and it resolves the private addresses of the
/// devices whose IRKs it holds. Otherwise (a passive scan, or no
/// `CAP_NET_ADMIN`) through an HCI socket: LE Set Scan Parameters and Enable,
/// LE Advertising Reports. Both wait through the epoll reactor.
///
/// A private address that an IRK of bleota's bonds resolves is reported with
/// the identity it stands for (``Advertisement/identity``).
public enum Scanner {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Scans on `adapter` for `duration`, returning one merged advertisement per address;
    /// sooner once an advertisement from one of `stoppingAt` (addresses as they are on the air) arrives.
    public static func scan(
        adapter: String?, duration: Duration, active: Bool = true, filter: ScanFilter = ScanFilter(),
        resolving keys: [IdentityResolvingKey]? = nil, stoppingAt: Set<String> = []
    ) async throws -> [Advertisement] {
        let keys = keys ?? bondedKeys(adapter: adapter)
        var found: [Advertisement]
        if active, let discovered = try await discover(adapter: adapter, duration: duration, stoppingAt: stoppingAt) {
            found = discovered
        } else {
            found = try await scanOverHCI(adapter: adapter, duration: duration, active: active, stoppingAt: stoppingAt)
        }
        for index in found.indices {
            guard let address = BluetoothAddress(found[index].address) else { continue }
            if found[index].addressType == "random", let identity = ResolvablePrivateAddress.identity(of: address, among: keys) {
                found[index].identity = identity.address.description
                found[index].identityType = identity.addressType?.rawValue
            } else if keys.contains(where: { $0.identity.address == address }) {
                // The kernel holds the IRK too (bleota loaded it) and reports the device under the identity it resolved.
                found[index].identity = address.description
                found[index].identityType = found[index].addressType
            }
        }
        return found.filter(filter.matches)
    }

    /// The IRKs of the bonds bleota keeps for `adapter`.
    static func bondedKeys(adapter: String?) -> [IdentityResolvingKey] {
        guard let address = BluetoothAvailability.address(of: adapter) else { return [] }
        return ((try? BondStore().bonds(adapter: address)) ?? []).compactMap(\.identityResolvingKey)
    }

    /// Discovery through the management interface; nil when it cannot be used here (then HCI is tried).
    static func discover(adapter: String?, duration: Duration, stoppingAt: Set<String> = []) async throws -> [Advertisement]? {
        guard let id = BluetoothAvailability.deviceID(adapter), let channel = try? ManagementChannel.open() else { return nil }
        defer { channel.close() }
        let index = UInt16(id)
        let events = channel.subscribe()
        var started = true
        do { _ = try await channel.send(.startDiscovery(), index: index) } catch {
            switch error.status {
            case .busy:
                // Another client (bluetoothd) is discovering: its Device Found events reach this socket too.
                started = false
            case .permissionDenied, .unknownCommand, .notSupported:
                return nil
            default:
                throw Failure(description: "\(adapter ?? "the adapter") cannot scan: \(error.status)")
            }
        }
        var merged = Merged()
        let clock = SystemClock()
        let deadline = clock.now + duration
        while clock.now < deadline, !merged.includesAny(of: stoppingAt) {
            let next: (index: UInt16, event: ManagementEvent)??
            do { next = try await withDeadline(deadline - clock.now, clock: clock) { try await events.take() } } catch { break }
            guard let next, let (eventIndex, event) = next else { break }
            guard eventIndex == index, case .deviceFound(let address, let rssi, _, let data) = event else { continue }
            merged.add(
                Advertisement(
                    address: address.address.description, addressType: address.kind == .lePublic ? "public" : "random",
                    rssi: rssi, data: data))
        }
        if started { _ = try? await channel.send(.stopDiscovery(), index: index) }
        return merged.advertisements
    }

    /// One advertisement per address, a scan response added to the advertisement it answers.
    struct Merged {
        var found: [String: Advertisement] = [:]
        var order: [String] = []

        mutating func add(_ report: Advertisement) {
            guard var existing = found[report.address] else {
                found[report.address] = report
                order.append(report.address)
                return
            }
            existing.rssi = report.rssi ?? existing.rssi
            existing.localName = report.localName ?? existing.localName
            existing.flags = report.flags ?? existing.flags
            existing.txPower = report.txPower ?? existing.txPower
            existing.manufacturer = report.manufacturer ?? existing.manufacturer
            existing.iBeacon = report.iBeacon ?? existing.iBeacon
            existing.version = report.version ?? existing.version
            for uuid in report.serviceUUIDs where !existing.serviceUUIDs.contains(uuid) { existing.serviceUUIDs.append(uuid) }
            found[report.address] = existing
        }

        var advertisements: [Advertisement] { order.compactMap { found[$0] } }

        func includesAny(of addresses: Set<String>) -> Bool { addresses.contains { found[$0] != nil } }
    }

    /// Scanning through an HCI socket (libbluetooth): set scan parameters, enable scanning, read LE
    /// Advertising Report events until the duration ends, then disable it again and restore the
    /// socket's filter.
    static func scanOverHCI(adapter: String?, duration: Duration, active: Bool, stoppingAt: Set<String> = []) async throws -> [Advertisement] {
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

        var merged = Merged()
        let flags = fcntl(dd, F_GETFL)
        _ = fcntl(dd, F_SETFL, flags | O_NONBLOCK)
        let system = LinuxSocketSystem.shared
        defer { system.reactor.forget(dd) }
        let clock = SystemClock()
        let deadline = clock.now + duration
        var buffer = [UInt8](repeating: 0, count: 260)
        while clock.now < deadline, !merged.includesAny(of: stoppingAt) {
            do {
                try await withDeadline(deadline - clock.now, clock: clock) { try await system.wait(dd, writable: false) }
            } catch {
                break  // the duration is over (or the task was cancelled)
            }
            // Drain everything that arrived, then wait again.
            while true {
                let count = buffer.withUnsafeMutableBytes { read(dd, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                // [packet type 0x04][event 0x3E][parameter length][parameters…]
                guard count > 3, buffer[0] == UInt8(HCI_EVENT_PKT), buffer[1] == UInt8(EVT_LE_META_EVENT) else { continue }
                for report in parseAdvertisingReports(Array(buffer[3..<count])) { merged.add(report) }
            }
        }
        return merged.advertisements
    }
}
