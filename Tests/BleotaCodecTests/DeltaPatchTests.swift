import BleotaCodec
import BleotaLink
import BleotaTestSupport
import Testing

/// detools' sequential patch format, heatshrink and the suffix array under it. Interoperability with
/// detools itself (both ways) is `scripts/delta-interop`; these check bytes and rules.
@Suite struct DeltaPatchTests {
    static func randomBytes(_ count: Int, _ generator: inout SeededRandom, alphabet: Int = 256) -> [UInt8] {
        (0..<count).map { _ in UInt8(Int(generator.next() % UInt64(alphabet))) }
    }

    /// A "new release": the old image with a few bytes changed, a stretch inserted and one removed.
    static func edited(_ old: [UInt8], _ generator: inout SeededRandom) -> [UInt8] {
        var new = old
        for _ in 0..<8 where !new.isEmpty { new[Int(generator.next() % UInt64(new.count))] = UInt8(truncatingIfNeeded: generator.next()) }
        let insertAt = Int(generator.next() % UInt64(new.count + 1))
        new.insert(contentsOf: randomBytes(Int(generator.next() % 200), &generator), at: insertAt)
        if new.count > 300 {
            let removeAt = Int(generator.next() % UInt64(new.count - 100))
            new.removeSubrange(removeAt..<(removeAt + 100))
        }
        return new
    }

    @Test func sizesAreDetoolsVariableLengthIntegers() throws {
        #expect(DeltaSize.encode(0) == [0x00])
        #expect(DeltaSize.encode(1) == [0x01])
        #expect(DeltaSize.encode(63) == [0x3F])
        #expect(DeltaSize.encode(64) == [0x80, 0x01])
        #expect(DeltaSize.encode(-1) == [0x41])
        #expect(DeltaSize.encode(-64) == [0xC0, 0x01])
        // 1 000 000 = 15625 × 64: low six bits 0, then 15625 & 0x7F = 0x09, then 122.
        #expect(DeltaSize.encode(1_000_000) == [0x80, 0x89, 0x7A])
        var generator = seededGenerator("sizes")
        for _ in 0..<2000 {
            let value = Int(Int64(bitPattern: generator.next()) >> Int64(2 + generator.next() % 61))
            var reader = DeltaSize.Reader()
            var decoded: Int?
            for byte in DeltaSize.encode(value) { decoded = try reader.take(byte, field: "test", offset: 0) }
            #expect(decoded == value)
        }
    }

    @Test func heatshrinkDecodesLiteralsAndBackReferencesBitByBit() {
        // 1 'A' (literal), then 0 + distance−1 = 0 (8 bits) + length−1 = 2 (7 bits): "AAAA", padded.
        // Bits: 1 01000001 0 00000000 0000010 + 7 zero bits = 1010 0000 | 1000 0000 | 0000 0001 | 0000 0000.
        let bytes: [UInt8] = [0xA0, 0x80, 0x01, 0x00]
        #expect(Heatshrink.decode(bytes) == Array("AAAA".utf8))
        // A reference before the first byte reads the window's zeros, as heatshrink's decoder does.
        // 0 00000000 0000001 0: distance 1, length 2.
        #expect(Heatshrink.decode([0x00, 0x01]) == [0, 0])
    }

    @Test func heatshrinkRoundTripsAndCompressesRepetition() {
        var generator = seededGenerator("heatshrink")
        for parameters in [Heatshrink.Parameters.detoolsDefault, .init(windowBits: 4, lookaheadBits: 3), .init(windowBits: 11, lookaheadBits: 4)] {
            for count in [0, 1, 2, 3, 255, 4096, 40_000] {
                let random = Self.randomBytes(count, &generator)
                let repetitive = Self.randomBytes(count, &generator, alphabet: 3)
                for input in [random, repetitive] {
                    let encoded = Heatshrink.encode(input, parameters: parameters)
                    #expect(Heatshrink.decode(encoded, parameters: parameters) == input, "\(parameters), \(count) bytes")
                }
            }
        }
        let zeros = [UInt8](repeating: 0, count: 10_000)
        #expect(Heatshrink.encode(zeros).count < 300)
    }

