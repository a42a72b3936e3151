import BleotaBlueZ
import BleotaCodec
import FuzzSupport

/// Packets of the kernel's Bluetooth Management interface, as bleota's
/// management socket reads whatever the kernel (or anything bound to the
/// control channel) sends: the 6-byte header and every event bleota decodes.
///
/// - Decoding never traps; an error's offset lies inside the input.
/// - A packet that decodes encodes back to exactly the input.
/// - The keys of New Long Term Key and New Identity Resolving Key events encode
///   back to the bytes they came from, and their descriptions never carry the key.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzManagementEvent(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let packet: ManagementPacket
    do {
        packet = try ManagementPacket(decoding: input)
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "error offset \(error.offset) outside \(input.count) bytes: \(error)")
        return 0
    }
    invariant(packet.encode() == input, "\(input.hexString) re-encodes as \(packet.encode().hexString)")
    let event: ManagementEvent
    do {
        event = try ManagementEvent(decoding: packet)
    } catch {
        invariant(
            error.offset >= 0 && error.offset <= packet.parameters.count,
            "error offset \(error.offset) outside \(packet.parameters.count) parameter bytes: \(error)")
        return 0
    }
    switch event {
    case .newLongTermKey(_, let key):
        var writer = ByteWriter()
        key.encode(into: &writer)
        invariant(writer.bytes == Array(packet.parameters[1..<(1 + LongTermKey.size)]), "the key re-encodes differently")
        invariant(!key.description.contains(key.value.hexString) || key.value.allSatisfy { $0 == 0 }, "a key's description shows its value")
    case .newIdentityResolvingKey(_, _, let key):
        var writer = ByteWriter()
        key.encode(into: &writer)
        invariant(writer.bytes == Array(packet.parameters[7..<(7 + IdentityResolvingKey.size)]), "the IRK re-encodes differently")
    default:
        break
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzManagementEvent($0, $1) } }
}
