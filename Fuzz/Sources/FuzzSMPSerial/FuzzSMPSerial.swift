import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// SMP's serial line framing (0x06 0x09 / 0x04 0x14, base64, length,
/// CRC-16/XMODEM), as `serial://` links and `bleota sim serve --serial` read
/// a console; and the base64 codec underneath.
///
/// Input: lines separated by LF, fed to one decoder in order.
///
/// - Feeding never traps; a message it returns passed its CRC and length.
/// - Any message it returns, framed again (at any line length), decodes to
///   itself on a fresh decoder, with nothing returned before the last line.
/// - The input itself (its first 512 bytes), as a message, survives framing
///   and decoding, and as bytes survives base64.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSMPSerial(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let lineLength = input.isEmpty ? 128 : 8 + Int(input[0])

    var decoder = SMPSerialFraming.Decoder()
    for line in lines(of: input) {
        do {
            if let message = try decoder.feed(line: Array(line)) {
                // Base64 takes 4 characters for 3 bytes; length and CRC take 4 bytes.
                invariant((message.count + 4) / 3 * 4 <= input.count, "a \(message.count)-byte message from \(input.count) bytes of text")
                checkRoundTrip(message, lineLength: lineLength)
            }
        } catch {
            _ = error.description
        }
    }

    // A prefix is enough to exercise framing and base64; all of a long input would cost most of the time.
    let prefix = Array(input.prefix(512))
    checkRoundTrip(prefix, lineLength: lineLength)
    invariant(Base64.decode(Base64.encode(prefix)) == prefix, "base64 does not round-trip")
    if let decoded = Base64.decode(prefix) {
        invariant(
            decoded.count == prefix.count / 4 * 3 - prefix.suffix(2).filter { $0 == UInt8(ascii: "=") }.count,
            "\(prefix.count) base64 characters decoded to \(decoded.count) bytes")
        invariant(Base64.decode(Base64.encode(decoded)) == decoded, "decoded base64 does not round-trip")
    }
    return 0
}

func checkRoundTrip(_ message: [UInt8], lineLength: Int) {
    var decoder = SMPSerialFraming.Decoder()
    let framed = SMPSerialFraming.encode(message, lineLength: lineLength)
    for (index, line) in framed.enumerated() {
        invariant(line.count <= max(lineLength - 1, 7), "a \(line.count)-byte line for a \(lineLength)-byte line buffer")
        invariant(line.last == 0x0A, "a line without its newline")
        do {
            let result = try decoder.feed(line: Array(line.dropLast()))
            if index < framed.count - 1 {
                invariant(result == nil, "a message before the last line")
            } else {
                invariant(result == message, "framed and decoded, \(message.hexString) became \(result?.hexString ?? "nothing")")
            }
        } catch {
            fatalError("invariant violated: bleota's own serial framing does not decode: \(error)")
        }
    }
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzSMPSerial($0, $1) } }
}
