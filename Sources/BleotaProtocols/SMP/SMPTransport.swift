import BleotaCodec
import BleotaLink

/// SMP messages over a packet link: a message longer than the link's payload
/// goes out in consecutive packets (GATT writes, notifications, UDP datagrams),
/// and the receiver puts it back together by the header's length, as Zephyr's
/// SMP reassembly and the MCUmgr clients do.
public enum SMPTransport {
    /// The GATT service and characteristic of MCUmgr's SMP over BLE.
    public static let serviceUUID = "8D53DC1D-1DB7-4CD3-868B-8A527460AA84"
    public static let characteristicUUID = "DA2E7828-FBCE-4E01-AE9E-261174997C48"
    /// MCUmgr's UDP port.
    public static let udpPort: UInt16 = 1337

    /// Sends `packet` in writes of the link's preferred payload (whole link-layer fragments), or
    /// where `shape` cuts it.
    public static func send(_ packet: SMPPacket, on link: any Link, shape: SMPWriteShape? = nil) async throws(LinkError) {
        let bytes = packet.encode()
        let payload = max(1, link.parameters.preferredPayload)
        // A shape made for another payload (the link's MTU changed) is not used.
        let cut = shape.flatMap { $0.payload == payload ? $0 : nil } ?? .largestWrites(payload: payload)
        for range in cut.writes(of: bytes) { try await link.send(Array(bytes[range])) }
    }
}

/// Collects link packets into whole SMP messages.
public struct SMPReassembler: Sendable {
    private var buffer: [UInt8] = []
    /// Messages longer than this are dropped whole (the peer broke the buffer-size contract).
    public let limit: Int

    public init(limit: Int = 65_536 + SMPHeader.size) { self.limit = limit }

    /// Adds a packet; returns the messages it completed.
    public mutating func feed(_ packet: [UInt8]) -> [[UInt8]] {
        buffer += packet
        var messages: [[UInt8]] = []
        while let total = SMPPacket.totalLength(of: buffer), buffer.count >= total {
            // Arriving whole in one packet does not excuse an oversized message.
            if total <= limit { messages.append(Array(buffer[..<total])) }
            buffer.removeFirst(total)
        }
        if let total = SMPPacket.totalLength(of: buffer), total > limit { buffer.removeAll() }
        return messages
    }

    public mutating func reset() { buffer.removeAll() }
    public var isEmpty: Bool { buffer.isEmpty }
}

/// MCUmgr's serial (console) framing: a message becomes
/// base64([length BE16][message][CRC-16/XMODEM BE]) cut into lines of at most
/// `lineLength` − 1 bytes, the first starting 0x06 0x09, the rest 0x04 0x14, each
/// ending in a newline; every line's base64 stands on its own (a multiple of 4).
public enum SMPSerialFraming {
    public static let start: [UInt8] = [0x06, 0x09]
    public static let continuation: [UInt8] = [0x04, 0x14]

    /// `lineLength` is the device's line buffer (Zephyr's default 128); a line
    /// carries the largest multiple of 4 base64 characters that leaves room for
    /// the two prefix bytes, the newline and the terminating NUL.
    public static func encode(_ message: [UInt8], lineLength: Int = 128) -> [[UInt8]] {
        var framed = ByteWriter(capacity: message.count + 4)
        framed.write(UInt16(message.count + 2), .big)
        framed.write(contentsOf: message)
        framed.write(CRC16.checksum(message, variant: .xmodem), .big)
        let text = Base64.encode(framed.bytes)
        let perLine = max(4, (lineLength - 4) / 4 * 4)
        var lines: [[UInt8]] = []
        var index = 0
        while index < text.count {
            let end = min(text.count, index + perLine)
            lines.append((index == 0 ? start : continuation) + text[index..<end] + [0x0A])
            index = end
        }
        return lines
    }

    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// Rebuilds messages from serial lines, skipping console output that is not SMP.
    public struct Decoder: Sendable {
        private var pending: [UInt8]?
        private var expected = 0

        public init() {}

        /// Feeds one line (without its newline). Returns a message when one completes.
        public mutating func feed(line: [UInt8]) throws(Failure) -> [UInt8]? {
            var line = line
            if line.last == 0x0D { line.removeLast() }
            guard line.count >= 2 else { return nil }
            let prefix = Array(line.prefix(2))
            let body = line.dropFirst(2)
            if prefix == start {
                guard let decoded = Base64.decode(body), decoded.count >= 2 else {
                    pending = nil
                    throw Failure(description: "an SMP serial frame's first line is not valid base64")
                }
                expected = Int(decoded[0]) << 8 | Int(decoded[1])
                pending = Array(decoded.dropFirst(2))
            } else if prefix == continuation, pending != nil {
                guard let decoded = Base64.decode(body) else {
                    pending = nil
                    throw Failure(description: "an SMP serial continuation line is not valid base64")
                }
                pending! += decoded
            } else {
                return nil  // console text between frames
            }
            guard let frame = pending, frame.count >= expected else { return nil }
            pending = nil
            guard expected >= 2, frame.count == expected else {
                throw Failure(description: "an SMP serial frame holds \(frame.count) bytes but says \(expected)")
            }
            let message = Array(frame.dropLast(2))
            let crc = UInt16(frame[frame.count - 2]) << 8 | UInt16(frame[frame.count - 1])
            guard crc == CRC16.checksum(message, variant: .xmodem) else {
                throw Failure(description: "an SMP serial frame failed its CRC-16 check")
            }
            return message
        }
    }
}
