import Foundation

@testable import BleotaCodec

/// SplitMix64 (Steele, Lea and Flood 2014): a seeded generator, so a random
/// input is reproduced from the seed the test prints.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A generator for `test`, its seed printed so a failure can be replayed.
    static func announced(_ test: String, seed: UInt64) -> SeededGenerator {
        print("\(test): seed \(seed)")
        return SeededGenerator(seed: seed)
    }
}

/// Record lines written here, independently of the encoders under test, to
/// build inputs the way other tools write them.
enum ReferenceRecords {
    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02X", $0) }.joined() }

    /// An Intel HEX record: count, 16-bit address, type, data, two's-complement checksum.
    static func intelHex(type: UInt8, address: UInt16, data: [UInt8] = []) -> String {
        let body = [UInt8(data.count), UInt8(address >> 8), UInt8(address & 0xFF), type] + data
        let sum = body.reduce(0) { $0 + Int($1) }
        return ":" + hex(body + [UInt8((256 - sum % 256) % 256)])
    }

    /// An S-record: count, big-endian address of `width` bytes, data, ones' complement checksum.
    static func srec(type: Int, address: UInt32, width: Int, data: [UInt8] = []) -> String {
        var body = [UInt8(width + data.count + 1)]
        for shift in stride(from: 8 * (width - 1), through: 0, by: -8) { body.append(UInt8((address >> UInt32(shift)) & 0xFF)) }
        body += data
        let sum = body.reduce(0) { $0 + Int($1) }
        return "S\(type)" + hex(body + [UInt8(255 - sum % 256)])
    }
}

/// CRC-32/ISO-HDLC by the definition — bit by bit, no table, no zlib — plus
/// the affine-map arithmetic behind zlib's `crc32_combine`, so the CRC of a
/// stream with a 4 GiB run of one byte is computed in microseconds without
/// that run ever existing.
///
/// With the register pre- and post-inverted, feeding one byte `b` maps the
/// register `r` to `M·r ⊕ c_b` over GF(2): a 32×32 matrix and a constant.
/// Feeding `n` copies of `b` is that map composed with itself `n` times, which
/// square-and-multiply reaches in log₂ n compositions.
struct ReferenceCRC32 {
    /// An affine map on the register: `columns[i]` is the image of bit `i`.
    struct Step {
        var columns: [UInt32]
        var constant: UInt32

        static let identity = Step(columns: (0..<32).map { UInt32(1) << $0 }, constant: 0)

        /// The map for feeding `byte` once, read off the bitwise update.
        init(byte: UInt8) {
            let base = ReferenceCRC32.feed(0, byte)
            columns = (0..<32).map { ReferenceCRC32.feed(UInt32(1) << $0, byte) ^ base }
            constant = base
        }

        init(columns: [UInt32], constant: UInt32) {
            self.columns = columns
            self.constant = constant
        }

        func linear(_ register: UInt32) -> UInt32 {
            (0..<32).reduce(UInt32(0)) { register & (1 << $1) != 0 ? $0 ^ columns[$1] : $0 }
        }

        func apply(_ register: UInt32) -> UInt32 { linear(register) ^ constant }

        /// `self` after `first`.
        func after(_ first: Step) -> Step {
            Step(columns: first.columns.map { linear($0) }, constant: apply(first.constant))
        }

        func repeated(_ count: UInt64) -> Step {
            var result = Step.identity
            var power = self
            var remaining = count
            while remaining > 0 {
                if remaining & 1 != 0 { result = power.after(result) }
                power = power.after(power)
                remaining >>= 1
            }
            return result
        }
    }

    private(set) var register: UInt32 = 0xFFFF_FFFF

    var value: UInt32 { register ^ 0xFFFF_FFFF }

    mutating func update(_ bytes: [UInt8]) {
        for byte in bytes { register = Self.feed(register, byte) }
    }

    mutating func update(repeating byte: UInt8, count: UInt64) {
        register = Step(byte: byte).repeated(count).apply(register)
    }

    /// One byte through the reflected polynomial 0xEDB88320, eight shifts.
    static func feed(_ register: UInt32, _ byte: UInt8) -> UInt32 {
        var value = register ^ UInt32(byte)
        for _ in 0..<8 { value = value & 1 != 0 ? (value >> 1) ^ 0xEDB8_8320 : value >> 1 }
        return value
    }
}

/// The largest resident set this process has had, in bytes (`ru_maxrss` is in KiB on Linux).
func peakResidentBytes() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return usage.ru_maxrss * 1024
}
