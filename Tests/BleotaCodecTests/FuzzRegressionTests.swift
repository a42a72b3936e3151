import Testing

@testable import BleotaCodec

/// Inputs the fuzzers in Fuzz/ found (docs/testing.md, "Fuzzing"), each fed to what
/// misbehaved on it, so the fix stays fixed.
@Suite struct CodecFuzzRegressionTests {
    /// A line indented with spaces or tabs had its bad character reported a
    /// column too early for each (FuzzIntelHex, FuzzSRecord): columns counted
    /// from the trimmed text, not the line.
    @Test func aBadCharacterOnAnIndentedLineIsReportedAtItsOwnColumn() throws {
        // The fuzzers' inputs: " :209\u{FF}…" and " S113000000040506 07BBBBB\u{01}…".
        let hex = try #require([UInt8](hex: "203a323039ff30000000003030303139380000390a"))
        #expect(throws: ImageError(file: "image.hex", line: 1, kind: .nonHexCharacter(0xFF, column: 6))) { try IntelHex.parse(hex) }
        let srec = try #require(
            [UInt8](hex: "2053313133303030303030303430353036303742424242420100000000000032424242424242424242424242424242424242424242424242424242424242424242424242424242"))
        #expect(throws: ImageError(file: "image.srec", line: 1, record: "S1", kind: .nonHexCharacter(0x01, column: 25))) { try SRecord.parse(srec) }
        #expect(throws: ImageError(file: "image.hex", line: 2, kind: .nonHexCharacter(UInt8(ascii: "G"), column: 12))) {
            try IntelHex.parse(Array(":0100000000FF\n\t :01000100G2BD\n".utf8))
        }
    }

    /// Errors inside an MCUboot image's TLV areas gave offsets counted from
    /// the area (or its entries), not the file, so they pointed into the
    /// header (FuzzMCUboot).
    @Test func tlvAreaErrorsGiveTheFilesOffsets() throws {
        // The fuzzer's input, minimised: a 32-byte header and 128 bytes of firmware claiming a protected TLV area that is not there.
        let cut = try #require(
            [UInt8](
                hex:
                    "3db8f3960000000020000c00800000000000000001020000070000000000000000014e20010100000102000005020000dfe6b796bab235f8a00c000000000000009286791526bdf429119f0d35b4af5c25abef132f151a46cde3a3014f01000000000000202e0432f870fe871606904c6ffd84564a388144cfdc3ddc869954cdaf3615c0dfe6b796bab235f8a00c000000000000009286791526bdf429119f0d"
            ))
        #expect(throws: DecodingError(field: "protected TLV area magic", offset: 160, reason: .truncated(needed: 2))) {
            try MCUbootImage(decoding: cut)
        }
        // The SHA-256 entry of a built image claiming 40 bytes where 32 follow: its value starts at 35 + 4 + 4.
        var image = MCUbootImage.build(firmware: [1, 2, 3], version: .init(major: 1, minor: 0, revision: 0, build: 0), headerSize: 32)
        image[41] = 40
        #expect(throws: DecodingError(field: "TLV value", offset: 43, reason: .truncated(needed: 8))) {
            try MCUbootImage(decoding: image)
        }
    }

    /// 0.0 and -0.0 compared equal but encode, and so hash, differently,
    /// breaking `Hashable`'s contract (FuzzCBOR).
    @Test func equalCBORValuesHashAlike() throws {
        // The fuzzer's input: two half floats, -0.0 then 0.0.
        var reader = ByteReader(try #require([UInt8](hex: "f98000f90000")))
        let negative = try CBOR.decode(from: &reader), positive = try CBOR.decode(from: &reader)
        #expect(negative != positive)
        #expect(Set([negative, positive]).count == 2)
        #expect(CBOR.double(.nan) == CBOR.double(-.nan) && CBOR.double(.nan).hashValue == CBOR.double(-.nan).hashValue)
        #expect(CBOR.double(1.5) == CBOR.double(1.5))
    }
}
