import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// Protocol descriptions (`--protocol-file`), as the command line reads them,
/// and the templates of a description that reads, fed the input's bytes.
///
/// - Reading never traps; an error's line lies within the text.
/// - A description that reads has a data packet with a payload, and every
///   template decodes any bytes without trapping; what a template encodes
///   never fails its own checksum.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzProtocolDescription(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let text = String(decoding: input, as: UTF8.self)
    let description: ProtocolDescription
    do {
        description = try ProtocolDescription(yaml: text, source: "fuzz.yaml")
    } catch {
        // YAML breaks lines at LF, CR, NEL, LS and PS.
        let lines = text.unicodeScalars.filter { [0x0A, 0x0D, 0x85, 0x2028, 0x2029].contains($0.value) }.count + 1
        if let line = error.line { invariant(line >= 1 && line <= lines + 1, "error line \(line) outside \(lines) lines: \(error)") }
        _ = error.description
        return 0
    }
    invariant(description.message(description.transfer.packet).hasPayload, "the data packet has no payload")
    for template in description.messages.values {
        _ = template.decode(input[...])
        _ = template.decode(input.dropFirst(min(3, input.count)))
        var values: [String: UInt64] = [:]
        for (index, name) in template.variables.enumerated() { values[name] = UInt64(index + 1) }
        // What a template encodes decodes again (a checksum over what precedes it always matches).
        let encoded = template.encode(values, payload: input.prefix(8))
        invariant(template.decode(encoded[...]) != .badChecksum, "\(template.name): its own encoding fails its checksum")
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzProtocolDescription($0, $1) } }
}
