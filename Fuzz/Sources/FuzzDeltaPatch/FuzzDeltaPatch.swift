import BleotaCodec
import FuzzSupport

/// Delta patches, as `bleota delta apply` and a device rebuilding an image read them. The input is
/// a base and a patch: two bytes give the base's length, the base follows, the patch is the rest.
///
/// - Reading and applying never trap, and never read the base outside its bytes.
/// - An applied patch yields exactly the size its header names; the streaming applier, fed in
///   pieces of every size the input suggests, agrees with the whole-patch one.
/// - A patch bleota makes between the base and the patch's bytes applies back to those bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDeltaPatch(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    guard input.count >= 2 else { return 0 }
    let baseLength = min(input.count - 2, Int(input[0]) << 8 | Int(input[1]))
    let base = Array(input[2..<(2 + baseLength)])
    let patch = Array(input[(2 + baseLength)...])

    let whole: [UInt8]?
    do { whole = try DeltaPatch.apply(patch, to: base) } catch { whole = nil }
    if let whole, let header = try? DeltaPatchHeader(reading: patch) {
        invariant(whole.count == header.newSize, "\(whole.count) bytes made, the header names \(header.newSize)")
    }
    if let header = try? DeltaPatchHeader(reading: patch) {
        let piece = 1 + Int(input[0] % 7)
        var applier = DeltaPatchApplier(header: header, baseSize: base.count)
        var output: [UInt8] = []
        var streamed: [UInt8]? = output
        var index = header.size
        do {
            while index < patch.count {
                let end = min(patch.count, index + piece)
                try applier.consume(
                    patch[index..<end],
                    base: { offset in
                        invariant(offset >= 0 && offset < base.count, "the base read at \(offset) of \(base.count)")
                        return base[offset]
                    }, into: &output)
                index = end
            }
            try applier.finish()
            streamed = output
        } catch {
            streamed = nil
        }
        invariant(streamed == whole, "streamed in pieces of \(piece) and whole disagree")
    }
    if base.count + patch.count <= 4096 {
        let made = DeltaPatch.create(from: base, to: patch, compression: input[0] & 1 == 0 ? .heatshrink : .none)
        let rebuilt = try? DeltaPatch.apply(made, to: base)
        invariant(rebuilt == patch, "a patch bleota made did not rebuild its new image")
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzDeltaPatch($0, $1) } }
}
