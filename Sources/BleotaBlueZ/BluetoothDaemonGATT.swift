import BleotaATT
import BleotaLink
import BleotaSystem
import CSDBus
import Glibc
import Logging
import Synchronization

/// A protocol's packet service reached through bluetoothd's own GATT client,
/// for a device bluetoothd is already connected to.
///
/// The kernel allows one ATT channel per LE link: once bluetoothd holds it (it
/// connected, and runs its GATT client there), bleota's own `connect()` to CID 4
/// fails with `EBUSY`; when bleota connects first, bluetoothd runs no GATT client
/// on that link at all. So where bluetoothd holds the link, bleota shares it:
/// `org.bluez.GattCharacteristic1.AcquireWrite` and `AcquireNotify` hand over
/// a socket each, on which every datagram is one Write Command or one
/// notification, carried on bluetoothd's ATT bearer beside its own requests
/// (BlueZ `doc/org.bluez.GattCharacteristic.rst`). bluetoothd raises the
/// link's security itself when the device refuses the subscription, and asks
/// bleota's registered agent.
public enum BluetoothDaemonGATT {
    /// One object bluetoothd exports: its path, and the string and boolean properties of one interface.
    struct ManagedObject {
        var path: String
        var interface: String
        var strings: [String: String] = [:]
        var flags: [String: Bool] = [:]
        var lists: [String: [String]] = [:]
    }

