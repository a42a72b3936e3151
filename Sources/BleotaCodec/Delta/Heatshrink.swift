/// heatshrink, the LZSS compression detools and Espressif's `esp_delta_ota` use for patches: made
/// for devices, it decodes with a window of 2^window bytes and no other state.
///
/// The stream is bits, most significant first: a 1 bit then eight bits of a literal byte, or a 0
/// bit then a back-reference, `window` bits of (distance − 1) and `lookahead` bits of (length − 1).
/// The window starts as zeros. The last byte is padded with zero bits, too few to be read as
/// anything. detools puts one byte before the stream: (window − 4) << 4 | (lookahead − 3).
public enum Heatshrink {
    /// The window and lookahead sizes, as powers of two.
    public struct Parameters: Sendable, Hashable, CustomStringConvertible {
        public var windowBits: Int
        public var lookaheadBits: Int

        /// detools' defaults (and what `esp_delta_ota` is built with): a 256-byte window, matches up to 128 bytes.
        public static let detoolsDefault = Parameters(windowBits: 8, lookaheadBits: 7)

        public init(windowBits: Int, lookaheadBits: Int) {
            self.windowBits = windowBits
            self.lookaheadBits = lookaheadBits
        }

        /// heatshrink's limits: a window of 2^4…2^15 bytes, a lookahead of 2^3 up to the window.
        public var isValid: Bool { (4...15).contains(windowBits) && (3...15).contains(lookaheadBits) && lookaheadBits < windowBits }

        /// detools' byte before the stream.
        public var headerByte: UInt8 { UInt8((windowBits - 4) << 4 | (lookaheadBits - 3)) }

        public init?(headerByte: UInt8) {
            self.init(windowBits: Int(headerByte >> 4) + 4, lookaheadBits: Int(headerByte & 0x0F) + 3)
            guard isValid else { return nil }
        }

        public var description: String { "window 2^\(windowBits), lookahead 2^\(lookaheadBits)" }
    }

    /// Compresses `input` whole: greedy longest matches of two bytes or more (a back-reference costs
    /// 1 + window + lookahead bits, a literal nine).
    public static func encode(_ input: [UInt8], parameters: Parameters = .detoolsDefault) -> [UInt8] {
        precondition(parameters.isValid, "heatshrink parameters out of range")
        let windowSize = 1 << parameters.windowBits
        let longest = 1 << parameters.lookaheadBits
        var writer = BitWriter()
        // The newest earlier position with the same two-byte prefix, and for each position the one before it.
        var newest = [Int32](repeating: -1, count: 1 << 16)
        var previous = [Int32](repeating: -1, count: input.count)
        func key(_ position: Int) -> Int { Int(input[position]) << 8 | Int(input[position + 1]) }
        func remember(_ position: Int) {
            guard position + 1 < input.count else { return }
            let k = key(position)
            previous[position] = newest[k]
            newest[k] = Int32(position)
        }
        var position = 0
        while position < input.count {
            var bestLength = 0
            var bestDistance = 0
            if position + 1 < input.count {
                var candidate = Int(newest[key(position)])
                let limit = min(longest, input.count - position)
                var steps = 0
                while candidate >= 0, position - candidate <= windowSize, steps < 64 {
                    var length = 2
                    while length < limit, input[candidate + length] == input[position + length] { length += 1 }
                    if length > bestLength {
                        bestLength = length
                        bestDistance = position - candidate
                        if length == limit { break }
                    }
                    candidate = Int(previous[candidate])
                    steps += 1
                }
            }
            if bestLength >= 2 {
                writer.write(0, bits: 1)
                writer.write(UInt32(bestDistance - 1), bits: parameters.windowBits)
                writer.write(UInt32(bestLength - 1), bits: parameters.lookaheadBits)
                for covered in position..<(position + bestLength) { remember(covered) }
                position += bestLength
            } else {
                writer.write(1, bits: 1)
                writer.write(UInt32(input[position]), bits: 8)
                remember(position)
                position += 1
            }
        }
        return writer.finish()
    }

    /// Decodes a stream as it arrives, holding only its window (2^window bytes) and a few bits.
    public struct Decoder: Sendable {
        public let parameters: Parameters
        private var window: [UInt8]
        private var head = 0
        private var bitBuffer: UInt32 = 0
        private var bitCount = 0
        private enum State { case tag, literal, distance, length(distance: Int) }
        private var state = State.tag

        public init(parameters: Parameters) {
            precondition(parameters.isValid, "heatshrink parameters out of range")
            self.parameters = parameters
            window = [UInt8](repeating: 0, count: 1 << parameters.windowBits)
        }

        /// The bytes `input` completes, appended to `output`.
        public mutating func decode(_ input: some Sequence<UInt8>, into output: inout [UInt8]) {
            for byte in input {
                bitBuffer = bitBuffer << 8 | UInt32(byte)
                bitCount += 8
                drain(into: &output)
            }
        }

        private mutating func take(_ bits: Int) -> UInt32? {
            guard bitCount >= bits else { return nil }
            bitCount -= bits
            let value = (bitBuffer >> UInt32(bitCount)) & ((1 << UInt32(bits)) - 1)
            bitBuffer &= (1 << UInt32(bitCount)) &- 1
            return value
        }

        private mutating func emit(_ byte: UInt8, into output: inout [UInt8]) {
            output.append(byte)
            window[head & (window.count - 1)] = byte
            head += 1
        }

        private mutating func drain(into output: inout [UInt8]) {
            while true {
                switch state {
                case .tag:
                    guard let tag = take(1) else { return }
                    state = tag == 1 ? .literal : .distance
                case .literal:
                    guard let byte = take(8) else { return }
                    emit(UInt8(byte), into: &output)
                    state = .tag
                case .distance:
                    guard let distance = take(parameters.windowBits) else { return }
                    state = .length(distance: Int(distance) + 1)
                case .length(let distance):
                    guard let length = take(parameters.lookaheadBits) else { return }
                    let mask = window.count - 1
                    for _ in 0...Int(length) { emit(window[(head - distance) & mask], into: &output) }
                    state = .tag
                }
            }
        }

        /// Whether the bits left over could only be the final byte's padding (fewer than a literal or
        /// reference needs, and all zero): true at the end of a whole stream.
        public var endsCleanly: Bool {
            switch state {
            case .tag, .distance: bitCount < 8 && bitBuffer == 0
            case .literal, .length: false
            }
        }
    }

    /// Decodes a whole stream.
    public static func decode(_ input: [UInt8], parameters: Parameters = .detoolsDefault) -> [UInt8] {
        var decoder = Decoder(parameters: parameters)
        var output: [UInt8] = []
        decoder.decode(input, into: &output)
        return output
    }
}

/// Bits written most significant first, the last byte padded with zeros.
struct BitWriter {
    private(set) var bytes: [UInt8] = []
    private var current: UInt32 = 0
    private var count = 0

    mutating func write(_ value: UInt32, bits: Int) {
        for bit in stride(from: bits - 1, through: 0, by: -1) {
            current = current << 1 | ((value >> UInt32(bit)) & 1)
            count += 1
            if count == 8 {
                bytes.append(UInt8(current))
                current = 0
                count = 0
            }
        }
    }

    mutating func finish() -> [UInt8] {
        if count > 0 { bytes.append(UInt8(current << UInt32(8 - count))) }
        count = 0
        current = 0
        return bytes
    }
}
