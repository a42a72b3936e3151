import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// One SMP message (8-byte header + CBOR map), as the SMP client reads a
/// device's answers and the simulated device reads requests; then the typed
/// bodies the client and device take out of it.
///
/// - Decoding never traps; an error's offset lies inside the input, and an
///   error in the CBOR body points at or after the header.
/// - The header re-encodes to its 8 bytes (reserved bits cleared); the whole
///   message re-encodes to a message that decodes equal, and to the input
///   itself when the body was already canonical CBOR.
/// - Typed bodies that decode re-encode to a body that decodes to them again.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSMPPacket(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)

    if input.count >= SMPHeader.size {
        invariant(SMPPacket.totalLength(of: input) == SMPHeader.size + (Int(input[2]) << 8 | Int(input[3])), "totalLength disagrees with the length field")
        var reader = ByteReader(input)
        if let header = try? SMPHeader(decoding: &reader) {
            var writer = ByteWriter()
            header.encode(into: &writer)
            invariant(writer.bytes == [input[0] & 0x1F] + input[1..<SMPHeader.size], "header \(input.prefix(8).hexString) re-encodes as \(writer.bytes.hexString)")
        }
    } else {
        invariant(SMPPacket.totalLength(of: input) == nil, "a length from fewer than 8 bytes")
    }

    let packet: SMPPacket
    do {
        packet = try SMPPacket(decoding: input)
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "error offset \(error.offset) outside \(input.count) bytes: \(error)")
        if error.field.hasPrefix("CBOR") {
            invariant(error.offset >= SMPHeader.size, "a CBOR error at offset \(error.offset), inside the SMP header: \(error)")
        }
        _ = error.description
        return 0
    }
    invariant(Int(packet.header.length) == input.count - SMPHeader.size, "length field \(packet.header.length) for \(input.count) bytes")
    let encoded = packet.encode()
    do {
        let again = try SMPPacket(decoding: encoded)
        var header = packet.header
        header.length = UInt16(encoded.count - SMPHeader.size)
        invariant(again.header == header && again.body == packet.body, "\(packet) re-encoded decodes as \(again)")
    } catch {
        fatalError("invariant violated: a re-encoded SMP message does not decode: \(error)")
    }
    if packet.body.encode() == Array(input[SMPHeader.size...]) {
        invariant(encoded == [input[0] & 0x1F] + input[1...], "a canonical message re-encodes differently")
    }
    checkBodies(packet.body)
    return 0
}

/// Every typed body either side takes out of an SMP map.
func checkBodies(_ body: CBOR) {
    if let error = SMPDeviceError(response: body) {
        invariant(error.rc != 0, "an error with rc 0")
        _ = error.description
        _ = error.body
    }
    if let parameters = try? MCUmgrParameters(body: body) {
        invariant((try? MCUmgrParameters(body: parameters.body)) == parameters, "parameters do not round-trip: \(parameters)")
    }
    if let slots = try? SMPImageSlot.list(from: body) {
        // `image` is written only for a second image, as Zephyr does.
        let again = try? SMPImageSlot.list(from: SMPImageSlot.listBody(slots))
        invariant(
            again
                == slots.map {
                    var slot = $0
                    slot.image = 0
                    return slot
                }, "image slots do not round-trip: \(slots)")
    }
    if let upload = try? SMPUploadRequest(body: body) {
        // `image` is written only in the first chunk.
        var expected = upload
        if upload.offset != 0 { expected.image = 0 }
        invariant((try? SMPUploadRequest(body: upload.body)) == expected, "an upload request does not round-trip: \(upload)")
    }
    if let file = try? SMPFileUploadRequest(body: body) {
        invariant((try? SMPFileUploadRequest(body: file.body)) == file, "a file upload request does not round-trip: \(file)")
    }
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzSMPPacket($0, $1) } }
}
