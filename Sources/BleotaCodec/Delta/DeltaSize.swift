/// detools' variable-length integer ("size"), used for the target size in a patch's header and for
/// every length and adjustment in its body.
///
/// The first byte holds a sign (0x40) and the low six bits of the magnitude; each further byte
/// seven more bits, least significant first. 0x80 in a byte says another follows. Zero is one 0x00.
public enum DeltaSize {
    /// `value` as detools writes it.
    public static func encode(_ value: Int) -> [UInt8] {
        guard value != 0 else { return [0] }
        var magnitude = value.magnitude
        var bytes: [UInt8] = [(value < 0 ? 0x40 : 0) | UInt8(magnitude & 0x3F)]
        magnitude >>= 6
        while magnitude > 0 {
            bytes[bytes.count - 1] |= 0x80
            bytes.append(UInt8(magnitude & 0x7F))
            magnitude >>= 7
        }
        return bytes
    }

    /// Reads one size byte by byte. The largest magnitude taken is 2^62, far above any image.
    public struct Reader: Sendable {
        private var magnitude: UInt64 = 0
        private var negative = false
        private var shift: UInt64 = 0
        private var started = false

        public init() {}

        /// Takes the next byte; the value when it was the last one. Throws on a size over 62 bits.
        public mutating func take(_ byte: UInt8, field: String, offset: Int) throws(DeltaPatchError) -> Int? {
            let bits: UInt64
            if !started {
                started = true
                negative = byte & 0x40 != 0
                bits = UInt64(byte & 0x3F)
                magnitude = bits
                shift = 6
            } else {
                bits = UInt64(byte & 0x7F)
                guard shift <= 56, (bits << shift) >> shift == bits else {
                    throw DeltaPatchError(.invalid("a size longer than 62 bits"), field: field, offset: offset)
                }
                magnitude |= bits << shift
                shift += 7
            }
            guard byte & 0x80 == 0 else { return nil }
            guard magnitude <= UInt64(1) << 62 else { throw DeltaPatchError(.invalid("a size longer than 62 bits"), field: field, offset: offset) }
            let value = negative ? -Int(magnitude) : Int(magnitude)
            self = Reader()
            return value
        }

        /// Whether a size has begun and not ended.
        public var isPartial: Bool { started }
    }
}