    @Test func theSuffixArraySortsEverySuffix() {
        var generator = seededGenerator("suffix array")
        for count in [0, 1, 2, 7, 100, 1000] {
            for alphabet in [1, 2, 4, 256] {
                let text = Self.randomBytes(count, &generator, alphabet: alphabet)
                let naive = (0..<count).sorted { text[$0...].lexicographicallyPrecedes(text[$1...]) }.map(Int32.init)
                #expect(SuffixArray.build(text) == naive, "\(count) bytes over \(alphabet) symbols")
            }
        }
    }

    @Test func aPatchRebuildsTheNewImageExactlyWithEitherCompression() throws {
        var generator = seededGenerator("patch round trip")
        for count in [0, 1, 100, 5000, 60_000] {
            let old = Self.randomBytes(count, &generator, alphabet: count > 1000 ? 16 : 256)
            let new = count == 0 ? Self.randomBytes(50, &generator) : Self.edited(old, &generator)
            for compression in DeltaPatchHeader.Compression.allCases {
                let patch = DeltaPatch.create(from: old, to: new, compression: compression)
                #expect(try DeltaPatch.apply(patch, to: old) == new, "\(count) bytes, \(compression)")
                let header = try DeltaPatchHeader(reading: patch)
                #expect(header.compression == compression && header.newSize == new.count && header.espBaseSHA256 == nil)
            }
        }
        // Identical images and an empty new image.
        let same = Self.randomBytes(3000, &generator)
        let identical = DeltaPatch.create(from: same, to: same)
        #expect(try DeltaPatch.apply(identical, to: same) == same)
        #expect(identical.count < 100, "\(identical.count) bytes for no change")
        #expect(DeltaPatch.create(from: same, to: []) == [0x04, 0x00])
        #expect(try DeltaPatch.apply([0x04, 0x00], to: same) == [])
    }

    @Test func aSmallChangeMakesASmallPatch() throws {
        var generator = seededGenerator("small change")
        let old = Self.randomBytes(200_000, &generator, alphabet: 64)
        var new = old
        new[1000] &+= 1
        new[150_000] &+= 7
        let patch = DeltaPatch.create(from: old, to: new)
        // Unchanged stretches are diff bytes of zero, which heatshrink's 128-byte references carry at two
        // bytes each: about 1.6 % of the image is the floor with detools' default window and lookahead.
        #expect(patch.count < 4_000, "\(patch.count) bytes for two changed bytes of 200 kB")
        #expect(try DeltaPatch.apply(patch, to: old) == new)
    }

    @Test func espressifsHeaderNamesTheBase() throws {
        var generator = seededGenerator("esp header")
        let old = Self.randomBytes(4000, &generator)
        let new = Self.edited(old, &generator)
        let hash = SHA256Digest.hash(old)
        let patch = DeltaPatch.create(from: old, to: new, espBaseSHA256: hash)
        #expect(Array(patch[0..<4]) == [0x10, 0xDE, 0xCD, 0xFC])
        #expect(Array(patch[4..<36]) == hash && patch[36..<64].allSatisfy { $0 == 0 })
        let header = try DeltaPatchHeader(reading: patch)
        #expect(header.espBaseSHA256 == hash && header.size > 64)
        #expect(try DeltaPatch.apply(patch, to: old) == new)
    }

