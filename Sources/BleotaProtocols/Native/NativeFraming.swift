import BleotaCodec
import BleotaLink

/// Fits native messages to the link: a message longer than the link carries
/// (a HELLO answer over a 20-byte ATT link, say) goes as SEGMENT packets that
/// the receiver joins back together.
package enum NativeFraming {
    /// Opcode, index, count and CRC-16 of a segment packet.
    static let segmentOverhead = 5

    /// The packets that carry `message` over a link of `maximumPayload` bytes.
    package static func packets(for message: NativeMessage, maximumPayload: Int) -> [[UInt8]] {
        let bytes = message.encode()
        guard bytes.count > maximumPayload else { return [bytes] }
        let chunkSize = max(1, maximumPayload - segmentOverhead)
        let chunks = stride(from: 0, to: bytes.count, by: chunkSize).map { Array(bytes[$0..<min($0 + chunkSize, bytes.count)]) }
        guard chunks.count <= 255 else { return [bytes] }
        return chunks.enumerated().map { index, chunk in
            NativeMessage.segment(.init(index: UInt8(index), count: UInt8(chunks.count), chunk: chunk)).encode()
        }
    }

    /// Sends `message` over `link`, segmenting it when needed.
    package static func send(_ message: NativeMessage, on link: any Link) async throws(LinkError) {
        for packet in packets(for: message, maximumPayload: link.parameters.maximumPayload) {
            try await link.send(packet)
        }
    }
}

/// Joins SEGMENT packets back into messages; passes every other packet through.
package struct NativeReassembler: Sendable {
    private var parts: [[UInt8]] = []
    private var expected = 0

    package init() {}

    /// The complete message bytes this packet finishes (or is), or nil while a
    /// segmented message is still incomplete or the packet was a damaged segment.
    package mutating func feed(_ packet: [UInt8]) -> [UInt8]? {
        guard packet.first == NativeMessage.Opcode.segment.rawValue else { return packet }
        guard case .segment(let segment)? = try? NativeMessage(decoding: packet) else { return nil }
        if segment.index == 0 {
            parts = []
            expected = Int(segment.count)
        }
        guard Int(segment.count) == expected, Int(segment.index) == parts.count else {
            // Out of order: a segment was lost. Drop the message; the sender will ask again.
            parts = []
            expected = 0
            return nil
        }
        parts.append(segment.chunk)
        guard parts.count == expected else { return nil }
        defer {
            parts = []
            expected = 0
        }
        return parts.flatMap { $0 }
    }
}