    /// bluetoothd's objects with `interfaces` (`ObjectManager.GetManagedObjects`), their string and boolean properties read.
    static func objects(_ bus: SystemBus, interfaces: Set<String>) async throws(BluetoothDaemonError) -> [ManagedObject] {
        let reply = try await bus.call("org.bluez", path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects")
        defer { bus.release(reply) }
        let message = reply.pointer
        func enter(_ type: Unicode.Scalar, _ contents: String?) -> Bool {
            sd_bus_message_enter_container(message, CChar(UInt8(ascii: type)), contents) > 0
        }
        func exit() { _ = sd_bus_message_exit_container(message) }
        var found: [ManagedObject] = []
        guard enter("a", "{oa{sa{sv}}}") else { return found }
        while enter("e", "oa{sa{sv}}") {
            let path = BusArguments.readString(message, type: "o") ?? ""
            _ = enter("a", "{sa{sv}}")
            while enter("e", "sa{sv}") {
                let interface = BusArguments.readString(message) ?? ""
                if interfaces.contains(interface) {
                    var object = ManagedObject(path: path, interface: interface)
                    _ = enter("a", "{sv}")
                    while enter("e", "sv") {
                        let key = BusArguments.readString(message) ?? ""
                        var type: CChar = 0
                        var contents: UnsafePointer<CChar>?
                        _ = sd_bus_message_peek_type(message, &type, &contents)
                        let signature = contents.map { String(cString: $0) } ?? ""
                        if signature == "s" || signature == "o", enter("v", signature) {
                            object.strings[key] = BusArguments.readString(message, type: signature == "s" ? "s" : "o")
                            exit()
                        } else if signature == "as", enter("v", "as") {
                            var items: [String] = []
                            if enter("a", "s") {
                                while let item = BusArguments.readString(message) { items.append(item) }
                                exit()
                            }
                            object.lists[key] = items
                            exit()
                        } else if signature == "b", enter("v", "b") {
                            var value: Int32 = 0
                            if sd_bus_message_read_basic(message, CChar(UInt8(ascii: "b")), &value) >= 0 { object.flags[key] = value != 0 }
                            exit()
                        } else {
                            _ = sd_bus_message_skip(message, "v")
                        }
                        exit()
                    }
                    exit()
                    found.append(object)
                } else {
                    _ = sd_bus_message_skip(message, "a{sv}")
                }
                exit()
            }
            exit()
            exit()
        }
        return found
    }

    /// bluetoothd's object for `device` on `adapter`, found by its `Address` (its path keeps the address
    /// the device was first seen at, a private one for a device with privacy).
    static func deviceObject(_ objects: [ManagedObject], adapter: String, device: BluetoothAddress) -> ManagedObject? {
        objects.first {
            $0.interface == "org.bluez.Device1" && $0.path.hasPrefix("/org/bluez/\(adapter)/")
                && $0.strings["Address"]?.uppercased() == device.description
        }
    }

    /// The GATT services bluetoothd found on `device`, when it holds a resolved link to it.
    public static func services(adapter: String, device: BluetoothAddress) async -> [BluetoothUUID]? {
        guard let bus = try? await SystemBus.open() else { return nil }
        let found = deviceObject((try? await objects(bus, interfaces: ["org.bluez.Device1"])) ?? [], adapter: adapter, device: device)
        await bus.close()
        guard let object = found, object.flags["Connected"] == true, object.flags["ServicesResolved"] == true else { return nil }
        return object.lists["UUIDs"]?.compactMap(BluetoothUUID.init)
    }

    /// Whether bluetoothd is connected to `device` and has resolved its GATT services.
    public static func holdsLink(adapter: String, device: BluetoothAddress, logger: Logger? = nil) async -> Bool {
        let bus: SystemBus
        do { bus = try await SystemBus.open() } catch {
            logger?.debug("\(error)")
            return false
        }
        var held = false
        do {
            let object = deviceObject(try await objects(bus, interfaces: ["org.bluez.Device1"]), adapter: adapter, device: device)
            held = object?.flags["Connected"] == true && object?.flags["ServicesResolved"] == true
        } catch {
            logger?.debug("\(error)")
        }
        await bus.close()
        return held
    }

    /// `AcquireWrite` or `AcquireNotify` on `path`: the socket (ours to close) and the largest value it carries.
    static func acquire(_ bus: SystemBus, path: String, member: String) async throws(LinkError) -> (fd: Int32, mtu: Int) {
        let reply: SystemBus.Message
        do {
            reply = try await bus.call("org.bluez", path: path, interface: "org.bluez.GattCharacteristic1", member: member) {
                BusArguments.appendEmptyOptions($0)
            }
        } catch {
            throw .unreachable("bluetoothd refused \(member) on \(path): \(error)")
        }
        defer { bus.release(reply) }
        var fd: Int32 = -1
        var mtu: UInt16 = 0
        guard sd_bus_message_read_basic(reply.pointer, CChar(UInt8(ascii: "h")), &fd) >= 0,
            sd_bus_message_read_basic(reply.pointer, CChar(UInt8(ascii: "q")), &mtu) >= 0, fd >= 0
        else {
            throw .unreachable("bluetoothd's \(member) reply is not (h, q)")
        }
        // The descriptor belongs to the message: keep a copy of our own.
        let owned = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard owned >= 0 else { throw .system("cannot keep the socket bluetoothd gave: \(String(cString: strerror(errno)))") }
        _ = fcntl(owned, F_SETFL, fcntl(owned, F_GETFL) | O_NONBLOCK)
        return (owned, Int(mtu))
    }

    /// The protocol's link over bluetoothd's GATT client: writes to `service.write`, notifications of `service.notify`.
    public static func link(
        adapter: String, device: BluetoothAddress, service: GATTPacketService, description: String,
        logger: Logger? = nil
    ) async throws(LinkError)
        -> any Link
    {
        guard service.channels.isEmpty else {
            throw .unreachable(
                "bluetoothd holds the link to \(device), and bleota can share it only for single-characteristic services; disconnect it first (bluetoothctl disconnect \(device))")
        }
        let bus: SystemBus
        do { bus = try await SystemBus.open() } catch { throw .unreachable(error.description) }
        do throws(LinkError) {
            let all: [ManagedObject]
            do { all = try await objects(bus, interfaces: ["org.bluez.Device1", "org.bluez.GattCharacteristic1"]) } catch {
                throw LinkError.unreachable("cannot read bluetoothd's objects: \(error)")
            }
            guard let deviceObject = deviceObject(all, adapter: adapter, device: device) else {
                throw LinkError.unreachable("bluetoothd does not know \(device)")
            }
            func characteristic(_ uuid: BluetoothUUID) -> String? {
                all.first {
                    $0.interface == "org.bluez.GattCharacteristic1" && $0.path.hasPrefix(deviceObject.path + "/")
                        && $0.strings["UUID"]?.uppercased() == uuid.description.uppercased()
                }?.path
            }
            guard let writePath = characteristic(service.write), let notifyPath = characteristic(service.notify) else {
                throw LinkError.unreachable("bluetoothd has not found the \(service.name) service's characteristics on \(device)")
            }
            // Subscribing first: a device that demands security refuses the CCC write, and bluetoothd pairs.
            let notifying = try await acquire(bus, path: notifyPath, member: "AcquireNotify")
            let writing: (fd: Int32, mtu: Int)
            do { writing = try await acquire(bus, path: writePath, member: "AcquireWrite") } catch {
                Glibc.close(notifying.fd)
                throw error
            }
            logger?.debug("acquired \(writePath) for writing (mtu \(writing.mtu)) and \(notifyPath) for notifications (mtu \(notifying.mtu))")
            // The bus connection stays open with the link: bluetoothd releases what a client acquired
            // (and unsubscribes) when that client leaves the bus.
            return DaemonGATTLink(
                writeFD: writing.fd, notifyFD: notifying.fd, bus: bus,
                maximumPayload: min(writing.mtu, ATTLimits.maximumAttributeValue), description: description + " (through bluetoothd)")
        } catch {
            await bus.close()
            throw error
        }
    }
}

/// Two sockets bluetoothd handed over: Write Commands out, notifications in, one per datagram.
final class DaemonGATTLink: Link {
    let writeFD: Int32
    let notifyFD: Int32
    /// The bus the sockets were acquired on: bluetoothd keeps them while it is connected.
    let bus: SystemBus
    let parameters: LinkParameters
    private let closed = Mutex(false)
    private let reactor = DescriptorReactor.shared

