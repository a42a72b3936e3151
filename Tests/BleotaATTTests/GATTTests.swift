import BleotaCodec
import BleotaLink
import BleotaTestSupport
import Synchronization
import Testing

@testable import BleotaATT

@Suite struct GATTTests {
    static func deviceInformation(_ server: GATTServer) {
        server.addService(
            .bit16(0x1800),
            characteristics: [
                CharacteristicDefinition(uuid: .deviceName, properties: [.read], value: Array("bleota test".utf8))
            ])
        server.addService(
            .bit16(0x180A),
            characteristics: [
                CharacteristicDefinition(uuid: .bit16(0x2A29), properties: [.read], value: Array(repeating: 0x41, count: 300)),
                CharacteristicDefinition(uuid: .bit16(0x2A28), properties: [.read, .write], value: [1]),
            ])
        server.addService(
            otaService,
            characteristics: [
                CharacteristicDefinition(uuid: otaRX, properties: [.write, .writeWithoutResponse]),
                CharacteristicDefinition(uuid: otaTX, properties: [.notify, .indicate]),
            ])
    }

    @Test func discoversServicesCharacteristicsAndDescriptors() async throws {
        let result = try await withGATT(setup: Self.deviceInformation) { client, _, _ in
            let mtu = try await client.exchangeMTU()
            let services = try await client.discoverPrimaryServices()
            let byUUID = try await client.discoverPrimaryServices(.bit16(0x180A))
            let ota = try #require(services.first { $0.uuid == otaService })
            let characteristics = try await client.discoverCharacteristics(ota)
            let descriptors = try await client.discoverDescriptors(characteristics[1])
            return (mtu, services, byUUID, characteristics, descriptors)
        }
        #expect(result.0 == 517)
        #expect(result.1.map(\.uuid) == [.bit16(0x1800), .bit16(0x180A), otaService])
        #expect(result.1.map(\.start) == [1, 4, 9])
        #expect(result.2 == [result.1[1]])
        #expect(result.3.map(\.uuid) == [otaRX, otaTX])
        #expect(result.3[0].properties == [.write, .writeWithoutResponse])
        #expect(result.4.map(\.uuid) == [.clientCharacteristicConfiguration])
    }

