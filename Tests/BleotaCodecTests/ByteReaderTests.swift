import Testing

@testable import BleotaCodec

@Suite struct ByteReaderTests {
    @Test func readsBothByteOrders() throws {
        var reader = ByteReader([0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09])
        #expect(try reader.readUInt16(.little) == 0x0201)
        #expect(try reader.readUInt16(.big) == 0x0304)
        #expect(try reader.readUInt24(.little) == 0x070605)
        #expect(try reader.readUInt8() == 0x08)
        #expect(reader.remaining == 1)
        var big = ByteReader([0xDE, 0xAD, 0xBE, 0xEF, 1, 2, 3, 4, 5, 6, 7, 8])
        #expect(try big.readUInt32(.big) == 0xDEADBEEF)
        #expect(try big.readUInt64(.little) == 0x0807060504030201)
        #expect(big.isAtEnd)
    }

    @Test func shortInputThrowsNamingFieldAndOffset() throws {
        var reader = ByteReader([0x01])
        #expect(throws: DecodingError(field: "length", offset: 0, reason: .truncated(needed: 1))) { try reader.readUInt16(.little, "length") }
        #expect(throws: DecodingError.self) { try reader.readUInt32() }
        #expect(throws: DecodingError.self) { try reader.readUInt64() }
        #expect(throws: DecodingError.self) { try reader.readUInt24() }
        #expect(throws: DecodingError.self) { try reader.readBytes(2) }
        #expect(throws: DecodingError(field: "n", offset: 0, reason: .invalidValue("negative length -1"))) { try reader.readBytes(-1, "n") }
        #expect(throws: DecodingError.self) { try reader.skip(5) }
        #expect(try reader.readUInt8() == 1)
        #expect(throws: DecodingError(field: "byte", offset: 1, reason: .truncated(needed: 1))) { try reader.readUInt8() }
    }

    @Test func everyPrefixOfAStructureThrowsNeverTraps() {
        let full: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
        for length in 0..<full.count {
            var reader = ByteReader(full.prefix(length))
            #expect(throws: DecodingError.self) {
                _ = try reader.readUInt8()
                _ = try reader.readUInt16()
                _ = try reader.readUInt24()
                _ = try reader.readUInt32()
                _ = try reader.readUInt64()
                _ = try reader.readBytes(-0 + 1)
                _ = try reader.readUInt8()  // 18th byte never exists
            }
        }
    }

    @Test func writerMirrorsReader() throws {
        var writer = ByteWriter()
        writer.write(UInt8(7))
        writer.write(UInt16(0x1234), .big)
        writer.write(UInt32(0xAABBCCDD))
        writer.writeUInt24(0x010203, .big)
        writer.write(contentsOf: [9, 9])
        writer.patch(UInt16(0xBEEF), at: 1, .little)
        #expect(writer.bytes == [7, 0xEF, 0xBE, 0xDD, 0xCC, 0xBB, 0xAA, 1, 2, 3, 9, 9])
    }

    @Test func expectEndReportsTrailingBytes() throws {
        var reader = ByteReader([1, 2, 3])
        _ = try reader.readUInt8()
        #expect(throws: DecodingError(field: "msg", offset: 1, reason: .trailingBytes(2))) { try reader.expectEnd("msg") }
        #expect(DecodingError(field: "msg", offset: 1, reason: .trailingBytes(2)).description == "msg at offset 1: 2 unexpected trailing bytes")
        #expect(DecodingError(field: "x", offset: 4, reason: .truncated(needed: 1)).description == "x at offset 4: input ends 1 byte too early")
    }

    @Test func hexHelpers() {
        #expect([0x0A, 0xFF].hexString == "0aff")
        #expect([UInt8](hex: "0x0a ff:10") == [0x0A, 0xFF, 0x10])
        #expect([UInt8](hex: "abc") == nil)
        #expect([UInt8](hex: "zz") == nil)
    }
}
