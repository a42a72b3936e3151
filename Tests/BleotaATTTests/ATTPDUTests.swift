import BleotaCodec
import Testing

@testable import BleotaATT

let uuid128 = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!

/// Each PDU with its bytes laid out field by field (Core v5.4, Vol 3, Part F, §3.4).
let attVectors: [(name: String, pdu: ATTPDU, hex: String)] = [
    ("error", .errorResponse(request: .readRequest, handle: 0x0003, error: .readNotPermitted), "01 0a 0300 02"),
    ("mtuRequest", .exchangeMTURequest(clientMTU: 247), "02 f700"),
    ("mtuResponse", .exchangeMTUResponse(serverMTU: 517), "03 0502"),
    ("findInformationRequest", .findInformationRequest(start: 1, end: 0xFFFF), "04 0100 ffff"),
    (
        "findInformationResponse16", .findInformationResponse([.init(handle: 1, uuid: .primaryService), .init(handle: 2, uuid: .characteristic)]),
        "05 01 0100 0028 0200 0328"
    ),
    (
        "findInformationResponse128", .findInformationResponse([.init(handle: 0x10, uuid: uuid128)]),
        "05 02 1000 9ecadc240ee5a9e093f3a3b50100406e"
    ),
    ("findByTypeValueRequest", .findByTypeValueRequest(start: 1, end: 0xFFFF, type: 0x2800, value: [0x0A, 0x18]), "06 0100 ffff 0028 0a18"),
    ("findByTypeValueResponse", .findByTypeValueResponse([.init(found: 0x10, groupEnd: 0x1F)]), "07 1000 1f00"),
    ("readByTypeRequest", .readByTypeRequest(start: 1, end: 0xFFFF, type: .characteristic), "08 0100 ffff 0328"),
    (
        "readByTypeResponse",
        .readByTypeResponse([
            .init(handle: 2, value: [0x02, 0x03, 0x00, 0x00, 0x2A]),
            .init(handle: 4, value: [0x0A, 0x05, 0x00, 0x01, 0x2A]),
        ]),
        "09 07 0200 020300002a 0400 0a0500012a"
    ),
    ("readRequest", .readRequest(handle: 3), "0a 0300"),
    ("readResponse", .readResponse(value: Array("bleota".utf8)), "0b 626c656f7461"),
    ("readBlobRequest", .readBlobRequest(handle: 3, offset: 22), "0c 0300 1600"),
    ("readBlobResponse", .readBlobResponse(part: [1, 2]), "0d 0102"),
    ("readMultipleRequest", .readMultipleRequest(handles: [3, 5]), "0e 0300 0500"),
    ("readMultipleResponse", .readMultipleResponse(values: [1, 2, 3]), "0f 010203"),
    ("readByGroupTypeRequest", .readByGroupTypeRequest(start: 1, end: 0xFFFF, type: .primaryService), "10 0100 ffff 0028"),
    (
        "readByGroupTypeResponse",
        .readByGroupTypeResponse([
            .init(handle: 1, groupEnd: 5, value: [0x00, 0x18]),
            .init(handle: 6, groupEnd: 9, value: [0x01, 0x18]),
        ]),
        "11 06 0100 0500 0018 0600 0900 0118"
    ),
    ("readMultipleVariableRequest", .readMultipleVariableRequest(handles: [3, 5]), "20 0300 0500"),
    ("readMultipleVariableResponse", .readMultipleVariableResponse(values: [[0xAA], [0xBB, 0xCC]]), "21 0100 aa 0200 bbcc"),
    ("writeRequest", .writeRequest(handle: 0x0C, value: [0x01, 0x00]), "12 0c00 0100"),
    ("writeResponse", .writeResponse, "13"),
    ("writeCommand", .writeCommand(handle: 0x0E, value: [9, 8, 7]), "52 0e00 090807"),
    (
        "signedWriteCommand", .signedWriteCommand(handle: 0x0E, value: [1], signature: Array(0..<12)),
        "d2 0e00 01 000102030405060708090a0b"
    ),
    ("prepareWriteRequest", .prepareWriteRequest(handle: 5, offset: 18, part: [1, 2, 3]), "16 0500 1200 010203"),
    ("prepareWriteResponse", .prepareWriteResponse(handle: 5, offset: 18, part: [1, 2, 3]), "17 0500 1200 010203"),
    ("executeWriteRequest", .executeWriteRequest(commit: true), "18 01"),
    ("executeWriteResponse", .executeWriteResponse, "19"),
    ("notification", .handleValueNotification(handle: 0x10, value: [0x42]), "1b 1000 42"),
    ("indication", .handleValueIndication(handle: 0x10, value: [0x43]), "1d 1000 43"),
    ("confirmation", .handleValueConfirmation, "1e"),
    (
        "multipleNotification", .multipleHandleValueNotification([.init(handle: 0x10, value: [1]), .init(handle: 0x12, value: [2, 3])]),
        "23 1000 0100 01 1200 0200 0203"
    ),
]

@Suite struct ATTPDUTests {
    @Test(arguments: attVectors.map(\.name))
    func roundTripsThroughTheSpecifiedBytes(name: String) throws {
        let vector = attVectors.first { $0.name == name }!
        let bytes = try #require([UInt8](hex: vector.hex))
        #expect(vector.pdu.encode() == bytes)
        #expect(try ATTPDU(decoding: bytes) == vector.pdu)
    }

