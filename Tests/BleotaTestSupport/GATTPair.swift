import BleotaATT
import BleotaLink

// Shared by the ATT tests and the protocol tests that ride on GATT.

/// The UUIDs of the test OTA service (the Nordic UART service's, as many devices use).
public let otaService = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
public let otaRX = BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!
public let otaTX = BluetoothUUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")!

/// A client bearer and a server bearer joined by a loopback ATT channel, both
/// receive loops running, on the virtual clock.
public func withGATT<T: Sendable>(
    mtu: Int = 517, setup: @escaping @Sendable (GATTServer) -> Void,
    _ body: @escaping @Sendable (GATTClient, ATTBearer, GATTServer) async throws -> T
) async throws -> T {
    try await SimulationRuntime.run { runtime in
        let (central, peripheral) = LoopbackLink.pair(maximumPayload: 517)
        let server = GATTServer()
        setup(server)
        let clientBearer = ATTBearer(link: central, clock: runtime.clock, preferredMTU: mtu)
        let serverBearer = ATTBearer(link: peripheral, clock: runtime.clock, preferredMTU: 517)
        await serverBearer.setServer(server)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await clientBearer.run()
                return nil
            }
            group.addTask {
                await serverBearer.run()
                return nil
            }
            let result = try await body(GATTClient(bearer: clientBearer), serverBearer, server)
            await clientBearer.close("done")
            await serverBearer.close("done")
            for try await _ in group {}
            return result
        }
    }
}
