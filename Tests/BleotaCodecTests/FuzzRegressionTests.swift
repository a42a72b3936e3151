import Testing
@testable import BleotaCodec

/// Inputs the fuzzers in Fuzz/ found (README "Fuzzing"), each fed to what
/// misbehaved on it, so the fix stays fixed.
@Suite struct CodecFuzzRegressionTests {
    /// A line indented with spaces or tabs had its bad character reported a
    /// column too early for each (FuzzIntelHex, FuzzSRecord): columns counted
    /// from the trimmed text, not the line.
    @Test func aBadCharacterOnAnIndentedLineIsReportedAtItsOwnColumn() throws {
        // The fuzzers' inputs: " :209\u{FF}…" and " S113000000040506 07BBBBB\u{01}…".
        let hex = try #require([UInt8](hex: "203a323039ff30000000003030303139380000390a"))
        #expect(throws: ImageError(file: "image.hex", line: 1, kind: .nonHexCharacter("\u{FF}", column: 6))) { try IntelHex.parse(hex) }
        let srec = try #require([UInt8](hex: "2053313133303030303030303430353036303742424242420100000000000032424242424242424242424242424242424242424242424242424242424242424242424242424242"))
        #expect(throws: ImageError(file: "image.srec", line: 1, record: "S1", kind: .nonHexCharacter("\u{01}", column: 25))) { try SRecord.parse(srec) }
        #expect(throws: ImageError(file: "image.hex", line: 2, kind: .nonHexCharacter("G", column: 12))) {
            try IntelHex.parse(Array(":0100000000FF\n\t :01000100G2BD\n".utf8))
        }
    }
}
