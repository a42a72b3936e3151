import ArgumentParser
import BleotaATT
import BleotaBlueZ
import BleotaEngine
import BleotaLink
import BleotaSimulator
import BleotaSystem
import Foundation
import Logging

/// A `--device` address, parsed once: which transport, and where.
///
/// Parsing happens when the arguments are parsed; a malformed address is kept
/// with its error so the command reports it as its one-line usage error.
public struct DeviceAddress: ExpressibleByArgument, Sendable, CustomStringConvertible {
    public enum Kind: Sendable {
        case simulator(SimulatorAddress)
        case ble(BLEDeviceAddress)
        case network(NetworkAddress)
    }

    public let text: String
    private let parsed: Result<Kind, AddressError>

    struct AddressError: Error, Sendable {
        /// What is wrong, without naming where the address came from.
        var problem: String
        /// Whether `problem` starts with the address itself, so `--device` goes before it on the command line.
        var quotesAddress = false
        var message: String { quotesAddress ? "--device \(problem)" : problem }
    }

    static let schemes = "sim://PRESET, ble://AA:BB:CC:DD:EE:FF, udp://HOST[:PORT] or serial:///dev/ttyACM0"

    public init?(argument: String) {
        text = argument
        parsed = Self.parse(argument, registry: CommandContext.registry)
    }

    private static func parse(_ text: String, registry: ProtocolRegistry) -> Result<Kind, AddressError> {
        if text.hasPrefix("sim://") {
            do { return .success(.simulator(try SimulatorAddress(parsing: text, registry: registry))) } catch {
                return .failure(AddressError(problem: error.description))
            }
        }
        if text.hasPrefix("ble://") {
            return BLEDeviceAddress.parse(text).map(Kind.ble).mapError { AddressError(problem: $0.description) }
        }
        if text.hasPrefix("udp://") || text.hasPrefix("serial://") {
            do { return .success(.network(try NetworkAddress(parsing: text))) } catch {
                return .failure(AddressError(problem: error.description))
            }
        }
        return .failure(AddressError(problem: "'\(text)' is not a device address: use \(schemes)", quotesAddress: true))
    }

    public var description: String { text }

    /// What is wrong with the address, worded for any source (a device list names its line); nil when it parses.
    var problem: String? {
        if case .failure(let error) = parsed { return error.problem }
        return nil
    }

    /// The parsed address, or the usage error that names what is wrong with it.
    func kind() throws -> Kind {
        switch parsed {
        case .success(let kind): return kind
        case .failure(let error): throw CommandFailure(.usage, error.message)
        }
    }

    func transport() throws -> TransportKind {
        switch try kind() {
        case .simulator: .simulator
        case .ble: .ble
        case .network(.udp): .udp
        case .network(.serial): .serial
        }
    }
}

/// What a session produced, plus what the link model says about capacity when known.
struct SessionOutcome<Value: Sendable>: Sendable {
    var value: Value
    var linkCapacity: Double?
    /// What the device itself can write, when that is less than the link carries (simulator).
    var deviceCapacity: Double? = nil
    var linkModel: String?
    /// PHY and interval of a real connection, when the address asked for them.
    var connection: ConnectionSettings? = nil
    /// What protected the link, when it was encrypted.
    var security: LinkSecurityState? = nil
}