    @Test func damagedPatchesAreRefusedWithFieldAndOffsetNeverTrapping() throws {
        var generator = seededGenerator("damaged patches")
        let old = Self.randomBytes(3000, &generator)
        let new = Self.edited(old, &generator)
        for compression in DeltaPatchHeader.Compression.allCases {
            let patch = DeltaPatch.create(from: old, to: new, compression: compression)
            // Every truncation is an error, never a short image.
            for length in 0..<patch.count {
                #expect(throws: DeltaPatchError.self, "\(compression), \(length) of \(patch.count) bytes") {
                    _ = try DeltaPatch.apply(Array(patch[0..<length]), to: old)
                }
            }
            // Bytes after the end.
            #expect(throws: DeltaPatchError.self) { _ = try DeltaPatch.apply(patch + [0x55, 0x55], to: old) }
            // Every single-bit flip either fails or yields some image: no trap, no read outside the base.
            for index in 0..<min(patch.count, 400) {
                var flipped = patch
                flipped[index] ^= UInt8(1 << (generator.next() % 8))
                _ = try? DeltaPatch.apply(flipped, to: old)
            }
        }
        // A base shorter than the one the patch was made for is named as the wrong base.
        let patch = DeltaPatch.create(from: old, to: new)
        do {
            _ = try DeltaPatch.apply(patch, to: Array(old.prefix(100)))
            Issue.record("a patch applied to a base too short for it")
        } catch {
            #expect(error.description.contains("the base is not the one the patch was made for"), "\(error)")
        }
        // A header claiming a huge image is not trusted with memory (FuzzDeltaPatch found a 144 GB allocation).
        #expect(throws: DeltaPatchError.self) { _ = try DeltaPatch.apply([0x00] + DeltaSize.encode(1 << 40) + [0x00], to: old) }
        // Formats bleota does not apply are named.
        #expect(throws: DeltaPatchError(.unsupported("lzma compression"), field: "type byte", offset: 0)) { _ = try DeltaPatchHeader(reading: [0x01, 0x05]) }
        #expect(throws: DeltaPatchError(.unsupported("an in-place patch"), field: "type byte", offset: 0)) { _ = try DeltaPatchHeader(reading: [0x14]) }
        #expect(throws: DeltaPatchError(.truncated, field: "esp_delta_ota header", offset: 10)) {
            _ = try DeltaPatchHeader(reading: [0x10, 0xDE, 0xCD, 0xFC, 0, 0, 0, 0, 0, 0])
        }
    }

    /// The applier takes a patch a byte at a time, as a device receives it, with the same result.
    @Test func theApplierStreams() throws {
        var generator = seededGenerator("streaming")
        let old = Self.randomBytes(20_000, &generator, alphabet: 32)
        let new = Self.edited(old, &generator)
        let patch = DeltaPatch.create(from: old, to: new)
        let header = try DeltaPatchHeader(reading: patch)
        var applier = DeltaPatchApplier(header: header, baseSize: old.count)
        var output: [UInt8] = []
        var index = header.size
        while index < patch.count {
            let step = min(patch.count - index, Int(generator.next() % 20) + 1)
            try applier.consume(patch[index..<index + step], base: { old[$0] }, into: &output)
            index += step
        }
        try applier.finish()
        #expect(output == new)
    }

    /// An error's offset is a byte of the patch file, never past its end; a compressed patch's
    /// body also says where in its decompressed data (a 1 000-byte patch's errors said "at byte
    /// 55988", an offset in the decompressed stream).
    @Test func errorOffsetsAreBytesOfThePatchFile() throws {
        var generator = seededGenerator("error offsets")
        let old = Self.randomBytes(60_000, &generator)
        var new = old
        for index in stride(from: 1000, to: old.count, by: 7919) { new[index] ^= 0x55 }
        for compression in DeltaPatchHeader.Compression.allCases {
            let patch = DeltaPatch.create(from: old, to: new, compression: compression)
            for length in [patch.count / 2, patch.count - 1] {
                let error = #expect(throws: DeltaPatchError.self, "\(compression), \(length) of \(patch.count) bytes") {
                    _ = try DeltaPatch.apply(Array(patch[0..<length]), to: old)
                }
                #expect(error?.offset == length, "\(compression): \(error.map(String.init(describing:)) ?? "")")
                if compression == .heatshrink {
                    let data = try #require(error?.dataOffset)
                    #expect(data > length)
                    #expect(error?.description.contains("at byte \(length) (byte \(data) of its decompressed data)") == true, "\(error!)")
                } else {
                    #expect(error?.dataOffset == nil)
                    #expect(error?.description.contains("at byte \(length):") == true, "\(error!)")
                }
            }
            // A base too short: named at the byte of the patch that reads past it.
            let error = #expect(throws: DeltaPatchError.self) { _ = try DeltaPatch.apply(patch, to: Array(old.prefix(100))) }
            #expect((error?.offset ?? .max) < patch.count, "\(compression): \(error.map(String.init(describing:)) ?? "")")
        }
    }
}
