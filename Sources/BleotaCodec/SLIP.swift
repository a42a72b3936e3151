/// SLIP (RFC 1055) byte stuffing, as Nordic's serial DFU transports use it:
/// a frame is its escaped bytes followed by one END byte (0xC0). Inside a
/// frame END becomes ESC ESC_END (0xDB 0xDC) and ESC becomes ESC ESC_ESC
/// (0xDB 0xDD).
///
/// Nordic's bootloader (`components/libraries/slip/slip.c`) and nrfutil both
/// end a frame with END and never start one with it; a receiver that meets an
/// END with nothing before it sees an empty frame, which readers skip.
public enum SLIP {
    public static let end: UInt8 = 0xC0
    public static let escape: UInt8 = 0xDB
    public static let escapedEnd: UInt8 = 0xDC
    public static let escapedEscape: UInt8 = 0xDD

    /// `payload` escaped and closed with END.
    public static func encode(_ payload: some Sequence<UInt8>) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(payload.underestimatedCount + 8)
        for byte in payload {
            switch byte {
            case end: frame += [escape, escapedEnd]
            case escape: frame += [escape, escapedEscape]
            default: frame.append(byte)
            }
        }
        frame.append(end)
        return frame
    }

    /// The bytes of one frame's body (what came before its END), unescaped.
    /// An ESC followed by anything but ESC_END or ESC_ESC, or an ESC at the
    /// end, is an error naming its offset: the frame was damaged on the line.
    public static func decode(_ body: some Collection<UInt8>) throws(DecodingError) -> [UInt8] {
        var payload: [UInt8] = []
        payload.reserveCapacity(body.count)
        var escaped = false
        for (offset, byte) in body.enumerated() {
            if escaped {
                switch byte {
                case escapedEnd: payload.append(end)
                case escapedEscape: payload.append(escape)
                default:
                    throw DecodingError(
                        field: "SLIP escape", offset: offset,
                        reason: .invalidValue("0x\(String(byte, radix: 16)) after 0xDB, expected 0xDC or 0xDD"))
                }
                escaped = false
            } else if byte == escape {
                escaped = true
            } else if byte == end {
                throw DecodingError(field: "SLIP frame", offset: offset, reason: .invalidValue("END (0xC0) inside a frame body"))
            } else {
                payload.append(byte)
            }
        }
        if escaped { throw DecodingError(field: "SLIP escape", offset: body.count - 1, reason: .truncated(needed: 1)) }
        return payload
    }
}
