import BleotaCodec
import FuzzSupport

/// Motorola S-record files, as `bleota image`, `flash` and `convert` read them.
///
/// - Parsing never traps; an error names a line of the input and, for a bad
///   character, the column that holds it.
/// - A parsed image keeps ``FirmwareImage``'s promises.
/// - Writing it back (any record size) and parsing that gives the same memory,
///   start address and (when it fits the 64 bytes written) S0 header.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSRecord(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let image: FirmwareImage
    do {
        image = try SRecord.parse(input)
    } catch {
        ImageChecks.check(error, input: input)
        return 0
    }
    invariant(image.format == .srec, "format \(image.format)")
    // The termination record (S7/S8/S9) is optional (bincopy omits it when there
    // is no start address); when one was read, its address is the start.
    let lines = input.split(separator: 0x0A).map { $0.drop { $0 == 0x20 || $0 == 0x09 } }.filter { !$0.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D } }
    let terminated = lines.last.map { $0.count >= 2 && $0.first == UInt8(ascii: "S") && (0x37...0x39).contains($0[$0.startIndex + 1]) } ?? false
    invariant(!terminated || image.startAddress != nil, "a file that ended with S7/S8/S9 has no start address")
    ImageChecks.check(image, inputSize: input.count)

    let recordSize = input.isEmpty ? 16 : Int(input[input.count / 2])
    for perRecord in [16, recordSize] {
        let text = SRecord.encode(image, bytesPerRecord: perRecord)
        let again: FirmwareImage
        do { again = try SRecord.parse(Array(text.utf8)) } catch {
            fatalError("invariant violated: bleota's own S-record output does not parse: \(error)\n\(text)")
        }
        invariant(ImageChecks.memory(again) == ImageChecks.memory(image), "written and read back, the memory differs")
        invariant(again.startAddress == image.startAddress, "start address \(String(describing: image.startAddress)) became \(String(describing: again.startAddress))")
        if let header = image.header, header.utf8.count <= 64 {
            invariant(again.header == header, "header \(header.debugDescription) became \(String(describing: again.header?.debugDescription))")
        }
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzSRecord($0, $1) } }
}
