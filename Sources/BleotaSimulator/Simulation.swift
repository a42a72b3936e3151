import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols

/// A whole simulated session from a `sim://` address: a world on a virtual
/// clock with the address's link model and faults, one device running the
/// device half of the protocol the address names (looked up in a
/// ``/BleotaEngine/ProtocolRegistry``), and a connector to it.
public enum Simulation {
    /// The simulated device's address.
    public static let deviceAddress = "C0:FF:EE:00:00:01"

    /// What a simulated run produced, and what the link allows.
    public struct Outcome<Value: Sendable>: Sendable {
        public var value: Value
        /// Bytes per second of the link's largest writes with no loss.
        public var linkCapacity: Double
        /// Bytes per second the device itself can write, when that is less than the link carries.
        public var deviceCapacity: Double?
        public var preset: String
        /// What the device's links reached, when it demanded security.
        public var security: LinkSecurityState?
        /// Pairings, encryptions with the bond, and packets the device dropped for want of security.
        public var pairing: PairingStatistics
    }

    /// The device configuration an address describes for `updateProtocol`'s device: its keys
    /// parsed into the protocol's typed options here, once; a value one refuses throws, naming it.
    public static func configuration(
        _ address: SimulatorAddress, for updateProtocol: any UpdateProtocol
    ) throws(DeviceConfigurationError) -> DeviceConfiguration {
        let options: ProtocolOptions
        do { options = try ProtocolOptions(parsing: address.deviceOptions, updateProtocol.deviceOptions) } catch {
            throw DeviceConfigurationError(key: error.key, error.problem)
        }
        return DeviceConfiguration(
            name: "bleota-sim", initialVersion: address.initialVersion, slotSize: address.slotSize,
            bufferCount: address.model.deviceBuffer, maximumPacket: address.model.maximumPayload,
            files: [DeviceConfiguration.welcomeFile.name: DeviceConfiguration.welcomeFile.bytes],
            options: options)
    }

    /// Runs `body` against the device `address` describes, speaking `protocol`.
    /// `pairing` answers what pairing asks when the device demands security.
    /// A pairing that fails throws ``/BleotaLink/PairingError``, whatever the body made of the connect failure.
    /// `packetTrace`, when given, receives every packet the link carried, one line each, once the body ends
    /// (`bleota-bench --trace-protocol … --trace-packets`).
    public static func run<T: Sendable>(
        _ address: SimulatorAddress, protocol updateProtocol: any UpdateProtocol, description: String,
        pairing: any PairingAgent = PairingPolicy.justWorks, packetTrace: (@Sendable ([String]) -> Void)? = nil,
        _ body: @escaping @Sendable (any DeviceConnector, any BleotaClock) async throws -> T
    ) async throws -> Outcome<T> {
        let half = try updateProtocol.makeDevice(configuration(address, for: updateProtocol))
        let record = ConnectionSecurityRecord()
        let (value, pairingStatistics) = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: address.model, faults: address.faults, seed: address.seed)
            world.setPairingAgent(pairing)
            await world.add(
                SimulatedDevice(
                    address: deviceAddress, half: half, model: address.model, speaking: updateProtocol, security: address.deviceSecurity,
                    whenQueueFull: address.whenQueueFull))
            let connector = SimulatedConnector(world: world, address: deviceAddress, description: description, security: record)
            if packetTrace != nil { world.startTrace() }
            defer { packetTrace?(world.trace) }
            do {
                let value = try await body(connector, world.clock)
                await world.shutDown()
                return (value, world.pairingStatistics)
            } catch {
                await world.shutDown()
                if let failure = record.failure { throw failure }
                throw error
            }
        }
        // What the link carries in its largest writes: our own headers count against us.
        let linkCapacity = address.model.linkCapacity
        let deviceCapacity = address.model.deviceCeiling(packetBytes: address.model.maximumPayload).flatMap { $0 < linkCapacity ? $0 : nil }
        return Outcome(
            value: value, linkCapacity: linkCapacity, deviceCapacity: deviceCapacity, preset: address.preset,
            security: address.deviceSecurity.required > .low ? record.latest : nil, pairing: pairingStatistics)
    }
}
