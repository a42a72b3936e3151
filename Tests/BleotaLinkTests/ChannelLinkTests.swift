import BleotaTestSupport
import Testing

@testable import BleotaLink

/// The typed channel seam: what each message is on a link of bytes, and that a
/// framed link carries them whole in both directions.
@Suite struct ChannelLinkTests {
    static let everyKind: [ChannelMessage] = [
        .packet(0, [0x60, 0x01]), .packet(3, []), .packet(ChannelFrame.firstReservedChannel - 1, [0xFF, 0xFE, 0xFD]),
        .read(channel: 2), .directoryQuery, .directory([0, 1, 2]), .directory([]), .writeResult(channel: 0, code: 0x81), .writeResult(channel: 7, code: 0),
    ]

    @Test(arguments: everyKind) func eachMessageIsItsFrameAndBack(_ message: ChannelMessage) {
        let frame = ChannelFrame.encode(message)
        #expect(frame.count == message.framedSize)
        #expect(ChannelFrame.decode(frame) == message)
    }

    /// A device without a DFU service answers with an empty directory, which must not read as a
    /// query: a framing where both were the one byte could be read only knowing the direction.
    @Test func aPacketIsLoggedWithItsFirstEightBytesInHex() {
        let long = ChannelMessage.packet(channel: 3, payload: [0x00, 0x0A, 0xFF, 1, 2, 3, 4, 5, 6][...])
        #expect(long.description == "a packet of 9 bytes on channel 3 (000aff0102030405…)")
        #expect(ChannelMessage.packet(channel: 1, payload: [0xB0][...]).description == "a packet of 1 byte on channel 1 (b0)")
    }

    @Test func anEmptyDirectoryIsNotAQuery() {
        #expect(ChannelFrame.encode(.directory([])) != ChannelFrame.encode(.directoryQuery))
        #expect(ChannelFrame.decode(ChannelFrame.encode(.directory([]))) == .directory([]))
    }

    @Test func framesThatAreNoMessageWholeCarryNone() {
        #expect(ChannelFrame.decode([]) == nil, "an empty packet")
        #expect(ChannelFrame.decode([0xFF, 0x00]) == nil, "a query with a byte after it")
        #expect(ChannelFrame.decode([0xFD, 0x00]) == nil, "a write result cut short")
        #expect(ChannelFrame.decode([0xFD, 0x00, 0x00, 0x00]) == nil, "a write result with a byte too many")
        #expect(ChannelFrame.decode([0xFC]) == nil, "a read that names no channel")
        #expect(ChannelFrame.decode([0xFC, 1, 2]) == nil, "a read of two channels")
        #expect(ChannelFrame.decode([0x02]) == .packet(2, []), "a channel alone is an empty write, not a read")
    }

    /// Whatever the bytes, decoding never traps, and what decodes encodes to the same bytes.
    @Test func decodingAnyBytesRoundTripsOrRefuses() {
        var random = seededGenerator("decodingAnyBytesRoundTripsOrRefuses")
        for _ in 0..<2000 {
            let count = Int(random.next() % 6)
            // First bytes near the markers are where the cases meet.
            var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if !bytes.isEmpty, random.next() % 2 == 0 { bytes[0] = 0xFC + UInt8(random.next() % 4) }
            guard let message = ChannelFrame.decode(bytes) else { continue }
            #expect(ChannelFrame.encode(message) == bytes, "\(bytes) decoded as \(message)")
        }
    }

    @Test func aFramedLinkCarriesMessagesBothWays() async throws {
        let (host, device) = LoopbackLink.pair()
        try await host.send(message: .directoryQuery)
        try await host.send(channel: 1, [1, 2, 3])
        #expect(try await device.receiveMessage() == .directoryQuery)
        #expect(try await device.receiveMessage() == .packet(1, [1, 2, 3]))
        try await device.send(message: .directory([0, 1]))
        try await device.send(message: .writeResult(channel: 0, code: 0x80))
        #expect(try await host.receiveMessage() == .directory([0, 1]))
        #expect(try await host.receiveMessage() == .writeResult(channel: 0, code: 0x80))
        // Underneath are the frames: a byte-level peer sees them as they are.
        try await host.send(message: .writeResult(channel: 2, code: 1))
        #expect(try await device.receive() == [0xFD, 2, 1])
        // An empty packet carries no message and is skipped.
        try await device.send([])
        try await device.send(channel: 4, [9])
        #expect(try await host.receiveMessage() == .packet(4, [9]))
    }

    @Test func aMessageNotComingInTimeIsNil() async throws {
        let (message, waited) = try await SimulationRuntime.run { runtime in
            let (host, _) = LoopbackLink.pair()
            let began = runtime.clock.now
            let message = try await host.receiveMessage(within: .milliseconds(100), clock: runtime.clock)
            return (message, runtime.clock.now - began)
        }
        #expect(message == nil)
        #expect(waited == .milliseconds(100))
    }
}
