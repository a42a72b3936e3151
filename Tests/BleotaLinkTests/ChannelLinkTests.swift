import BleotaTestSupport
import Synchronization
import Testing

@testable import BleotaLink

/// The typed channel seam: what each message is on a link of bytes, and that a
/// framed link carries them whole in both directions.
@Suite struct ChannelLinkTests {
    static let everyKind: [ChannelMessage] = [
        .packet(0, [0x60, 0x01]), .packet(3, []), .packet(ChannelFrame.firstReservedChannel - 1, [0xFF, 0xFE, 0xFD]),
        .read(channel: 2), .directoryQuery, .directory([0, 1, 2]), .directory([]), .writeResult(channel: 0, code: 0x81), .writeResult(channel: 7, code: 0),
    ]

    @Test(arguments: everyKind) func eachMessageIsItsFrameAndBack(_ message: ChannelMessage) throws {
        let frame = try ChannelFrame.encode(message)
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

    @Test func anEmptyDirectoryIsNotAQuery() throws {
        #expect(try ChannelFrame.encode(.directory([])) != ChannelFrame.encode(.directoryQuery))
        #expect(ChannelFrame.decode(try ChannelFrame.encode(.directory([]))) == .directory([]))
    }

    /// A packet on a reserved channel would read as a marker: a typed error naming the channel, not a trap.
    @Test func aReservedChannelIsATypedError() {
        for channel in ChannelFrame.firstReservedChannel...UInt8.max {
            #expect(throws: LinkError.notAMessage("channel 0x\(String(channel, radix: 16)) is reserved for the channel frame's markers (0xfc and up)")) {
                try ChannelFrame.encode(.packet(channel, [1]))
            }
        }
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
    @Test func decodingAnyBytesRoundTripsOrRefuses() throws {
        var random = seededGenerator("decodingAnyBytesRoundTripsOrRefuses")
        for _ in 0..<2000 {
            let count = Int(random.next() % 6)
            // First bytes near the markers are where the cases meet.
            var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if !bytes.isEmpty, random.next() % 2 == 0 { bytes[0] = 0xFC + UInt8(random.next() % 4) }
            guard let message = ChannelFrame.decode(bytes) else { continue }
            #expect(try ChannelFrame.encode(message) == bytes, "\(bytes) decoded as \(message)")
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

/// A link that carries messages, recording what it was given.
private final class RecordingMessageLink: MessageCarryingLink {
    let sent = Mutex<[ChannelMessage]>([])
    var parameters: LinkParameters { LinkParameters(maximumPayload: 244, description: "recording") }
    func send(_ message: ChannelMessage) async throws(LinkError) { sent.withLock { $0.append(message) } }
    func receiveMessage() async throws(LinkError) -> ChannelMessage { throw .disconnected("nothing to receive") }
    func close() async {}
}

extension ChannelLinkTests {
    /// Bytes given to a link that carries messages are sent as the message they frame; bytes that
    /// frame none are an error naming them, where they used to vanish without a word.
    @Test func aByteSendOnAMessageLinkSendsItsMessageOrFails() async throws {
        let link = RecordingMessageLink()
        try await link.send([0x02, 0xAA, 0xBB])
        #expect(link.sent.withLock { $0 } == [.packet(2, [0xAA, 0xBB])])
        for unframed: [UInt8] in [[], [0xFF, 0x00], [0xFD, 0x01]] {
            await #expect(throws: LinkError.self) { try await link.send(unframed) }
        }
        #expect(link.sent.withLock { $0 }.count == 1, "nothing was sent for bytes that frame no message")
        await #expect(throws: LinkError.notAMessage("2 bytes starting 0xff frame no channel message")) { try await link.send([0xFF, 0x00]) }
    }
}
