import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// What arrives on a Nordic serial line or control point, from a hostile
/// peer: SLIP frame bodies, legacy HCI frames, Secure DFU answers, legacy
/// notifications and legacy init packets.
///
/// - Nothing traps; errors name offsets inside the input.
/// - SLIP: what decodes encodes back to the same body plus END.
/// - HCI: a frame that checks has the payload it was built with.
/// - Answers, notifications and init packets that decode encode to what decodes the same.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNordicSerial(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    do {
        let payload = try SLIP.decode(input)
        invariant(SLIP.encode(payload) == input + [SLIP.end], "SLIP does not round-trip: \(input.hexString)")
        if let (sequence, body) = NordicHCILink.parse(payload) {
            let rebuilt = NordicHCILink.frame(body, sequence: sequence)
            let again = try SLIP.decode(rebuilt.dropFirst().dropLast())
            invariant(NordicHCILink.parse(again)?.payload == body, "an HCI frame does not round-trip")
        }
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "SLIP error offset outside the input")
    }
    if let response = try? NordicDFUResponse(decoding: input) {
        invariant((try? NordicDFUResponse(decoding: response.encode())) == response, "a DFU answer does not round-trip")
        _ = response.failureDescription
    }
    if let notification = try? NordicLegacyNotification(decoding: input) {
        invariant((try? NordicLegacyNotification(decoding: notification.encode())) == notification, "a legacy notification does not round-trip")
    }
    do {
        let packet = try NordicLegacyInitPacket(decoding: input)
        invariant(packet.encode() == input, "a legacy init packet does not encode to its bytes")
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "legacy init packet error offset outside the input")
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzNordicSerial($0, $1) } }
}
