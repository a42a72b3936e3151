import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// The SMP reassembler that puts link packets (GATT notifications and
/// writes, UDP datagrams) back into whole messages, on both halves.
///
/// Input: a byte choosing the limit (the default, or a small device buffer),
/// then packets as length-prefixed chunks; a zero-length chunk resets.
///
/// - Every message it returns is as long as its header says, is no longer
///   than the limit, and is the next stretch of the byte stream: messages
///   come out in order, never overlapping, never made of bytes from before a
///   reset or from a dropped message.
/// - With the default limit (large enough for any SMP message) nothing is
///   dropped: the messages are exactly the stream's complete messages, and
///   what is held back is less than one message.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSMPReassembler(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var cursor = InputCursor(Fuzzer.bytes(data, size))
    let choice = cursor.byte() ?? 0
    let limit = choice == 0 ? nil : SMPHeader.size + Int(choice)
    var reassembler = limit.map { SMPReassembler(limit: $0) } ?? SMPReassembler()

    // The bytes fed since the last reset, and how far into them messages have been taken.
    var stream: [UInt8] = []
    var consumed = 0
    while let packet = cursor.chunk() {
        if packet.isEmpty {
            reassembler.reset()
            invariant(reassembler.isEmpty, "not empty after a reset")
            stream = []
            consumed = 0
            continue
        }
        stream += packet
        for message in reassembler.feed(packet) {
            invariant(
                SMPPacket.totalLength(of: message) == message.count, "a \(message.count)-byte message whose header says \(String(describing: SMPPacket.totalLength(of: message)))")
            invariant(message.count <= reassembler.limit, "a \(message.count)-byte message passed the \(reassembler.limit)-byte limit")
            if limit == nil {
                invariant(
                    Array(stream[consumed..<min(stream.count, consumed + message.count)]) == message,
                    "message is not the next \(message.count) bytes of the stream at \(consumed)")
                consumed += message.count
            } else {
                // Dropped messages leave gaps, so look for the message at or after where the last one ended.
                guard let at = find(message, in: stream, from: consumed) else {
                    fatalError("invariant violated: a message that is not in the stream after byte \(consumed)")
                }
                consumed = at + message.count
            }
        }
        if limit == nil {
            let held = stream.count - consumed
            invariant(reassembler.isEmpty == (held == 0), "isEmpty is \(reassembler.isEmpty) with \(held) bytes held")
            if let total = SMPPacket.totalLength(of: stream[consumed...]) {
                invariant(held < total, "a complete \(total)-byte message is held back")
            }
        }
    }
    return 0
}

func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
    guard needle.count <= haystack.count else { return nil }
    var index = start
    while index + needle.count <= haystack.count {
        if haystack[index..<index + needle.count].elementsEqual(needle) { return index }
        index += 1
    }
    return nil
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzSMPReassembler($0, $1) } }
}