    init(writeFD: Int32, notifyFD: Int32, bus: SystemBus, maximumPayload: Int, description: String) {
        self.writeFD = writeFD
        self.notifyFD = notifyFD
        self.bus = bus
        parameters = LinkParameters(maximumPayload: maximumPayload, description: description)
    }

    func send(_ packet: [UInt8]) async throws(LinkError) {
        guard packet.count <= parameters.maximumPayload else { throw .payloadTooLarge(size: packet.count, maximum: parameters.maximumPayload) }
        while true {
            if closed.withLock({ $0 }) { throw .disconnected("closed") }
            let sent = packet.withUnsafeBytes { Glibc.send(writeFD, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent == packet.count { return }
            guard sent < 0, errno == EAGAIN || errno == EINTR else {
                throw .disconnected("bluetoothd closed the write socket: \(String(cString: strerror(errno)))")
            }
            do { try await reactor.wait(writeFD, writable: true) } catch { throw .cancelled }
        }
    }

    func receive() async throws(LinkError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 600)
        while true {
            if closed.withLock({ $0 }) { throw .disconnected("closed") }
            let count = buffer.withUnsafeMutableBytes { Glibc.recv(notifyFD, $0.baseAddress, $0.count, 0) }
            if count > 0 { return Array(buffer[..<count]) }
            if count == 0 { throw .disconnected("bluetoothd closed the notification socket (the device disconnected)") }
            guard errno == EAGAIN || errno == EINTR else {
                throw .disconnected("the notification socket failed: \(String(cString: strerror(errno)))")
            }
            do { try await reactor.wait(notifyFD, writable: false) } catch DescriptorWaitError.cancelled { throw .cancelled } catch {
                throw .disconnected("closed")
            }
        }
    }

    func close() async {
        let first = closed.withLock { state -> Bool in
            defer { state = true }
            return !state
        }
        guard first else { return }
        reactor.forget(writeFD)
        reactor.forget(notifyFD)
        Glibc.close(writeFD)
        Glibc.close(notifyFD)
        await bus.close()
    }
}
