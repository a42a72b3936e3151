import BleotaCodec

/// Native packets carry a CRC-16 that random bytes almost never match. A
/// packet built by ``sealedPacket(flag:body:)`` gets the right one when the
/// flag's low bit is set, so the fuzzer reaches the message parsers behind
/// the check, and keeps whatever it wrote when the bit is clear, so the check
/// itself is fuzzed too.
public func sealedPacket(flag: UInt8, body: [UInt8]) -> [UInt8] {
    guard flag & 1 == 1 else { return body }
    let crc = CRC16.checksum(body, variant: .ccittFalse)
    return body + [UInt8(crc & 0xFF), UInt8(crc >> 8)]
}

extension InputCursor {
    /// A flag byte and a length-prefixed body, sealed as ``sealedPacket(flag:body:)`` says.
    public mutating func sealedPacket() -> [UInt8]? {
        guard let flag = byte(), let body = chunk() else { return nil }
        return FuzzSupport.sealedPacket(flag: flag, body: body)
    }
}
