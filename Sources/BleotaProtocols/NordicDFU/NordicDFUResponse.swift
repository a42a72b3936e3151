import BleotaCodec

/// An answer notified on the Secure DFU control point: 0x60, the request's
/// operation, a ``NordicDFUResult``, then the operation's values (on success)
/// or an ``NordicDFUExtendedError`` (on result 0x0B). A receipt notification
/// is a checksum answer the bootloader sends unasked.
package struct NordicDFUResponse: Sendable, Hashable {
    /// What a successful answer carries, by operation.
    package enum Payload: Sendable, Hashable {
        case none
        case protocolVersion(UInt8)
        /// Select: the largest object of that type, and the current one's offset and CRC-32.
        case selected(maximumSize: UInt32, offset: UInt32, crc: UInt32)
        /// Calculate checksum, and receipt notifications: bytes received so far and their CRC-32.
        case checksum(offset: UInt32, crc: UInt32)
        case serialMTU(UInt16)
        case ping(id: UInt8)
        /// Hardware and firmware version answers, as received (bleota does not use them).
        case raw([UInt8])
    }

    package var operation: NordicDFUOperation
    package var result: NordicDFUResult
    /// Set when `result` is ``NordicDFUResult/extendedError``.
    package var extendedError: NordicDFUExtendedError?
    package var payload: Payload

    package init(
        operation: NordicDFUOperation, result: NordicDFUResult = .success,
        extendedError: NordicDFUExtendedError? = nil, payload: Payload = .none
    ) {
        self.operation = operation
        self.result = result
        self.extendedError = extendedError
        self.payload = payload
    }

    /// A failure, as a line for the user: what the bootloader said and what to do.
    package var failureDescription: String? {
        guard result != .success else { return nil }
        if result == .extendedError, let extendedError { return "\(operation) refused: \(extendedError)" }
        return "\(operation) refused: \(result)"
    }

    package func encode() -> [UInt8] {
        var writer = ByteWriter()
        writer.write(NordicDFUOperation.response.rawValue)
        writer.write(operation.rawValue)
        writer.write(result.rawValue)
        if result == .extendedError {
            writer.write((extendedError ?? .noError).rawValue)
            return writer.bytes
        }
        switch payload {
        case .none: break
        case .protocolVersion(let version): writer.write(version)
        case .selected(let maximumSize, let offset, let crc):
            writer.write(maximumSize, .little)
            writer.write(offset, .little)
            writer.write(crc, .little)
        case .checksum(let offset, let crc):
            writer.write(offset, .little)
            writer.write(crc, .little)
        case .serialMTU(let mtu): writer.write(mtu, .little)
        case .ping(let id): writer.write(id)
        case .raw(let bytes): writer.write(contentsOf: bytes)
        }
        return writer.bytes
    }

    /// Decodes a notification from the bootloader (untrusted): the values a
    /// successful answer must carry are required in full, nothing may follow
    /// them, and unknown operations or results are errors naming the byte.
    package init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        let marker = try reader.readUInt8("DFU response code")
        guard marker == NordicDFUOperation.response.rawValue else {
            throw DecodingError(field: "DFU response code", offset: 0, reason: .invalidValue("0x\(String(marker, radix: 16)), expected 0x60"))
        }
        let rawOperation = try reader.readUInt8("DFU response operation")
        guard let operation = NordicDFUOperation(rawValue: rawOperation), operation != .response else {
            throw DecodingError(field: "DFU response operation", offset: 1, reason: .invalidValue("0x\(String(rawOperation, radix: 16)) is not an operation"))
        }
        let rawResult = try reader.readUInt8("DFU result")
        guard let result = NordicDFUResult(rawValue: rawResult) else {
            throw DecodingError(field: "DFU result", offset: 2, reason: .invalidValue("0x\(String(rawResult, radix: 16)) is not a result code"))
        }
        self.init(operation: operation, result: result)
        if result == .extendedError {
            let raw = try reader.readUInt8("DFU extended error")
            guard let error = NordicDFUExtendedError(rawValue: raw) else {
                throw DecodingError(field: "DFU extended error", offset: 3, reason: .invalidValue("0x\(String(raw, radix: 16)) is not an extended error"))
            }
            extendedError = error
        } else if result == .success {
            switch operation {
            case .protocolVersion: payload = .protocolVersion(try reader.readUInt8("DFU protocol version"))
            case .select:
                payload = .selected(
                    maximumSize: try reader.readUInt32(.little, "DFU select maximum size"),
                    offset: try reader.readUInt32(.little, "DFU select offset"),
                    crc: try reader.readUInt32(.little, "DFU select CRC"))
            case .calculateChecksum:
                payload = .checksum(
                    offset: try reader.readUInt32(.little, "DFU checksum offset"),
                    crc: try reader.readUInt32(.little, "DFU checksum CRC"))
            case .getSerialMTU: payload = .serialMTU(try reader.readUInt16(.little, "DFU serial MTU"))
            case .ping: payload = .ping(id: try reader.readUInt8("DFU ping id"))
            case .hardwareVersion, .firmwareVersion: payload = .raw(reader.readRemaining())
            default: break
            }
        }
        try reader.expectEnd("DFU \(operation) response")
    }
}