extension DeviceAddress {
    /// Decides, once, which protocol this command speaks to this device:
    /// `--protocol`, what the address says, the image, or what a BLE device offers.
    ///
    /// `pairing` is what the command will answer pairing with: the agent is set up with it before the
    /// first connection, since the kernel gives a connection the IO capability set when it is made
    /// (and keeps the link a moment after the socket closes).
    func resolveProtocol(
        explicit: String?, image: ImageProbe? = nil, needs: ProtocolCapabilities,
        timeout: Duration, pairing: PairingPolicy = .justWorks, logger: Logger
    ) async throws -> any UpdateProtocol {
        let registry = CommandContext.registry
        var request = ProtocolRequest(explicit: explicit, transport: try transport(), device: text, image: image, needs: needs)
        var source = ""
        switch try kind() {
        case .simulator(let address):
            // A simulated device runs whatever protocol the command picks (the image's, or the
            // default one) unless its address names one.
            request.deviceProtocol = address.deviceProtocol
        case .ble(let target):
            let candidates = registry.protocols.filter { $0.identity.transports.contains(.ble) && $0.capabilities.isSuperset(of: needs) }
            if explicit == nil, candidates.count > 1 {
                // What it advertises first (no connection needed), then what its GATT database offers.
                if let advertised = await advertisedServices(target), candidates.contains(where: { $0.recognises(services: advertised) }) {
                    request.offeredServices = advertised
                    source = " (from the services it advertises)"
                } else {
                    request.offeredServices = try await offeredServices(target, timeout: timeout, pairing: pairing, logger: logger)
                    source = " (from its GATT services)"
                }
            }
        case .network(.serial(let path, _)):
            // A port that is not there is what to fix, whatever protocol would have spoken over it.
            guard FileManager.default.fileExists(atPath: path) else {
                throw CommandFailure(.linkLost, "\(text): there is no serial port \(path): check the device is plugged in and the path (ls /dev/ttyACM* /dev/ttyUSB*)")
            }
        case .network:
            break
        }
        do {
            let chosen = try registry.resolve(request)
            if source.isEmpty, explicit == nil, request.deviceProtocol == nil, let image, chosen.imageAffinity(image) == .owns { source = " (from the image)" }
            logger.info("\(text): speaking \(chosen.identity.displayName)\(source)")
            if let image { logUnreadCompanions(of: image, chosen: chosen, logger: logger) }
            return chosen
        } catch {
            throw CommandFailure(error.usage ? .usage : .deviceError, error.description)
        }
    }

    /// The service UUIDs in the device's advertising data or scan response, seen within 1.5 s;
    /// nil when it is not seen or the adapter cannot scan (scanning needs `CAP_NET_RAW`).
    private func advertisedServices(_ target: BLEDeviceAddress) async -> [BluetoothUUID]? {
        let filter = ScanFilter(address: target.address.description)
        guard let seen = try? await Scanner.scan(adapter: target.adapter, duration: .milliseconds(1500), filter: filter),
            let advertisement = seen.first(where: filter.matches)
        else { return nil }
        let services = advertisement.serviceUUIDs.compactMap(BluetoothUUID.init)
        return services.isEmpty ? nil : services
    }

    /// The GATT services a BLE device offers, for protocol detection.
    private func offeredServices(_ target: BLEDeviceAddress, timeout: Duration, pairing: PairingPolicy, logger: Logger) async throws -> [BluetoothUUID] {
        _ = try requireBluetooth(adapter: target.adapter)
        // bluetoothd may hold the link (the kernel then refuses a second ATT channel): ask it what it found.
        if BluetoothDaemon.isRunning, let adapter = target.adapter ?? BluetoothAvailability.probe(adapter: nil).adapterName,
            let services = await BluetoothDaemonGATT.services(adapter: adapter, device: target.address)
        {
            return services
        }
        let connection: ATTConnection
        do { connection = try await ATTConnection.openRetrying(target, timeout: timeout, clock: SystemClock(), pairing: pairing, logger: logger) } catch {
            throw CommandFailure(.linkLost, "cannot reach \(text): \(error)")
        }
        do { return try await connection.discoverServicesAndClose() } catch {
            throw CommandFailure(.linkLost, "cannot discover \(text)'s services: \(error)")
        }
    }

