import BleotaATT
import BleotaBlueZ
import BleotaEngine
import BleotaLink
import Foundation
import Glibc
import BleotaProtocols
import Logging
import Synchronization

/// The GATT service that carries bleota's native protocol: packets to the
/// device as Write Without Response on RX, from it as notifications on TX.
enum NativeGATTService {
    static let service = BluetoothUUID("B1E07A00-5E1F-4C3B-9A6E-0B1E07A00001")!
    static let rx = BluetoothUUID("B1E07A00-5E1F-4C3B-9A6E-0B1E07A00002")!
    static let tx = BluetoothUUID("B1E07A00-5E1F-4C3B-9A6E-0B1E07A00003")!
}

/// Turns "Bluetooth is not usable here" into the CLI's exit code 7 and one line.
func requireBluetooth(adapter: String?) throws -> BluetoothAddress {
    let availability = BluetoothAvailability.probe(adapter: adapter)
    guard case .available = availability else { throw CommandFailure(.bluetoothUnavailable, availability.description) }
    guard let address = BluetoothAvailability.address(of: adapter) else {
        throw CommandFailure(.bluetoothUnavailable, BluetoothAvailability.noAdapter(adapter).description)
    }
    return address
}

/// An ATT connection to a device over the LE fixed channel (CID 4).
struct ATTConnection {
    let bearer: ATTBearer
    let client: GATTClient
    let runner: Task<Void, Never>
    /// What the PHY and interval ended up as, when the address asked for either.
    let settings: ConnectionSettings?

    static func open(_ target: BLEDeviceAddress, timeout: Duration, clock: any BleotaClock) async throws(LinkError) -> ATTConnection {
        guard let local = BluetoothAvailability.address(of: target.adapter) else {
            throw .unreachable(BluetoothAvailability.noAdapter(target.adapter).description)
        }
        let socket: L2CAPSocket
        do {
            socket = try await L2CAPSocket.connect(
                from: L2CAPAddress(address: local, type: .public, cid: L2CAPAddress.attChannel),
                to: L2CAPAddress(address: target.address, type: target.type, cid: L2CAPAddress.attChannel),
                security: target.security, timeout: timeout, clock: clock)
        } catch {
            throw .unreachable("cannot connect to \(target.address): \(error)")
        }
        let settings = applyConnectionRequest(target, socket: socket)
        let bearer = ATTBearer(link: L2CAPLink(socket: socket, maximumPayload: 517, description: "att"), clock: clock)
        let runner = Task { await bearer.run() }
        return ATTConnection(bearer: bearer, client: GATTClient(bearer: bearer), runner: runner, settings: settings)
    }
}

/// Asks the controller for the PHY and interval `target` names, if any, on the
/// connection under `socket`. Never fails the connection: what could not be
/// done comes back as notes.
func applyConnectionRequest(_ target: BLEDeviceAddress, socket: L2CAPSocket) -> ConnectionSettings? {
    guard !target.connection.isEmpty else { return nil }
    let adapterName = target.adapter ?? "the adapter"
    guard let handle = socket.connectionHandle else {
        return ConnectionSettings(notes: ["cannot find the connection's HCI handle, so the PHY and interval were left as they are"])
    }
    do {
        let controller = HCIController(transport: try RawHCISocket(adapter: target.adapter))
        return ConnectionControl.apply(target.connection, handle: handle, adapterName: adapterName, controller: controller)
    } catch {
        return ConnectionSettings(notes: ["the PHY and interval were left as they are: \(error)"])
    }
}

/// The last connection settings a connector saw, for the final report.
final class ConnectionSettingsRecord: Sendable {
    private let value = Mutex<ConnectionSettings?>(nil)
    func record(_ settings: ConnectionSettings?) { if let settings { value.withLock { $0 = settings } } }
    var latest: ConnectionSettings? { value.withLock { $0 } }
}

/// The GATT service a connector looks for.
enum GATTOTAService: Sendable {
    /// bleota's own: RX (write without response) and TX (notify).
    case native
    /// MCUmgr's SMP: one characteristic, written without response and notifying.
    case smp

    var service: BluetoothUUID {
        self == .native ? NativeGATTService.service : BluetoothUUID(SMPTransport.serviceUUID)!
    }
    var write: BluetoothUUID {
        self == .native ? NativeGATTService.rx : BluetoothUUID(SMPTransport.characteristicUUID)!
    }
    var notify: BluetoothUUID {
        self == .native ? NativeGATTService.tx : BluetoothUUID(SMPTransport.characteristicUUID)!
    }
    var name: String { self == .native ? "bleota OTA" : "MCUmgr SMP" }
}

/// The SDU size bleota asks for on credit-based channels.
let creditChannelMTU = 1024

