import BleotaEngine
import BleotaLink
import BleotaProtocols
import Testing

@testable import BleotaSimulator

/// A try that fails closes what it opened: a connected peripheral does not advertise, so a link
/// left open would hide the device from the next try (found by a fleet whose device never answered
/// its first HELLO and was then unreachable for two more tries).
@Suite struct NativeConnectFailureTests {
    @Test func aDeviceThatNeverAnswersHelloIsLeftDisconnected() async throws {
        let parsed = try SimulatorAddress(parsing: "sim://2m-dle?notify-loss=1&seed=1")
        let (step, advertising) = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            let storage = DeviceStorage(activeImage: [0], activeVersion: "1", slotSize: 4096)
            await world.add(
                SimulatedDevice(
                    address: "C0:FF:EE:00:00:01",
                    half: NativeDevice(name: "quiet", storage: storage, bufferCount: 8, maximumPacket: 244),
                    model: parsed.model))
            let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: "quiet")
            var failure: TransferError?
            do throws(TransferError) {
                _ = try await NativeUpdater(connector: connector, clock: world.clock).flash(image: [1, 2, 3], version: "2")
            } catch { failure = error }
            let seen = await world.scan().map(\.address)
            await world.shutDown()
            return (failure?.step, seen)
        }
        #expect(step == .connect)
        #expect(advertising == ["C0:FF:EE:00:00:01"], "the device advertises again: its connection was closed")
    }
}
