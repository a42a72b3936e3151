import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// Espressif BLE OTA, Dialog SUOTA and TI OAD messages, as their simulated devices and
/// bleota's host halves read them from the air, and their image checks.
///
/// - Decoding never traps; an error names a field at an offset inside the input.
/// - What decodes encodes to the same bytes (commands and acknowledgements
///   have one encoding), and a firmware packet's data lies inside the input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzVendorMessages(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let bytes = input[...]
    do {
        let command = try EspressifCommand(decoding: bytes)
        invariant((try? EspressifCommand(decoding: command.encode()[...])) == command, "an Espressif command does not round-trip")
    } catch {
        invariant(error.offset >= 0 && error.offset <= max(20, input.count), "error offset \(error.offset) outside the input")
    }
    if let ack = try? EspressifCommandAck(decoding: bytes) {
        invariant((try? EspressifCommandAck(decoding: ack.encode()[...])) == ack, "an Espressif command ack does not round-trip")
    }
    if let ack = try? EspressifSectorAck(decoding: bytes) {
        invariant((try? EspressifSectorAck(decoding: ack.encode()[...])) == ack, "an Espressif sector ack does not round-trip")
    }
    if let packet = try? EspressifFirmwarePacket(decoding: bytes) {
        invariant(packet.data.startIndex >= 3 && packet.data.endIndex <= input.count, "firmware data outside the input")
        invariant(packet.encode() == input, "a firmware packet does not encode to its bytes")
    }
    _ = ESPAppImage.problem(input)
    if let header = try? SUOTAImageHeader(decoding: input) {
        invariant(header.codeOffset >= UInt32(SUOTAImageHeader.size), "code offset inside the header")
    }
    _ = SUOTAImageHeader.problem(input)
    if let request = TIOADBlockRequest(decoding: bytes) {
        invariant(request.encode() == input, "a TI OAD block request does not encode to its bytes")
    }
    if (try? TIOADImageHeader(decoding: input)) != nil {
        invariant(TIOADImageHeader.identify(input).count == 22, "Image Identify is not 22 bytes")
    }
    _ = TIOADImageHeader.problem(input)
    _ = SUOTAImageHeader.problem(SUOTAImageHeader.signature + input)
    if let gbl = try? GeckoBootloaderImage(decoding: input) {
        invariant(gbl.length <= input.count && gbl.length >= 28, "a GBL file's end lies outside the input")
        invariant(gbl.programs.allSatisfy { $0.length >= 0 && $0.length <= input.count }, "a GBL program tag longer than the input")
    }
    _ = GeckoBootloaderImage.problem(input)
    if input.count >= 4 {
        let value = UInt32(input[0]) | UInt32(input[1]) << 8 | UInt32(input[2]) << 16 | UInt32(input[3]) << 24
        // The command is the top byte; END, REBOOT and abort ignore the parameter.
        invariant(SUOTAMemoryCommand(value: value).value >> 24 == value >> 24, "a MEM_DEV value changes its command")
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzVendorMessages($0, $1) } }
}