/// Connects to a device's native-protocol GATT service (or its LE credit-based
/// channel when the address names a PSM), again after every reboot.
struct BLEConnector: DeviceConnector {
    let target: BLEDeviceAddress
    let clock: any BleotaClock
    let description: String
    var service: GATTOTAService = .native
    let settings = ConnectionSettingsRecord()

    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        // A rebooting device is briefly absent: try again shortly.
        do {
            return try await retryingUntil(deadline: clock.now + timeout, clock: clock, pause: .milliseconds(250)) {
                remaining throws(LinkError) in try await attempt(timeout: remaining)
            }
        } catch {
            throw error.lastError ?? .unreachable("no attempt made")
        }
    }

    private func attempt(timeout: Duration) async throws(LinkError) -> any Link {
        if let psm = target.psm, service == .native {
            // A credit-based channel carries the protocol's packets directly;
            // if the device does not accept it, fall back to GATT.
            if let link = await creditBasedChannel(psm: psm, timeout: timeout) { return link }
        }
        let connection = try await ATTConnection.open(target, timeout: timeout, clock: clock)
        settings.record(connection.settings)
        do {
            let mtu = try await connection.client.exchangeMTU()
            guard let found = try await connection.client.discoverPrimaryServices(service.service).first else {
                await connection.bearer.close("no \(service.name) service")
                throw LinkError.unreachable("\(target.address) does not offer the \(service.name) service \(service.service)")
            }
            let characteristics = try await connection.client.discoverCharacteristics(found)
            guard let rx = characteristics.first(where: { $0.uuid == service.write }),
                  let tx = characteristics.first(where: { $0.uuid == service.notify }) else {
                await connection.bearer.close("incomplete service")
                throw LinkError.unreachable("\(target.address)'s \(service.name) service lacks its characteristics")
            }
            try await connection.client.subscribe(tx)
            return GATTLink(client: connection.client, writeHandle: rx.valueHandle, notifyHandle: tx.valueHandle, mtu: mtu,
                            description: description)
        } catch let error as LinkError {
            throw error
        } catch {
            await connection.bearer.close("\(error)")
            throw .unreachable("GATT setup with \(target.address) failed: \(error)")
        }
    }

    private func creditBasedChannel(psm: UInt16, timeout: Duration) async -> (any Link)? {
        guard let local = BluetoothAvailability.address(of: target.adapter) else { return nil }
        do {
            let socket = try await L2CAPSocket.connect(
                from: L2CAPAddress(address: local, type: .public),
                to: L2CAPAddress(address: target.address, type: target.type, psm: psm),
                security: target.security, receiveMTU: creditChannelMTU, timeout: timeout, clock: clock)
            // The peer's receive MTU bounds what we may send in one SDU.
            var sendMTU = 23
            if let raw = try? socket.system.getOption(socket.fd, level: 274, name: 12, size: 2), raw.count == 2 {
                sendMTU = Int(raw[0]) | Int(raw[1]) << 8
            }
            settings.record(applyConnectionRequest(target, socket: socket))
            return L2CAPLink(socket: socket, maximumPayload: max(23, sendMTU), description: description + " (L2CAP CoC)")
        } catch {
            return nil
        }
    }
}

/// Which update service a BLE device offers: bleota's native one, MCUmgr's SMP, or both
/// (then `preferSMP` decides: true for MCUboot images).
func detectBLEProtocol(_ text: String, preferSMP: Bool, timeout: Duration) async throws -> DeviceProtocol {
    let target: BLEDeviceAddress
    switch BLEDeviceAddress.parse(text) {
    case .success(let parsed): target = parsed
    case .failure(let error): throw CommandFailure(.usage, error.description)
    }
    _ = try requireBluetooth(adapter: target.adapter)
    // Retried like every connect: a link the kernel is still tearing down refuses for a moment.
    let clock = SystemClock()
    let connection: ATTConnection
    do {
        connection = try await retryingUntil(deadline: clock.now + timeout, clock: clock, pause: .milliseconds(250)) {
            remaining throws(LinkError) in try await ATTConnection.open(target, timeout: remaining, clock: clock)
        }
    } catch {
        throw CommandFailure(.linkLost, "cannot reach \(text): \(error.lastError.map { "\($0)" } ?? "timed out")")
    }
    let services: [GATTService]
    do {
        _ = try await connection.client.exchangeMTU()
        services = try await connection.client.discoverPrimaryServices()
    } catch {
        await connection.bearer.close("done")
        throw CommandFailure(.linkLost, "cannot discover \(text)'s services: \(error)")
    }
    await connection.bearer.close("protocol detected")
    let native = services.contains { $0.uuid == GATTOTAService.native.service }
    let smp = services.contains { $0.uuid == GATTOTAService.smp.service }
    switch (native, smp) {
    case (true, true): return preferSMP ? .smp : .native
    case (true, false): return .native
    case (false, true): return .smp
    case (false, false):
        throw CommandFailure(.deviceError, "\(text) offers neither bleota's OTA service nor MCUmgr's SMP service: is it running OTA-capable firmware?")
    }
}
