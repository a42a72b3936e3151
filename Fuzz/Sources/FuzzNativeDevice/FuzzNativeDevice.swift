import BleotaCodec
import BleotaLink
import FuzzSupport

@testable import BleotaProtocols

/// The native protocol's device half (``NativeDevice``, what the simulator and
/// `bleota serve` run) reading one connection's packets from a hostile host.
///
/// Input: a byte choosing the link's payload size, then packets, each a flag
/// byte (low bit: append a correct CRC-16) and a length-prefixed body. The
/// device starts fresh and sees the packets in order, then the link drops; a
/// reboot it asks for restarts it on the same link, as a reconnect would.
///
/// - Serving never traps or hangs, whatever arrives.
/// - Every packet the device sends fits the link, and joins (segments) into
///   messages that decode: it never sends a malformed message.
/// - It never answers an ERROR with an ERROR (two confused peers would
///   ping-pong forever), nor a damaged packet at all.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNativeDevice(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var cursor = InputCursor(Fuzzer.bytes(data, size))
    let maximumPayload = 20 + Int(cursor.byte() ?? 224)
    var packets: [[UInt8]] = []
    while let packet = cursor.sealedPacket() { packets.append(packet) }

    let link = ScriptedLink(packets: packets, maximumPayload: maximumPayload)
    runBlocking {
        let storage = DeviceStorage(activeImage: Array(0..<64), activeVersion: "1.0.0", slotSize: 16 * 1024)
        let device = NativeDevice(name: "fuzz", storage: storage, bufferCount: 8, maximumPacket: maximumPayload)
        let environment = NativeDeviceEnvironment(clock: InstantClock(), flashPageSize: 4096, reboot: { _ in await device.boot() })
        await device.serve(link, environment: environment)
    }

    var reassembler = NativeReassembler()
    var replies: [NativeMessage] = []
    for packet in link.sent {
        invariant(packet.count <= maximumPayload, "a \(packet.count)-byte packet on a \(maximumPayload)-byte link")
        guard let bytes = reassembler.feed(packet) else {
            invariant(packet.first == NativeMessage.Opcode.segment.rawValue, "the device sent a damaged segment")
            continue
        }
        do {
            replies.append(try NativeMessage(decoding: bytes))
        } catch {
            fatalError("invariant violated: the device sent \(bytes.hexString), which does not decode: \(error)")
        }
    }
    if packets.allSatisfy({ (try? NativeMessage(decoding: $0)) == nil }) {
        // Nothing intelligible arrived: at most one ERROR each for undamaged packets that are not ERRORs.
        let answerable = packets.filter { packet in
            guard packet.first != NativeMessage.Opcode.error.rawValue else { return false }
            do { _ = try NativeMessage(decoding: packet) } catch { return (error as? DecodingError)?.field != NativeMessage.checksumField }
            return true
        }
        invariant(replies.count <= answerable.count, "\(replies.count) replies to \(answerable.count) answerable packets")
        for reply in replies {
            guard case .error = reply else { fatalError("invariant violated: \(reply) in answer to garbage") }
        }
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzNativeDevice($0, $1) } }
}
