import Testing

@testable import BleotaCodec
@testable import BleotaZlib

let check = Array("123456789".utf8)

@Suite struct ChecksumTests {
    @Test func crc32CheckValue() {
        #expect(CRC32.checksum(check) == 0xCBF4_3926)
        #expect(CRC32.checksum([UInt8]()) == 0)
    }

    @Test(arguments: CRC16.Variant.all)
    func crc16CheckValues(variant: CRC16.Variant) {
        #expect(CRC16.checksum(check, variant: variant) == variant.check)
    }

    @Test func crc16KnownValues() {
        #expect(CRC16.Variant.ccittFalse.check == 0x29B1)
        #expect(CRC16.Variant.xmodem.check == 0x31C3)
        #expect(CRC16.Variant.modbus.check == 0x4B37)
        #expect(CRC16.Variant.arc.check == 0xBB3D)
    }

    @Test func streamedInputSplitAnywhereGivesTheSameValue() {
        var generator = SplitMix(seed: 42)
        let data = (0..<1000).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
        let whole32 = CRC32.checksum(data)
        let wholeSHA = SHA256Digest.hash(data)
        var splits = Array(0...16) + [499, 500, 999, 1000]
        for _ in 0..<20 { splits.append(Int(generator.next() % 1001)) }
        for split in splits {
            var crc = CRC32()
            crc.update(data[..<split])
            crc.update(data[split...])
            #expect(crc.value == whole32)
            var sha = SHA256Digest()
            sha.update(data[..<split])
            sha.update(data[split...])
            #expect(sha.finalize() == wholeSHA)
            for variant in CRC16.Variant.all {
                var crc16 = CRC16(variant)
                crc16.update(data[..<split])
                crc16.update(data[split...])
                #expect(crc16.value == CRC16.checksum(data, variant: variant))
            }
        }
        // Three-way splits too.
        for _ in 0..<20 {
            let a = Int(generator.next() % 1001), b = Int(generator.next() % 1001)
            let (low, high) = (min(a, b), max(a, b))
            var crc = CRC32()
            crc.update(data[..<low])
            crc.update(data[low..<high])
            crc.update(data[high...])
            #expect(crc.value == whole32)
        }
    }

    @Test func sha256KnownVectors() {
        #expect(SHA256Digest.hash(Array("abc".utf8)).hexString == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256Digest.hash([UInt8]()).hexString == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }
}

@Suite struct DeflateTests {
    @Test func roundTripInChunksBothFormats() throws {
        var generator = SplitMix(seed: 7)
        let data = (0..<50_000).map { index in index % 3 == 0 ? UInt8(truncatingIfNeeded: generator.next()) : 0xFF }
        for format in [DeflateFormat.raw, .zlib] {
            let deflater = try Deflater(level: 6, format: format)
            var compressed: [UInt8] = []
            for start in stride(from: 0, to: data.count, by: 7000) {
                compressed += try deflater.update(data[start..<min(start + 7000, data.count)])
            }
            compressed += try deflater.finish()
            #expect(compressed.count < data.count)
            let inflater = try Inflater(format: format)
            var output: [UInt8] = []
            for start in stride(from: 0, to: compressed.count, by: 333) {
                output += try inflater.update(compressed[start..<min(start + 333, compressed.count)])
            }
            #expect(inflater.isFinished)
            #expect(output == data)
        }
    }

    @Test func corruptStreamThrowsInsteadOfTrapping() throws {
        let inflater = try Inflater(format: .zlib)
        #expect(throws: ZlibError.self) { try inflater.update([0x78, 0x9C, 0xFF, 0xFF, 0xFF, 0xFF]) }
    }

    @Test func outputLimitStopsABomb() throws {
        let deflater = try Deflater(format: .raw)
        let bomb = try deflater.update([UInt8](repeating: 0, count: 1 << 20)) + deflater.finish()
        let inflater = try Inflater(format: .raw)
        let error = #expect(throws: ZlibError.self) { try inflater.update(bomb, limit: 1000) }
        #expect(error?.message == "decompressed data exceeds the 1000-byte limit")
    }

    @Test func flushMakesEverythingSoFarDecodable() throws {
        let deflater = try Deflater(format: .raw)
        let first = try deflater.update(Array("hello ".utf8)) + deflater.flush()
        let inflater = try Inflater(format: .raw)
        #expect(try inflater.update(first) == Array("hello ".utf8))
    }
}

/// A tiny seeded generator for test data.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
