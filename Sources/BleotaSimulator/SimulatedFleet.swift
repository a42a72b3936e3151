import BleotaEngine
import BleotaLink

/// The simulated devices of a fleet: each in its own ``SimulatedWorld`` (its
/// own preset, faults and seed, as its `sim://` address says), all on one
/// runtime's clock, reached through ``SimulatedAdapter``s whose radios their
/// connections share.
public final class SimulatedFleet: Sendable {
    public let runtime: SimulationRuntime
    public let adapters: [String: SimulatedAdapter]

    public init(runtime: SimulationRuntime, adapterNames: [String]) {
        self.runtime = runtime
        var adapters: [String: SimulatedAdapter] = [:]
        for name in adapterNames { adapters[name] = SimulatedAdapter(name: name) }
        self.adapters = adapters
    }

    /// One device: its world, the device half the protocol makes for its address, and a connector to it.
    public struct Member: Sendable {
        public let world: SimulatedWorld
        public let half: any DeviceHalf
        public let connector: SimulatedConnector
        /// The link's capacity in bytes per second (one connection with the radio to itself).
        public let linkCapacity: Double

        /// The next connections go through `adapter`.
        public func use(adapter: SimulatedAdapter?) { world.use(adapter: adapter) }
    }

    /// The device of `address`, with the security its address demands (`security=`), paired
    /// through the world's agent (``SimulatedWorld/setPairingAgent(_:)``) as `flash` pairs one.
    public func add(_ address: SimulatorAddress, protocol updateProtocol: any UpdateProtocol, description: String) async throws -> Member {
        let half = try updateProtocol.makeDevice(Simulation.configuration(address, for: updateProtocol))
        let world = SimulatedWorld(runtime: runtime, model: address.model, faults: address.faults, seed: address.seed)
        await world.add(
            SimulatedDevice(
                address: Simulation.deviceAddress, half: half, model: address.model, speaking: updateProtocol, security: address.deviceSecurity,
                whenQueueFull: address.whenQueueFull))
        let connector = SimulatedConnector(world: world, address: Simulation.deviceAddress, description: description, security: ConnectionSecurityRecord())
        return Member(
            world: world, half: half, connector: connector,
            linkCapacity: address.model.linkCapacity)
    }
}
