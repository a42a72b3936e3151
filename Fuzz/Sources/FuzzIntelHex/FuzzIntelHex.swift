import BleotaCodec
import FuzzSupport

/// Intel HEX files, as `bleota image`, `flash` and `convert` read them.
///
/// - Parsing never traps; an error names a line of the input and, for a bad
///   character, the column that holds it.
/// - A parsed image keeps ``FirmwareImage``'s promises (sorted, disjoint,
///   non-empty segments; flattened view, CRC-32 and SHA-256 agree).
/// - Writing it back (any record size) and parsing that gives the same memory
///   and start address.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzIntelHex(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let image: FirmwareImage
    do {
        image = try IntelHex.parse(input)
    } catch {
        ImageChecks.check(error, input: input)
        return 0
    }
    invariant(image.format == .intelHex, "format \(image.format)")
    ImageChecks.check(image, inputSize: input.count)

    let recordSize = input.isEmpty ? 16 : Int(input[input.count / 2])
    for perRecord in [16, recordSize] {
        let text = IntelHex.encode(image, bytesPerRecord: perRecord)
        let again: FirmwareImage
        do { again = try IntelHex.parse(Array(text.utf8)) } catch {
            fatalError("invariant violated: bleota's own HEX output does not parse: \(error)\n\(text)")
        }
        invariant(ImageChecks.memory(again) == ImageChecks.memory(image), "written and read back, the memory differs")
        invariant(again.startAddress == image.startAddress, "start address \(String(describing: image.startAddress)) became \(String(describing: again.startAddress))")
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzIntelHex($0, $1) } }
}