    @Test func readsLongValuesWithReadBlobAndWritesLongValuesWithPrepareExecute() async throws {
        let result = try await withGATT(mtu: 23, setup: Self.deviceInformation) { client, _, server in
            _ = try await client.exchangeMTU()
            let services = try await client.discoverPrimaryServices(.bit16(0x180A))
            let characteristics = try await client.discoverCharacteristics(try #require(services.first))
            let long = try await client.read(characteristics[0].valueHandle)
            let value = (0..<100).map { UInt8($0) }
            try await client.write(characteristics[1].valueHandle, value)
            let stored = server.attributes.first { $0.handle == characteristics[1].valueHandle }?.value
            return (long, stored, value)
        }
        #expect(result.0 == Array(repeating: 0x41, count: 300))
        #expect(result.1 == result.2)
    }

    /// A live value that counts the reads: 1 at the first, 2 at the second…
    static func nextCount(_ counter: borrowing Mutex<Int>) -> [UInt8] {
        [
            UInt8(
                counter.withLock { value in
                    value += 1
                    return value
                })
        ]
    }

    /// A value the device keeps changing (SUOTA's MEM_INFO) is asked for at every read, through a
    /// channel link's live values as `bleota serve` builds them; a channel without one reads its stored value.
    @Test func aReadAsksTheLiveValueEachTime() async throws {
        let counter = Mutex(0)
        let channels = [
            GATTChannel(number: 0, service: .bit16(0xFEF5), characteristic: .bit16(0x2001), write: .none, update: .none, readable: true),
            GATTChannel(number: 1, service: .bit16(0xFEF5), characteristic: .bit16(0x2002), write: .none, update: .none, readable: true),
        ]
        let result = try await withGATT(setup: { server in
            _ = GATTPeripheralChannelLink.addChannels(
                channels, to: server, values: [0: [0], 1: [7]],
                liveValue: { number in number == 0 ? Self.nextCount(counter) : nil })
        }) { client, _, _ in
            let service = try #require(try await client.discoverPrimaryServices(.bit16(0xFEF5)).first)
            let characteristics = try await client.discoverCharacteristics(service)
            return (
                try await client.read(characteristics[0].valueHandle), try await client.read(characteristics[0].valueHandle),
                try await client.read(characteristics[1].valueHandle)
            )
        }
        #expect(result.0 == [1] && result.1 == [2])
        #expect(result.2 == [7])
    }

    /// A channel link reads a readable channel when asked to read it, and its value comes back as a
    /// packet of that channel; an empty write is a write, which a read-only characteristic refuses.
    @Test func aChannelLinkReadsWhatItIsAskedToReadAndNothingElse() async throws {
        let counter = Mutex(0)
        let channels = [
            GATTChannel(number: 0, service: .bit16(0xFEF5), characteristic: .bit16(0x2001), write: .none, update: .none, readable: true),
            GATTChannel(number: 1, service: .bit16(0xFEF5), characteristic: .bit16(0x2002), write: .request, update: .none),
        ]
        let (values, emptyWrite, unreadable) = try await withGATT(setup: { server in
            _ = GATTPeripheralChannelLink.addChannels(
                channels, to: server, values: [0: [0]],
                liveValue: { number in number == 0 ? Self.nextCount(counter) : nil })
        }) { client, _, _ in
            let link = try await GATTChannelLink.open(client: client, channels: channels, mtu: 23, description: "gatt")
            try await link.send(message: .read(channel: 0))
            try await link.send(message: .read(channel: 0))
            let values: [ChannelMessage] = [try await link.receiveMessage(), try await link.receiveMessage()]
            var emptyWrite: LinkError?
            do throws(LinkError) { try await link.send(channel: 0, []) } catch { emptyWrite = error }
            var unreadable: LinkError?
            do throws(LinkError) { try await link.send(message: .read(channel: 1)) } catch { unreadable = error }
            return (values, emptyWrite, unreadable)
        }
        #expect(values == [.packet(0, [1]), .packet(0, [2])])
        #expect(emptyWrite == .disconnected("channel 0 (\(BluetoothUUID.bit16(0x2001))) is not writable"))
        #expect(unreadable == .disconnected("channel 1 (\(BluetoothUUID.bit16(0x2002))) is not readable"))
    }

    @Test func writeErrorsComeBackTyped() async throws {
        let error = try await withGATT(setup: Self.deviceInformation) { client, _, _ in
            do {
                try await client.write(3, [1])
                return nil as ATTBearerError?
            } catch { return error as? ATTBearerError }
        }
        #expect(error == .peer(.writeNotPermitted, request: .writeRequest, handle: 3))
    }

    @Test func notificationsFlowOnlyAfterSubscribing() async throws {
        let result = try await withGATT(setup: Self.deviceInformation) { client, serverBearer, server in
            let ota = try #require(try await client.discoverPrimaryServices(otaService).first)
            let tx = try await client.discoverCharacteristics(ota)[1]
            let before = try await server.notify(tx.valueHandle, value: [1], on: serverBearer)
            try await client.subscribe(tx)
            let after = try await server.notify(tx.valueHandle, value: [2], on: serverBearer)
            let received = try await client.bearer.incoming.take()
            try await client.subscribe(tx, indications: true)
            try await server.notify(tx.valueHandle, value: [3], on: serverBearer)  // waits for the confirmation
            let indication = try await client.bearer.incoming.take()
            return (before, after, received, indication)
        }
        #expect(result.0 == false)
        #expect(result.1 == true)
        #expect(result.2 == .handleValueNotification(handle: 13, value: [2]))
        #expect(result.3 == .handleValueIndication(handle: 13, value: [3]))
    }
}

@Suite struct GATTServedServicesTests {
    /// What `bleota serve` offers: GAP, the bleota service and MCUmgr's one-characteristic SMP service.
    static func served(_ server: GATTServer) {
        server.addService(
            .bit16(0x1800),
            characteristics: [
                CharacteristicDefinition(uuid: .deviceName, properties: [.read], value: Array("bleota-serve".utf8))
            ])
        _ = GATTPeripheralLink.addPacketService(to: server, service: otaService, rx: otaRX, tx: otaTX)
        let smp = BluetoothUUID("DA2E7828-FBCE-4E01-AE9E-261174997C48")!
        _ = GATTPeripheralLink.addPacketService(to: server, service: BluetoothUUID("8D53DC1D-1DB7-4CD3-868B-8A527460AA84")!, rx: smp, tx: smp)
    }

    @Test func primaryDiscoveryAtTheDefaultMTUWalksEveryServiceOnce() async throws {
        // No MTU exchange (as gatttool --primary): 23 bytes, one 128-bit service per response.
        let services = try await withGATT(mtu: 23, setup: Self.served) { client, _, _ in
            try await client.discoverPrimaryServices()
        }
        #expect(services.map(\.start) == [1, 4, 10])
        #expect(services.map(\.end) == [3, 9, 13])
        #expect(services.last?.uuid == BluetoothUUID("8D53DC1D-1DB7-4CD3-868B-8A527460AA84")!)
    }

    @Test func theSMPCharacteristicIsWrittenAndNotifiesOnOneHandle() async throws {
        let characteristics = try await withGATT(setup: Self.served) { client, _, _ in
            let services = try await client.discoverPrimaryServices()
            return try await client.discoverCharacteristics(try #require(services.last))
        }
        #expect(characteristics.count == 1)
        #expect(characteristics.first?.properties == [.write, .writeWithoutResponse, .notify])
    }
}
