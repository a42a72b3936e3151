import BleotaCodec
import BleotaLink
import Logging
import Synchronization

/// The HCI/SLIP serial transport of legacy DFU (`adafruit-nrfutil dfu
/// serial`, SDK 11's `hci_transport.c`) as a ``/BleotaLink/ChannelLink``, for
/// both halves.
///
/// A frame is `C0 SLIP(header[4] payload crc16) C0`: header byte 0 holds the
/// sequence number (bits 0–2), the next expected (3–5), "CRC present" (6) and
/// "reliable" (7); byte 1 the packet type 14 and the low 4 bits of the
/// payload length; byte 2 its high 8 bits; byte 3 makes the four sum to 0.
/// The CRC-16/CCITT-FALSE covers header and payload. The device acknowledges
/// every valid frame with `C0 [expected << 3, 0, 0, checksum] C0` before it
/// processes it, drops one whose sequence number is not the expected one
/// (acknowledging again what it expects), and never answers otherwise: the
/// serial transport has no status, so what the bootloader's control point
/// would notify is discarded here.
///
/// The payload is a little-endian operation (3 start, 1 init, 4 data, 5
/// stop) and its body; this link turns each into the control point and
/// packet writes a BLE host would make, so one bootloader model serves both.
///
/// The host sees one channel, ``frameChannel``, the only one in the
/// directory: each packet it sends there is one frame's payload, and each
/// acknowledgement comes back as a ``/BleotaLink/ChannelMessage/writeResult(channel:code:)``
/// on it, 0 when it acknowledged that frame. Nothing else comes back. A host
/// tells this transport from the BLE one by the link's
/// ``/BleotaLink/LinkParameters/transport``, `LinkTransport.nordicHCI`.
package final class NordicHCILink: MessageCarryingLink {
    package enum PacketType: UInt32, Sendable {
        case initPacket = 1, start = 3, data = 4, stop = 5
    }

    package let lines: any DelimitedByteStream
    package let parameters: LinkParameters
    private let logger: Logger
    /// The channel of HCI frames, this link's only one.
    package static let frameChannel: UInt8 = 0x10

    private struct State {
        /// The device's next expected sequence number; on the host's side, the next one to send.
        var expected: UInt8 = 1
        /// On the host's side: the sequence number of the frame last sent.
        var lastSent: UInt8?
        var pending: [ChannelMessage] = []
        var receivingData = false
    }
    private let state = Mutex(State())

    package init(lines: any DelimitedByteStream, logger: Logger = Logger(label: "bleota.nordic.hci")) {
        self.lines = lines
        self.logger = logger
        parameters = LinkParameters(maximumPayload: 4096, description: lines.parameters.description, transport: .nordicHCI)
    }

    /// The device booted again: it expects sequence number 1.
    package func deviceBooted() {
        state.withLock { $0 = State() }
    }

    /// The host's side: a packet on ``frameChannel`` goes out as the next frame (a START
    /// frame opens a session, which the bootloader, reset before it, numbers from 1);
    /// the directory query is answered here. The device's side sends nothing: the
    /// serial transport reports nothing back, so what it would notify is dropped.
    package func send(_ message: ChannelMessage) async throws(LinkError) {
        switch message {
        case .directoryQuery:
            state.withLock { $0.pending.append(.directory([Self.frameChannel])) }
        case .packet(Self.frameChannel, let payload):
            let opensSession = payload.first == UInt8(PacketType.start.rawValue) && payload.dropFirst().prefix(3).allSatisfy { $0 == 0 }
            let sequence = state.withLock { state -> UInt8 in
                if opensSession { state.expected = 1 }
                defer { state.expected = (state.expected + 1) % 8 }
                state.lastSent = state.expected
                return state.expected
            }
            try await lines.send(Self.frame(Array(payload), sequence: sequence))
        case .packet, .read, .directory, .writeResult: return
        }
    }

    /// The host's side gets each acknowledgement as a write result on ``frameChannel``; the
    /// device's side gets each frame in sequence as the control point and packet writes it stands for.
    package func receiveMessage() async throws(LinkError) -> ChannelMessage {
        while true {
            if let next = state.withLock({ $0.pending.isEmpty ? nil : $0.pending.removeFirst() }) { return next }
            let body = try await lines.receive(until: SLIP.end)
            guard !body.isEmpty else { continue }
            let frame: [UInt8]
            do { frame = try SLIP.decode(body) } catch {
                logger.debug("dropping a damaged HCI frame: \(error)")
                continue
            }
            if frame.count == 4 {
                // An acknowledgement, which only a host receives: is it of the frame last sent?
                guard frame.reduce(UInt8(0), &+) == 0, let sent = state.withLock({ $0.lastSent }) else { continue }
                let acknowledged = (frame[0] >> 3) & 7 == (sent + 1) % 8
                return .writeResult(channel: Self.frameChannel, code: acknowledged ? 0 : 1)
            }
            guard let (sequence, payload) = Self.parse(frame) else {
                logger.debug("dropping an HCI frame that does not check: \(Array(frame.prefix(8)).hexString)")
                continue
            }
            let (accepted, expected) = state.withLock { state -> (Bool, UInt8) in
                guard sequence == state.expected else { return (false, state.expected) }
                state.expected = (state.expected + 1) % 8
                return (true, state.expected)
            }
            try await lines.send(Self.acknowledgement(expecting: expected))
            guard accepted else { continue }
            translate(payload)
        }
    }

    package func close() async { await lines.close() }

    /// A frame's sequence number and payload, or nil when it fails any of the device's checks.
    package static func parse(_ frame: [UInt8]) -> (sequence: UInt8, payload: [UInt8])? {
        guard frame.count >= 6 else { return nil }
        let header = Array(frame[0..<4])
        guard header.reduce(UInt8(0), &+) == 0, header[0] & 0xC0 == 0xC0, header[1] & 0x0F == 14 else { return nil }
        var crc = CRC16(.ccittFalse)
        crc.update(frame[..<(frame.count - 2)])
        guard UInt16(frame[frame.count - 2]) | UInt16(frame[frame.count - 1]) << 8 == crc.value else { return nil }
        return (header[0] & 0x07, Array(frame[4..<(frame.count - 2)]))
    }

    /// A frame as a host sends it.
    package static func frame(_ payload: [UInt8], sequence: UInt8) -> [UInt8] {
        let length = payload.count
        var header: [UInt8] = [sequence & 7 | ((sequence + 1) & 7) << 3 | 0xC0, UInt8(14 | (length & 0x0F) << 4), UInt8((length >> 4) & 0xFF), 0]
        header[3] = 0 &- (header[0] &+ header[1] &+ header[2])
        var crc = CRC16(.ccittFalse)
        crc.update(header + payload)
        let whole = header + payload + [UInt8(crc.value & 0xFF), UInt8(crc.value >> 8)]
        return [SLIP.end] + SLIP.encode(whole)
    }

    /// The device's acknowledgement: no flags, type 0, length 0, the expected sequence number.
    package static func acknowledgement(expecting expected: UInt8) -> [UInt8] {
        let first = (expected & 7) << 3
        return [SLIP.end] + SLIP.encode([first, 0, 0, 0 &- first])
    }

    private func translate(_ payload: [UInt8]) {
        var reader = ByteReader(payload)
        guard let raw = try? reader.readUInt32(.little), let type = PacketType(rawValue: raw) else {
            logger.debug("ignoring an HCI payload of unknown type")
            return
        }
        let body = reader.readRemaining()
        let control = NordicLegacyChannel.controlPoint.rawValue
        let packet = NordicLegacyChannel.packet.rawValue
        var writes: [ChannelMessage] = []
        switch type {
        case .start:
            // mode:u32, then the three sizes.
            guard body.count >= 16 else { return }
            writes = [.packet(control, [NordicLegacyOperation.startDFU.rawValue, body[0]]), .packet(packet, body[4..<16])]
            state.withLock { $0.receivingData = false }
        case .initPacket:
            // The device takes whole words and completes the init packet at once.
            let words = body.count / 4 * 4
            writes = [
                .packet(control, [NordicLegacyOperation.initParameters.rawValue, 0]), .packet(packet, body[..<words]),
                .packet(control, [NordicLegacyOperation.initParameters.rawValue, 1]),
            ]
        case .data:
            let first = state.withLock { state -> Bool in
                defer { state.receivingData = true }
                return !state.receivingData
            }
            if first { writes.append(.packet(control, [NordicLegacyOperation.receiveFirmware.rawValue])) }
            writes.append(.packet(packet, body))
        case .stop:
            writes = [.packet(control, [NordicLegacyOperation.validate.rawValue]), .packet(control, [NordicLegacyOperation.activateAndReset.rawValue])]
            state.withLock { $0.receivingData = false }
        }
        state.withLock { $0.pending += writes }
    }
}

extension LinkTransport {
    /// Legacy DFU's HCI/SLIP serial transport: ``NordicHCILink``.
    package static let nordicHCI = LinkTransport("legacy DFU HCI serial (SLIP)")
}