    @Test func everyTruncationThatLosesAFieldThrows() throws {
        // PDUs whose tail is a variable value legitimately decode when cut in
        // the value; every cut inside a fixed field must throw, never trap.
        for vector in attVectors {
            let bytes = try #require([UInt8](hex: vector.hex))
            var refused = 0
            for length in 0..<bytes.count {
                let prefix = Array(bytes.prefix(length))
                do {
                    // A cut that decodes must be a shorter value of the same PDU, read back exactly.
                    let pdu = try ATTPDU(decoding: prefix)
                    // (A Read Multiple Variable Response's last value may itself be cut by the MTU,
                    // §3.4.4.12, so its declared length is not kept.)
                    if pdu.opcode != .readMultipleVariableResponse {
                        #expect(pdu.encode() == prefix, "\(vector.name) cut at \(length) decoded as something else")
                    }
                    #expect(pdu.opcode == vector.pdu.opcode, "\(vector.name) cut at \(length)")
                } catch {
                    refused += 1
                }
            }
            // At least the empty prefix and every cut inside the opcode's fixed fields throw.
            #expect(refused >= 1, "\(vector.name): no truncation was refused")
        }
        #expect(throws: DecodingError.self) { try ATTPDU(decoding: [UInt8]()) }
        #expect(throws: DecodingError.self) { try ATTPDU(decoding: [0x01, 0x0A, 0x03]) }
        #expect(throws: DecodingError.self) { try ATTPDU(decoding: [0x02, 0xF7]) }
        #expect(throws: DecodingError.self) { try ATTPDU(decoding: [0x0C, 0x03, 0x00, 0x16]) }
    }

    @Test(
        arguments: [
            ("99", "ATT opcode", "unknown opcode 0x99"),
            ("02 1600", "mtu", "22 is below the minimum ATT MTU of 23"),
            ("04 0000 ffff", "startHandle", "handle range 0x0–0xffff is invalid"),
            ("04 0500 0100", "startHandle", "handle range 0x5–0x1 is invalid"),
            ("05 03 0100 0028", "findInformation.format", "format 3 is not 1 or 2"),
            ("08 0100 ffff 002800", "type", "a UUID is 2 or 16 bytes, not 3"),
            ("09 01 0200", "readByType.length", "each entry needs at least a 2-byte handle, length is 1"),
            ("11 03 0100 05", "readByGroupType.length", "each entry needs two handles, length is 3"),
            ("0e 0300", "readMultiple.handles", "needs two or more 2-byte handles, got 2 bytes"),
            ("18 02", "executeWrite.flags", "flags 2 are not 0 (cancel) or 1 (write)"),
        ] as [(String, String, String)])
    func malformedFieldsAreNamed(hex: String, field: String, why: String) throws {
        let bytes = try #require([UInt8](hex: hex))
        let error = #expect(throws: DecodingError.self) { try ATTPDU(decoding: bytes) }
        #expect(error?.field == field)
        #expect(error?.reason == .invalidValue(why))
    }

    @Test func truncatedListsAndSignaturesThrow() throws {
        for hex in ["05 01 0100 00", "07 1000 1f", "09 07 0200 0203", "11 06 0100 0500 00", "23 1000 0200 01", "d2 0e00 0102", "21 05"] {
            let bytes = try #require([UInt8](hex: hex))
            #expect(throws: DecodingError.self, "\(hex)") { try ATTPDU(decoding: bytes) }
        }
    }

    @Test func seededFuzzNeverTraps() throws {
        var state: UInt64 = 7
        var decoded = 0
        for _ in 0..<50_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let length = Int(state >> 59)
            var bytes: [UInt8] = []
            for index in 0..<length { bytes.append(UInt8(truncatingIfNeeded: state >> (UInt64(index % 8) * 8) ^ UInt64(index * 31))) }
            if let first = bytes.first, state & 1 == 0 { bytes[0] = [0x01, 0x05, 0x09, 0x11, 0x21, 0x23, 0xD2, 0x18, first][Int(state >> 20) % 9] }
            if let pdu = try? ATTPDU(decoding: bytes) {
                decoded += 1
                #expect(try ATTPDU(decoding: pdu.encode()) == pdu)
            }
        }
        #expect(decoded > 0)
    }

    @Test func opcodeKindsFollowTheSpec() {
        #expect(ATTOpcode.writeCommand.isCommand)
        #expect(ATTOpcode.signedWriteCommand.kind == .command)
        #expect(ATTOpcode.readRequest.kind == .request)
        #expect(ATTOpcode.readRequest.response == .readResponse)
        #expect(ATTOpcode.handleValueIndication.kind == .indication)
        #expect(ATTOpcode.multipleHandleValueNotification.kind == .notification)
        #expect(ATTOpcode(rawValue: 0x7F).kind == .command)
        #expect(ATTOpcode(rawValue: 0x3F).kind == .unknown)
    }

    @Test func uuidForms() {
        #expect(BluetoothUUID("180A") == .bit16(0x180A))
        #expect(BluetoothUUID("0000180A-0000-1000-8000-00805F9B34FB") == .bit16(0x180A))
        #expect(uuid128.description == "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
        #expect(BluetoothUUID.bit16(0x2A00).description == "2A00")
        #expect(BluetoothUUID("xyz") == nil)
        #expect(BluetoothUUID.bit16(0x180A).bytes128.hexString == "0000180a00001000800000805f9b34fb")
    }
}
