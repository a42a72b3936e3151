import BleotaCodec
import BleotaLink
import Logging
import Synchronization

/// The HCI/SLIP serial transport of legacy DFU (`adafruit-nrfutil dfu
/// serial`, SDK 11's `hci_transport.c`) under a ``/BleotaLink/ChannelPacket``
/// link, for the device half.
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
public final class NordicHCILink: Link {
    public enum PacketType: UInt32, Sendable {
        case initPacket = 1, start = 3, data = 4, stop = 5
    }

    public let lines: any DelimitedByteStream
    public let parameters: LinkParameters
    private let logger: Logger
    private struct State {
        var expected: UInt8 = 1
        var pending: [[UInt8]] = []
        var receivingData = false
    }
    private let state = Mutex(State())

    public init(lines: any DelimitedByteStream, logger: Logger = Logger(label: "bleota.nordic.hci")) {
        self.lines = lines
        self.logger = logger
        parameters = LinkParameters(maximumPayload: 4096, description: lines.parameters.description)
    }

    /// The host's side: sends `payload` as the next frame and waits up to
    /// `timeout` for the device's acknowledgement; true when it acknowledged
    /// this frame (it expects the next sequence number).
    public func sendFrame(_ payload: [UInt8], clock: any BleotaClock, timeout: Duration) async throws(LinkError) -> Bool {
        let sequence = state.withLock { state -> UInt8 in
            defer { state.expected = (state.expected + 1) % 8 }
            return state.expected
        }
        try await lines.send(Self.frame(payload, sequence: sequence))
        let lines = self.lines
        while true {
            let body: [UInt8]
            do {
                body = try await withDeadline(timeout, clock: clock) { try await lines.receive(until: SLIP.end) }
            } catch is DeadlineExceeded {
                return false
            } catch let error as LinkError {
                throw error
            } catch {
                throw .cancelled
            }
            guard !body.isEmpty, let ack = try? SLIP.decode(body), ack.count == 4, ack.reduce(UInt8(0), &+) == 0 else { continue }
            return (ack[0] >> 3) & 7 == (sequence + 1) % 8
        }
    }

    /// After a reset the bootloader expects sequence number 1 again.
    public func restartSequence() {
        state.withLock { $0 = State() }
    }

    /// Answers go nowhere: the serial transport reports nothing back.
    public func send(_ packet: [UInt8]) async throws(LinkError) {}

    public func receive() async throws(LinkError) -> [UInt8] {
        while true {
            if let next = state.withLock({ $0.pending.isEmpty ? nil : $0.pending.removeFirst() }) { return next }
            let body = try await lines.receive(until: SLIP.end)
            guard !body.isEmpty else { continue }
            let frame: [UInt8]
            do { frame = try SLIP.decode(body) } catch {
                logger.debug("dropping a damaged HCI frame: \(error)")
                continue
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

    public func close() async { await lines.close() }

    /// A frame's sequence number and payload, or nil when it fails any of the device's checks.
    public static func parse(_ frame: [UInt8]) -> (sequence: UInt8, payload: [UInt8])? {
        guard frame.count >= 6 else { return nil }
        let header = Array(frame[0..<4])
        guard header.reduce(UInt8(0), &+) == 0, header[0] & 0xC0 == 0xC0, header[1] & 0x0F == 14 else { return nil }
        var crc = CRC16(.ccittFalse)
        crc.update(frame[..<(frame.count - 2)])
        guard UInt16(frame[frame.count - 2]) | UInt16(frame[frame.count - 1]) << 8 == crc.value else { return nil }
        return (header[0] & 0x07, Array(frame[4..<(frame.count - 2)]))
    }

    /// A frame as a host sends it.
    public static func frame(_ payload: [UInt8], sequence: UInt8) -> [UInt8] {
        let length = payload.count
        var header: [UInt8] = [sequence & 7 | ((sequence + 1) & 7) << 3 | 0xC0, UInt8(14 | (length & 0x0F) << 4), UInt8((length >> 4) & 0xFF), 0]
        header[3] = 0 &- (header[0] &+ header[1] &+ header[2])
        var crc = CRC16(.ccittFalse)
        crc.update(header + payload)
        let whole = header + payload + [UInt8(crc.value & 0xFF), UInt8(crc.value >> 8)]
        return [SLIP.end] + SLIP.encode(whole)
    }

    /// The device's acknowledgement: no flags, type 0, length 0, the expected sequence number.
    public static func acknowledgement(expecting expected: UInt8) -> [UInt8] {
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
        var writes: [[UInt8]] = []
        switch type {
        case .start:
            // mode:u32, then the three sizes.
            guard body.count >= 16 else { return }
            writes = [[control, NordicLegacyOperation.startDFU.rawValue, body[0]], [packet] + Array(body[4..<16])]
            state.withLock { $0.receivingData = false }
        case .initPacket:
            // The device takes whole words and completes the init packet at once.
            let words = body.count / 4 * 4
            writes = [
                [control, NordicLegacyOperation.initParameters.rawValue, 0], [packet] + Array(body[..<words]),
                [control, NordicLegacyOperation.initParameters.rawValue, 1],
            ]
        case .data:
            let first = state.withLock { state -> Bool in
                defer { state.receivingData = true }
                return !state.receivingData
            }
            if first { writes.append([control, NordicLegacyOperation.receiveFirmware.rawValue]) }
            writes.append([packet] + body)
        case .stop:
            writes = [[control, NordicLegacyOperation.validate.rawValue], [control, NordicLegacyOperation.activateAndReset.rawValue]]
            state.withLock { $0.receivingData = false }
        }
        state.withLock { $0.pending += writes }
    }
}
