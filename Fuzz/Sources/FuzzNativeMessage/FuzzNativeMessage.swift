import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// bleota's native protocol messages, as the device half and the updater read
/// every packet from the link.
///
/// Input: a flag byte (low bit set: the rest gets a correct CRC-16 appended)
/// and the packet.
///
/// - Decoding never traps; an error's offset lies inside the packet.
/// - A message that decodes encodes back to exactly the packet (every field
///   round-trips, the CRC included), and the reassembler passes it through
///   unless it is a segment.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNativeMessage(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let packet = sealedPacket(flag: input.first ?? 0, body: Array(input.dropFirst()))
    let message: NativeMessage
    do {
        message = try NativeMessage(decoding: packet)
    } catch {
        invariant(error.offset >= 0 && error.offset <= packet.count, "error offset \(error.offset) outside \(packet.count) bytes: \(error)")
        _ = error.description
        return 0
    }
    let encoded = message.encode()
    invariant(encoded == packet, "\(message) from \(packet.hexString) encodes as \(encoded.hexString)")
    if case .segment = message {
    } else {
        var reassembler = NativeReassembler()
        invariant(reassembler.feed(packet) == packet, "the reassembler changed a \(message) packet")
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzNativeMessage($0, $1) } }
}
