import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Synchronization
import Testing

@testable import BleotaProtocols

/// The simulated AppLoader behind a real GATT server (as `bleota serve` runs
/// it) and bleota's GATT client: OTA Control's answers travel as ATT Write
/// Responses and Error Responses with the AppLoader's codes, and the host's
/// channel link turns them back into write results.
@Suite struct SiliconLabsOverGATTTests {
    @Test func theAppLoadersVerdictsAreATTErrorResponses() async throws {
        let factory = GeckoBootloaderImage.sample(Array("factory".utf8), applicationVersion: 1)
        let file = GeckoBootloaderImage.sample((0..<3000).map { UInt8(truncatingIfNeeded: $0 * 7) }, applicationVersion: 2)
        var spoiled = file
        spoiled[1500] ^= 0x01
        let damaged = spoiled
        let device = SiliconLabsOTADevice(slotSize: 1 << 20, initialApplication: factory, inAppLoader: true)
        let offered = try #require(await device.offeredChannels)
        #expect(offered == SiliconLabsOTAChannel.allCases.map(\.rawValue), "the AppLoader offers Control, Data and the versions")
        let channels = SiliconLabsOTAProtocol.gattService.channels
        let box = Mutex<(@Sendable (ATTBearer) async -> GATTPeripheralChannelLink)?>(nil)
        let reboots = Mailbox<Bool>()
        let (results, rawError): ([ChannelMessage], ATTBearerError?) = try await withGATT(
            mtu: 247,
            setup: { server in
                let make = GATTPeripheralChannelLink.addChannels(channels, to: server)
                box.withLock { $0 = make }
            }
        ) { client, serverBearer, _ in
            let mtu = try await client.exchangeMTU()
            let host = try await GATTChannelLink.open(client: client, channels: channels, mtu: mtu, description: "gatt")
            let deviceLink = await box.withLock { $0 }!(serverBearer)
            let clock = client.bearer.clock
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    await device.serve(deviceLink, environment: DeviceEnvironment(clock: clock) { _ in reboots.put(true) })
                }
                var results: [ChannelMessage] = []
                func control(_ value: UInt8) async throws {
                    try await host.send(channel: 0, [value])
                    results.append(try await host.receiveMessage())
                }
                func send(_ bytes: [UInt8]) async throws {
                    for start in stride(from: 0, to: bytes.count, by: 244) {
                        try await host.send(channel: 1, bytes[start..<min(start + 244, bytes.count)])
                    }
                }
                try await control(0x03)  // end before begin: WRONG_STATE
                try await control(0x00)
                try await send(damaged)
                try await control(0x03)  // CRC_ERROR
                try await control(0x00)
                try await send(file)
                try await control(0x03)  // verified
                // The same answer as the raw ATT client sees it, on a value handle found afresh.
                let service = try #require(try await client.discoverPrimaryServices(SiliconLabsOTAChannel.service).first)
                let controlHandle = try #require(
                    try await client.discoverCharacteristics(service)
                        .first { $0.uuid == SiliconLabsOTAChannel.control.uuid }
                ).valueHandle
                var raw: ATTBearerError?
                do { try await client.write(controlHandle, [0x07]) } catch { raw = error as? ATTBearerError }
                try await control(0x04)  // close: the device boots what it verified
                for try await _ in group {}
                return (results, raw)
            }
        }
        #expect(
            results == [
                .writeResult(channel: 0, code: 0x81), .writeResult(channel: 0, code: 0),
                .writeResult(channel: 0, code: 0x80), .writeResult(channel: 0, code: 0),
                .writeResult(channel: 0, code: 0), .writeResult(channel: 0, code: 0),
            ])
        if case .peer(let code, .writeRequest, _)? = rawError {
            #expect(code.rawValue == 0x81, "a reserved value is refused with WRONG_STATE")
        } else {
            Issue.record("the raw write was not refused: \(String(describing: rawError))")
        }
        #expect(reboots.poll() == true && reboots.poll() == nil, "one reset, after the close")
        await device.powerCycle()
        let application = await device.application
        let mode = await device.mode
        #expect(application == file && mode == .application)
    }
}
