import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// The native protocol's segment reassembler (``NativeReassembler``) and its
/// sending half (``NativeFraming``).
///
/// Input: a byte choosing the link's payload size, then packets, each a flag
/// byte (low bit: append a correct CRC-16) and a length-prefixed body.
///
/// - Feeding never traps. A packet that is not a segment comes out unchanged;
///   a joined message is exactly the chunks of the segments 0…count−1 just
///   fed, in order; a broken sequence yields nothing.
/// - Any other message that decodes, cut into packets for the link, fits the
///   link and is joined back into exactly its bytes by a fresh reassembler.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNativeReassembler(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var cursor = InputCursor(Fuzzer.bytes(data, size))
    let maximumPayload = 20 + Int(cursor.byte() ?? 224)
    var reassembler = NativeReassembler()
    // The segments of the message being joined, as the protocol defines it.
    var run: [NativeMessage.Segment] = []
    while let packet = cursor.sealedPacket() {
        let output = reassembler.feed(packet)
        let message = try? NativeMessage(decoding: packet)
        // A SEGMENT is what framing produces, never what it is given.
        if let message, !isSegment(message) { checkFraming(message, maximumPayload: maximumPayload) }
        guard packet.first == NativeMessage.Opcode.segment.rawValue else {
            invariant(output == packet, "a non-segment packet was changed")
            continue
        }
        guard case .segment(let segment)? = message else {
            invariant(output == nil, "a damaged segment produced a message")
            continue
        }
        if segment.index == 0 {
            run = [segment]
        } else if let last = run.last, last.count == segment.count, Int(segment.index) == run.count {
            run.append(segment)
        } else {
            run = []
        }
        if let first = run.first, run.count == Int(first.count) {
            invariant(output == run.flatMap(\.chunk), "the joined message is not the segments' chunks")
            run = []
        } else {
            invariant(output == nil, "a message from an incomplete or broken run of segments")
        }
    }
    return 0
}

func isSegment(_ message: NativeMessage) -> Bool {
    if case .segment = message { return true }
    return false
}

func checkFraming(_ message: NativeMessage, maximumPayload: Int) {
    let bytes = message.encode()
    let packets = NativeFraming.packets(for: message, maximumPayload: maximumPayload)
    // More than 255 segments cannot be numbered: the message then goes whole.
    if packets.count > 1 || bytes.count <= maximumPayload {
        invariant(packets.allSatisfy { $0.count <= maximumPayload }, "a packet beyond the \(maximumPayload)-byte payload")
    }
    var reassembler = NativeReassembler()
    for (index, packet) in packets.enumerated() {
        let output = reassembler.feed(packet)
        if index < packets.count - 1 {
            invariant(output == nil, "a message before the last segment")
        } else {
            invariant(output == bytes, "framed over \(maximumPayload) bytes and joined, \(bytes.hexString) became \(output?.hexString ?? "nothing")")
        }
    }
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzNativeReassembler($0, $1) } }
}
