import BleotaCodec
import Crypto
import FuzzSupport

@testable import BleotaProtocols

/// Nordic Secure DFU init packets (`.dat`), as `image info`, `flash` and the
/// simulated bootloader read them, and the protobuf wire reader under them.
///
/// - Decoding never traps; an error's offset lies inside the input.
/// - What decodes encodes to bytes that decode to the same packet, keeping
///   the signed command's bytes exactly (a signature stays checkable).
/// - Hash and signature checks answer without trapping.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNordicInitPacket(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    // The wire reader alone: every field lies inside the input, in order.
    var reader = ProtobufReader(input, name: "fuzz")
    var last = -1
    while true {
        do {
            guard let field = try reader.next() else { break }
            invariant(
                field.offset > last && field.valueOffset >= field.offset && field.valueOffset <= input.count
                    && field.bytes.endIndex <= input.count, "field \(field.number) at \(field.offset) outside the input")
            last = field.offset
        } catch {
            invariant(error.offset >= 0 && error.offset <= input.count, "wire error offset \(error.offset) outside \(input.count) bytes")
            break
        }
    }
    let packet: NordicInitPacket
    do {
        packet = try NordicInitPacket(decoding: input)
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "error offset \(error.offset) outside \(input.count) bytes: \(error)")
        _ = error.description
        return 0
    }
    let encoded = packet.encode()
    do {
        let again = try NordicInitPacket(decoding: encoded)
        invariant(again == packet, "a decoded packet does not survive encoding: \(input.hexString)")
        invariant(again.signedBytes == packet.signedBytes, "the signed command's bytes changed in encoding")
    } catch {
        fatalError("invariant violated: bleota's encoding of a packet does not decode: \(error)")
    }
    _ = packet.hashMatches(Array(input.prefix(64)))
    _ = packet.signatureVerifies(with: fuzzKey)
    return 0
}

nonisolated(unsafe) let fuzzKey = P256.Signing.PrivateKey().publicKey  // read only, from one thread

@main
enum Main {
    static func main() { Fuzzer.main { fuzzNordicInitPacket($0, $1) } }
}
