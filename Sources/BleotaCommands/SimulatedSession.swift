import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Logging

/// Runs a command's body against the built-in simulator: one simulated device
/// on a virtual clock, the link model and faults from the `sim://` address.
enum SimulatedSession {
    static let deviceAddress = "C0:FF:EE:00:00:01"
    /// A file every simulated device starts with, so `bleota pull` has something to fetch.
    static let welcomeFile = Array("Hello from the bleota simulator.\n".utf8)

    static func run<T: Sendable>(
        address text: String, logger: Logger,
        _ body: @escaping @Sendable (any DeviceConnector, any BleotaClock) async throws -> T
    ) async throws -> SessionOutcome<T> {
        let address: SimulatorAddress
        do {
            address = try SimulatorAddress(parsing: text)
        } catch {
            throw CommandFailure(.usage, error.description)
        }
        logger.info("simulating \(address.preset): \(address.model), seed \(address.seed)")
        let value = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: address.model, faults: address.faults, seed: address.seed)
            if address.deviceProtocol == "smp" {
                let storage = SMPDeviceStorage(primary: SimulatedSMPDevice.factoryImage(version: mcubootVersion(address.initialVersion)),
                                               slotSize: address.slotSize)
                storage.withState { $0.files["/lfs/hello.txt"] = welcomeFile }
                await world.add(SimulatedSMPDevice(address: deviceAddress, storage: storage, model: address.model,
                                                   parameters: MCUmgrParameters(bufferSize: address.smpBufferSize, bufferCount: address.smpBufferCount),
                                                   swapTime: address.swapTime))
            } else {
                let storage = DeviceStorage(activeImage: Array("factory image".utf8), activeVersion: address.initialVersion,
                                            slotSize: address.slotSize)
                storage.withState { $0.files["hello.txt"] = welcomeFile }
                await world.add(SimulatedNativeDevice(address: deviceAddress, storage: storage, model: address.model))
            }
            let connector = SimulatedConnector(world: world, address: deviceAddress, description: text)
            return try await body(connector, world.clock)
        }
        // What the link carries in its largest writes: our own headers count against us.
        let capacity = address.model.capacity(payload: address.model.maximumPayload)
        return SessionOutcome(value: value, linkCapacity: capacity, linkModel: address.preset)
    }

    /// "1.2.3" → 1.2.3.0; anything unparsable → 1.0.0.
    static func mcubootVersion(_ text: String) -> MCUbootImage.Version {
        let parts = text.split(whereSeparator: { $0 == "." || $0 == "+" }).map { UInt32($0) ?? 0 }
        func part(_ index: Int) -> UInt32 { index < parts.count ? parts[index] : 0 }
        return MCUbootImage.Version(major: UInt8(clamping: part(0)), minor: UInt8(clamping: part(1)),
                                    revision: UInt16(clamping: part(2)), build: part(3))
    }
}
