import ArgumentParser
import BleotaBlueZ
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Logging

/// What a session produced, plus what the link model says about capacity when known.
struct SessionOutcome<Value: Sendable>: Sendable {
    var value: Value
    var linkCapacity: Double?
    var linkModel: String?
    /// PHY and interval of a real connection, when the address asked for them.
    var connection: ConnectionSettings? = nil
}

/// A `--device` address, parsed: which transport, and where.
enum DeviceTarget: Sendable, Equatable {
    case simulator(String)
    case ble(String)
    case udp(String)
    case serial(String)

    static let schemes = "sim://PRESET, ble://AA:BB:CC:DD:EE:FF, udp://HOST[:PORT] or serial:///dev/ttyACM0"

    init(parsing text: String) throws {
        if text.hasPrefix("sim://") { self = .simulator(text) }
        else if text.hasPrefix("ble://") { self = .ble(text) }
        else if text.hasPrefix("udp://") { self = .udp(text) }
        else if text.hasPrefix("serial://") { self = .serial(text) }
        else { throw ValidationError("--device '\(text)' is not a device address: use \(Self.schemes)") }
    }

    /// Opens whatever the address needs (a simulation, an adapter) and runs
    /// `body` with a connector and the matching clock.
    func session<T: Sendable>(
        logger: Logger, smp: Bool = false,
        _ body: @escaping @Sendable (any DeviceConnector, any BleotaClock) async throws -> T
    ) async throws -> SessionOutcome<T> {
        do {
            return try await open(logger: logger, smp: smp, body)
        } catch let error as TransferError {
            throw error.commandFailure
        } catch let error as SimulationError {
            throw CommandFailure(.failure, "simulation failed: \(error)")
        }
    }

    private func open<T: Sendable>(
        logger: Logger, smp: Bool,
        _ body: @escaping @Sendable (any DeviceConnector, any BleotaClock) async throws -> T
    ) async throws -> SessionOutcome<T> {
        switch self {
        case .simulator(let address):
            let speaksSMP = (try? SimulatorAddress(parsing: address))?.deviceProtocol == "smp"
            if smp && !speaksSMP {
                throw CommandFailure(.usage, "the simulated device speaks bleota's native protocol: add protocol=smp to the sim:// address for an SMP device")
            }
            if !smp && speaksSMP {
                throw CommandFailure(.usage, "the simulated device speaks SMP (protocol=smp): this command needs a native-protocol device")
            }
            return try await SimulatedSession.run(address: address, logger: logger, body)
        case .ble(let text):
            let target: BLEDeviceAddress
            switch BLEDeviceAddress.parse(text) {
            case .success(let parsed): target = parsed
            case .failure(let error): throw CommandFailure(.usage, error.description)
            }
            _ = try requireBluetooth(adapter: target.adapter)
            let clock = SystemClock()
            let connector = BLEConnector(target: target, clock: clock, description: text, service: smp ? .smp : .native)
            let value = try await body(connector, clock)
            return SessionOutcome(value: value, linkCapacity: nil, linkModel: nil, connection: connector.settings.latest)
        case .udp(let text), .serial(let text):
            guard smp else {
                throw CommandFailure(.usage, "\(text) is an MCUmgr/SMP transport: this command needs a native-protocol device (flash, echo, reset and image state speak SMP)")
            }
            let address: SMPNetworkAddress
            do { address = try SMPNetworkAddress(parsing: text) } catch { throw CommandFailure(.usage, error.description) }
            let value = try await body(SMPNetworkConnector(address: address, description: text), SystemClock())
            return SessionOutcome(value: value, linkCapacity: nil, linkModel: nil)
        }
    }
}
