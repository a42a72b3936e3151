import BleotaATT
import BleotaCodec
import FuzzSupport

/// ATT PDUs (Core v5.4, Vol 3, Part F), as the bearer reads whatever arrives
/// over L2CAP from a peer, client or server.
///
/// - Decoding never traps; an error's offset lies inside the input.
/// - A PDU that decodes encodes back to exactly the input, except a Read
///   Multiple Variable Response whose last value the MTU cut (its length
///   field then says more than it carries); either way the encoding decodes
///   to an equal PDU with the same opcode.
/// - The opcode's kind and expected response are consistent.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzATTPDU(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    if let first = input.first {
        let opcode = ATTOpcode(rawValue: first)
        _ = opcode.description
        if let response = opcode.response {
            invariant(opcode.kind == .request && response.kind == .response, "\(opcode) expects \(response), which is no response")
        }
        if opcode.kind == .command { invariant(opcode.isCommand, "\(opcode) is a command without bit 6") }
    }

    let pdu: ATTPDU
    do {
        pdu = try ATTPDU(decoding: input)
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "error offset \(error.offset) outside \(input.count) bytes: \(error)")
        _ = error.description
        return 0
    }
    invariant(pdu.opcode.rawValue == input[0], "decoded as \(pdu.opcode) from opcode 0x\(String(input[0], radix: 16))")
    let encoded = pdu.encode()
    if case .readMultipleVariableResponse = pdu {
        invariant(encoded.count == input.count, "\(pdu) from \(input.count) bytes encodes in \(encoded.count)")
    } else {
        invariant(encoded == input, "\(pdu) from \(input.hexString) encodes as \(encoded.hexString)")
    }
    do {
        let again = try ATTPDU(decoding: encoded)
        invariant(again == pdu, "\(pdu) encodes as \(encoded.hexString), which decodes as \(again)")
    } catch {
        fatalError("invariant violated: the encoding of \(pdu) does not decode: \(error)")
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzATTPDU($0, $1) } }
}
