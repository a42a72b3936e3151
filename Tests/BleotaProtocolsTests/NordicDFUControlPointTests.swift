import BleotaCodec
import BleotaTestSupport
import Testing

@testable import BleotaProtocols

/// Secure DFU control point messages against the byte layouts of the SDK's
/// request handler (little-endian values after an operation byte; answers
/// 0x60, operation, result, values).
@Suite struct NordicDFUControlPointTests {
    @Test(
        arguments: [
            (NordicDFURequest.create(.data, size: 4096), "0102" + "00100000"),
            (.create(.command, size: 141), "0101" + "8d000000"),
            (.setReceiptNotification(packets: 12), "020c00"),
            (.calculateChecksum, "03"),
            (.execute, "04"),
            (.select(.command), "0601"),
            (.getSerialMTU, "07"),
            (.write([0xDE, 0xAD]), "08dead"),
            (.ping(id: 7), "0907"),
            (.abort, "0c"),
            (.protocolVersion, "00"),
        ] as [(NordicDFURequest, String)])
    func requestsEncodeAsTheBootloaderReadsThem(request: NordicDFURequest, hex: String) throws {
        #expect(request.encode().hexString == hex)
        #expect(try NordicDFURequest(decoding: request.encode()) == request)
    }

    @Test func answersDecodeWithTheirValues() throws {
        // Select of the data object: max 4096, offset 0x1234, CRC 0xCAFEBABE.
        let select = try NordicDFUResponse(decoding: try #require([UInt8](hex: "600601" + "00100000" + "34120000" + "bebafeca")))
        #expect(select.payload == .selected(maximumSize: 4096, offset: 0x1234, crc: 0xCAFE_BABE))
        #expect(select.failureDescription == nil)
        // A receipt notification is a checksum answer.
        let receipt = try NordicDFUResponse(decoding: try #require([UInt8](hex: "600301" + "00020000" + "78563412")))
        #expect(receipt.payload == .checksum(offset: 512, crc: 0x1234_5678))
        #expect(receipt.encode().hexString == "600301" + "00020000" + "78563412")
        // Extended error: the firmware version is too low.
        let refused = try NordicDFUResponse(decoding: try #require([UInt8](hex: "60040b05")))
        #expect(refused.result == .extendedError && refused.extendedError == .firmwareVersionFailure)
        #expect(
            refused.failureDescription
                == "execute refused: the firmware version is lower than the one installed: raise --application-version when generating, or use a debug package")
        #expect(refused.encode().hexString == "60040b05")
        // A plain failure carries nothing more.
        let notPermitted = try NordicDFUResponse(decoding: try #require([UInt8](hex: "600108")))
        #expect(notPermitted.failureDescription == "create refused: operation not permitted in the bootloader's state")
    }

    @Test(
        arguments: [
            ("", "DFU response code at offset 0: input ends 1 byte too early"),
            ("61", "DFU response code at offset 0: 0x61, expected 0x60"),
            ("6006", "DFU result at offset 2: input ends 1 byte too early"),
            ("6005", "DFU response operation at offset 1: 0x5 is not an operation"),
            ("600609", "DFU result at offset 2: 0x9 is not a result code"),
            ("60060100100000", "DFU select offset at offset 7: input ends 4 bytes too early"),
            ("60040b0e", "DFU extended error at offset 3: 0xe is not an extended error"),
            ("60040100", "DFU execute response at offset 3: 1 unexpected trailing byte"),
        ] as [(String, String)])
    func malformedAnswersNameTheField(hex: String, message: String) throws {
        let bytes = try #require([UInt8](hex: hex))
        #expect { try NordicDFUResponse(decoding: bytes) } throws: { "\($0)" == message }
    }

    @Test func malformedRequestsAreErrorsAndNothingTraps() throws {
        #expect(throws: DecodingError(field: "DFU object type", offset: 1, reason: .invalidValue("3 is neither 1 (command) nor 2 (data)"))) {
            try NordicDFURequest(decoding: [0x01, 0x03, 0, 0, 0, 0])
        }
        #expect(throws: DecodingError(field: "DFU operation", offset: 0, reason: .invalidValue("0x60 is not a request"))) {
            try NordicDFURequest(decoding: [0x60, 0x01, 0x01])
        }
        var generator = seededGenerator("nordic-control-point")
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...16, using: &generator)
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if let request = try? NordicDFURequest(decoding: bytes) { #expect(request.encode() == bytes) }
            if let response = try? NordicDFUResponse(decoding: bytes) { #expect(response.encode() == bytes) }
        }
    }
}