    /// Opens whatever the address needs (a simulation, an adapter, a socket) and
    /// runs `body` with a connector for `protocol` and the matching clock.
    /// `pairing` answers what a device that demands security asks; a pairing that
    /// fails ends the command with ``ExitStatus/pairingFailed``, whatever step it was in.
    func session<T: Sendable>(
        protocol updateProtocol: any UpdateProtocol, logger: Logger, pairing: any PairingAgent = PairingPolicy.justWorks,
        _ body: @escaping @Sendable (any DeviceConnector, any BleotaClock) async throws -> T
    ) async throws -> SessionOutcome<T> {
        do {
            switch try kind() {
            case .simulator(let address):
                logger.info("simulating \(address.preset): \(address.model), seed \(address.seed)")
                let text = self.text
                let outcome = try await Simulation.run(address, protocol: updateProtocol, description: text, pairing: pairing) { connector, clock in
                    guard let simulated = connector as? SimulatedConnector else { return try await body(connector, clock) }
                    return try await recoveringSilentDrops(simulated, clock: clock, pairing: pairing, description: text, logger: logger, body)
                }
                if let security = outcome.security { logger.info("\(text): link security \(security)") }
                return SessionOutcome(
                    value: outcome.value, linkCapacity: outcome.linkCapacity, deviceCapacity: outcome.deviceCapacity,
                    linkModel: outcome.preset, security: outcome.security)
            case .ble(let target):
                _ = try requireBluetooth(adapter: target.adapter)
                guard let service = updateProtocol.identity.gattServices.first else {
                    throw CommandFailure(.usage, "\(updateProtocol.identity.displayName) has no GATT service to reach \(text) through")
                }
                let clock = SystemClock()
                let connector = BLEConnector(
                    target: target, clock: clock, description: text, service: service,
                    allowsCreditChannel: updateProtocol.identity.transports.contains(.creditChannel),
                    pairing: pairing, logger: logger)
                let value: T
                do { value = try await recoveringSilentDrops(connector, clock: clock, pairing: pairing, description: text, logger: logger, body) } catch {
                    await PairingService.shared.stopAll()
                    throw error
                }
                await PairingService.shared.stopAll()
                return SessionOutcome(value: value, connection: connector.settings.latest, security: connector.security.latest)
            case .network(let address):
                _ = try transport()  // the protocol must run over it
                let connector = NetworkConnector(address: address, description: text) { updateProtocol.frame(serial: $0) }
                return SessionOutcome(value: try await body(connector, SystemClock()))
            }
        } catch let error as PairingError {
            throw CommandFailure(.pairingFailed, "\(text): \(error)")
        } catch let error as TransferError {
            throw error.commandFailure
        } catch let error as SimulationError {
            // Every update ends within the bounds its options set (the progress floor, the tries); a
            // simulated one that runs a day of virtual time past them is a bleota bug to report.
            throw CommandFailure(.failure, "simulation failed: \(error): this is a bug in bleota; please report it with the command line")
        } catch let error as DeviceConfigurationError {
            throw CommandFailure(.usage, "sim:// \(error)")
        }
    }
}

/// Runs `body` with `connector`; when its connect went unanswered on a link that may be less
/// secure than the device wants, runs it once more with the connector raising the link first, as
/// ``/BleotaLink/SilentDropRecovery`` decides. A device that protects its characteristic but not
/// its CCC descriptor drops every write on such a link without a word, so silence is the only sign.
/// A pairing failure, however the protocol worded the connect failure, is what is thrown.
func recoveringSilentDrops<Connector: SecurityRaisingConnector, T: Sendable>(
    _ connector: Connector, clock: any BleotaClock, pairing: any PairingAgent, description text: String, logger: Logger,
    _ body: @Sendable (any DeviceConnector, any BleotaClock) async throws -> T
) async throws -> T {
    var current = connector
    var raised = false
    while true {
        do { return try await body(current, clock) } catch {
            if let failure = current.security.failure { throw failure }
            guard var failure = error as? TransferError, failure.code == .timeout, failure.step == .connect else { throw error }
            let reached = current.security.latest?.level ?? .low
            switch SilentDropRecovery.next(reached: reached, raised: raised, canAuthenticate: pairing.canAuthenticate) {
            case .retry(let level):
                logger.notice(
                    "\(text): \(failure.message) on a link at security \(reached.name); a device may drop writes below the security it wants without a word: connecting again at security \(level.name)"
                )
                current = current.raisingSecurity(to: level)
                raised = true
            case .fail(let pairingFailure):
                throw pairingFailure
            case .report(let hint):
                if let hint { failure.message += hint }
                throw failure
            }
        }
    }
}

/// Says, at info level, which files beside the image the protocols not chosen would have read with
/// it (a Nordic `.dat` beside a plain `.bin`) and that are left unread.
func logUnreadCompanions(of image: ImageProbe, chosen: (any UpdateProtocol)?, logger: Logger) {
    for other in CommandContext.registry.protocols where other.name != chosen?.name {
        if let note = other.unreadCompanion(of: image) { logger.info("\(note)") }
    }
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
