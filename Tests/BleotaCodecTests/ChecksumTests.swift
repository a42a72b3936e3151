import Testing
@testable import BleotaCodec

@Test func crc32Check() { #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF43926) }
