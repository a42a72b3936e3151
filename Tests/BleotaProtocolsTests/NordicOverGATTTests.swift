import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Synchronization
import Testing

@testable import BleotaProtocols

/// Nordic Secure DFU's characteristics as channels over a real ATT bearer:
/// the host's GATTChannelLink and bleota serve's GATTPeripheralChannelLink,
/// with the simulated bootloader behind the GATT server.
@Suite struct NordicOverGATTTests {
    @Test func theControlPointAndPacketCharacteristicsCarryAWholeInitPacketAndObject() async throws {
        let image = (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 5) }
        let packet = nordicInitPacket(for: image).encode()
        var flash = NordicBootloader.Flash()
        flash.application = [1]
        let device = NordicSecureDFUDevice(flash: flash, buttonless: .none, startInBootloader: true)
        // The bootloader offers the control point and the packet characteristic only.
        let offered = try #require(await device.offeredChannels)
        #expect(offered == [0, 1])
        let channels = NordicSecureDFUProtocol.gattService.channels.filter { offered.contains($0.number) }
        let box = Mutex<(@Sendable (ATTBearer) async -> GATTPeripheralChannelLink)?>(nil)
        let (answers, flashAfter) = try await withGATT(
            mtu: 247,
            setup: { server in
                let make = GATTPeripheralChannelLink.addChannels(channels, to: server)
                box.withLock { $0 = make }
            }
        ) { client, serverBearer, _ in
            let mtu = try await client.exchangeMTU()
            let host = try await GATTChannelLink.open(
                client: client, channels: NordicSecureDFUProtocol.gattService.channels, mtu: mtu,
                description: "gatt")
            #expect(host.parameters.maximumPayload == 245, "MTU − 3 bytes of payload after the channel byte")
            let deviceLink = await box.withLock { $0 }!(serverBearer)
            let clock = client.bearer.clock
            return try await withThrowingTaskGroup(of: [ChannelMessage]?.self) { group in
                group.addTask {
                    await device.serve(deviceLink, environment: DeviceEnvironment(clock: clock) { _ in })
                    return nil
                }
                var answers: [ChannelMessage] = []
                try await host.send(message: .directoryQuery)
                answers.append(try await host.receiveMessage())
                func request(_ request: NordicDFURequest) async throws {
                    try await host.send(channel: 0, request.encode())
                    answers.append(try await host.receiveMessage())
                }
                try await request(.setReceiptNotification(packets: 0))
                try await request(.create(.command, size: UInt32(packet.count)))
                try await host.send(channel: 1, packet)
                try await request(.calculateChecksum)
                try await request(.execute)
                try await request(.create(.data, size: 4096))
                for start in stride(from: 0, to: 4096, by: 244) {
                    try await host.send(channel: 1, image[start..<min(start + 244, 4096)])
                }
                try await request(.calculateChecksum)
                try await request(.execute)
                await deviceLink.close()
                for try await _ in group {}
                return (answers, await device.flash)
            }
        }
        #expect(answers[0] == .directory([0, 1]), "the directory is what discovery found")
        #expect(answers[1] == .packet(0, [0x60, 0x02, 0x01]))
        #expect(answers[2] == .packet(0, [0x60, 0x01, 0x01]))
        #expect(answers[3] == .packet(0, [0x60, 0x03, 0x01] + le(UInt32(packet.count)) + le(CRC32.checksum(packet))))
        #expect(answers[4] == .packet(0, [0x60, 0x04, 0x01]))
        #expect(answers[6] == .packet(0, [0x60, 0x03, 0x01] + le(4096) + le(CRC32.checksum(image))))
        #expect(answers[7] == .packet(0, [0x60, 0x04, 0x01]))
        #expect(flashAfter.application == image, "the last Execute activated exactly the image")
    }

    @Test func anApplicationOffersOnlyItsButtonlessCharacteristicWhichIndicates() async throws {
        let device = NordicSecureDFUDevice(
            flash: {
                var flash = NordicBootloader.Flash()
                flash.application = [1]
                return flash
            }())
        #expect(await device.offeredChannels == [NordicDFUChannel.buttonless.rawValue])
        let channel = NordicDFUChannel.buttonless.gattChannel
        #expect(channel.write == .request && channel.update == .indicate && channel.characteristic == BluetoothUUID("8EC90003-F315-4F60-9FB8-838830DAEA50")!)
        #expect(NordicDFUChannel.experimentalButtonless.gattChannel.service == BluetoothUUID("8E400001-F315-4F60-9FB8-838830DAEA50")!)
    }
}
