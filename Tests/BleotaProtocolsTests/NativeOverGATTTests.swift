import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Synchronization
import Testing

@testable import BleotaProtocols

// The native protocol over ATT. Here rather than in BleotaATTTests, which
// test ATT and GATT on their own (they depend only on BleotaATT, BleotaLink and
// BleotaCodec): this test is about a protocol and the engine riding on GATT.

@Suite struct NativeOverGATTTests {
    /// The engine and the native protocol over ATT: a whole flash through
    /// GATTLink (host) and GATTPeripheralLink (device), byte-identical at the end.
    @Test func nativeFlashOverGATT() async throws {
        let storage = DeviceStorage(activeImage: [0], activeVersion: "1.0.0", slotSize: 64 * 1024)
        storage.withState { $0.bootToBootloader = true }
        let image = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 5) }
        let box = Mutex<(@Sendable (ATTBearer) async -> GATTPeripheralLink)?>(nil)
        let report = try await withGATT(
            mtu: 247,
            setup: { server in
                let service = GATTPeripheralLink.addPacketService(to: server, service: otaService, rx: otaRX, tx: otaTX)
                box.withLock { $0 = service.makeLink }
            }
        ) { client, serverBearer, _ in
            let mtu = try await client.exchangeMTU()
            let ota = try #require(try await client.discoverPrimaryServices(otaService).first)
            let characteristics = try await client.discoverCharacteristics(ota)
            try await client.subscribe(characteristics[1])
            let hostLink = GATTLink(
                client: client, writeHandle: characteristics[0].valueHandle,
                notifyHandle: characteristics[1].valueHandle, mtu: mtu, description: "gatt")
            let deviceLink = await box.withLock { $0 }!(serverBearer)
            let device = NativeDevice(name: "gatt", storage: storage, bufferCount: 32, maximumPacket: mtu - 3)
            let clock = client.bearer.clock
            return try await withThrowingTaskGroup(of: UpdateReport?.self) { group in
                group.addTask {
                    await device.serve(deviceLink, environment: NativeDeviceEnvironment(clock: clock) { _ in })
                    return nil
                }
                let connector = FixedConnector(link: hostLink)
                var tuning = TransferTuning()
                tuning.maxReconnects = 0
                let updater = NativeUpdater(connector: connector, clock: clock, tuning: tuning)
                // Transfer and verify only: activation would reboot the device and drop the link.
                let report = try await updater.push(file: image, name: "over-gatt.bin")
                await deviceLink.close()
                for try await _ in group {}
                return report
            }
        }
        #expect(storage.snapshot.files["over-gatt.bin"] == image)
        #expect(report.packetSize == 244 - 5)
    }
}

/// A connector that hands out one existing link.
struct FixedConnector: DeviceConnector {
    let link: any Link
    var description: String { "fixed" }
    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link { link }
}
