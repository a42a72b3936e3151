import BleotaCodec
import BleotaLink
import Synchronization
import Testing

@testable import BleotaProtocols

/// A serial line in memory: bytes written at one end are read at the other, cut at a delimiter.
final class SerialLinePipe: DelimitedByteStream {
    let end: LoopbackLink
    private let buffered = Mutex<[UInt8]>([])

    init(_ end: LoopbackLink) { self.end = end }

    static func pair() -> (SerialLinePipe, SerialLinePipe) {
        let (a, b) = LoopbackLink.pair(maximumPayload: 1 << 16, description: "pipe")
        return (SerialLinePipe(a), SerialLinePipe(b))
    }

    var parameters: LinkParameters { end.parameters }
    func send(_ packet: [UInt8]) async throws(LinkError) { try await end.send(packet) }
    func receive() async throws(LinkError) -> [UInt8] { try await receive(until: 0x0A) }
    func close() async { await end.close() }

    func receive(until delimiter: UInt8) async throws(LinkError) -> [UInt8] {
        while true {
            let line = buffered.withLock { bytes -> [UInt8]? in
                guard let index = bytes.firstIndex(of: delimiter) else { return nil }
                defer { bytes.removeFirst(index + 1) }
                return Array(bytes[..<index])
            }
            if let line { return line }
            let chunk = try await end.receive()
            buffered.withLock { $0 += chunk }
        }
    }
}

/// Legacy DFU's HCI/SLIP serial transport as a channel link: what the host sees (one channel
/// of frames, acknowledgements as write results) and what the device half gets (the writes a
/// BLE host would make), across a device reset.
@Suite struct NordicHCILinkTests {
    static func payload(_ type: NordicHCILink.PacketType, _ body: [UInt8]) -> [UInt8] {
        var writer = ByteWriter()
        writer.write(type.rawValue, .little)
        writer.write(contentsOf: body)
        return writer.bytes
    }

    /// Sends one frame from the host and returns what came back: the write result's code.
    static func exchange(_ host: NordicHCILink, _ payload: [UInt8]) async throws -> ChannelMessage {
        try await host.send(channel: NordicHCILink.frameChannel, payload)
        return try await host.receiveMessage()
    }

    @Test func framesBecomeBLEWritesAndAcknowledgementsWriteResults() async throws {
        let (hostLine, deviceLine) = SerialLinePipe.pair()
        let host = NordicHCILink(lines: hostLine)
        let device = NordicHCILink(lines: deviceLine)
        let received = Mailbox<ChannelMessage>()
        let serving = Task {
            // The device half reads (and so acknowledges) every frame.
            while let message = try? await device.receiveMessage() { received.put(message) }
        }
        let control = NordicLegacyChannel.controlPoint.rawValue
        let packet = NordicLegacyChannel.packet.rawValue
        let acknowledged = ChannelMessage.writeResult(channel: NordicHCILink.frameChannel, code: 0)

        try await host.send(message: .directoryQuery)
        #expect(try await host.receiveMessage() == .directory([NordicHCILink.frameChannel]), "the serial transport has one channel: its frames")

        let sizes = [UInt8](repeating: 0, count: 8) + [0x34, 0x75, 0, 0]
        #expect(try await Self.exchange(host, Self.payload(.start, [4, 0, 0, 0] + sizes)) == acknowledged)
        #expect(try await received.take() == .packet(control, [NordicLegacyOperation.startDFU.rawValue, 4]))
        #expect(try await received.take() == .packet(packet, sizes))
        #expect(try await Self.exchange(host, Self.payload(.data, [1, 2, 3])) == acknowledged)
        #expect(try await received.take() == .packet(control, [NordicLegacyOperation.receiveFirmware.rawValue]))
        #expect(try await received.take() == .packet(packet, [1, 2, 3]))

        // The device resets: it expects sequence number 1, so the host's third frame is dropped and not acknowledged…
        device.deviceBooted()
        #expect(try await Self.exchange(host, Self.payload(.data, [4])) == .writeResult(channel: NordicHCILink.frameChannel, code: 1))
        // …until a start frame opens a session, numbered from 1 again.
        #expect(try await Self.exchange(host, Self.payload(.start, [4, 0, 0, 0] + sizes)) == acknowledged)
        #expect(try await received.take() == .packet(control, [NordicLegacyOperation.startDFU.rawValue, 4]))
        #expect(try await received.take() == .packet(packet, sizes))

        // The device's answers go nowhere: the serial transport reports nothing back.
        try await device.send(channel: control, [0x10, 0x01, 0x01])
        try await host.send(channel: NordicHCILink.frameChannel, Self.payload(.data, [5]))
        #expect(try await host.receiveMessage() == acknowledged, "only the acknowledgement comes back")
        serving.cancel()
        await host.close()
        await device.close()
    }
}
