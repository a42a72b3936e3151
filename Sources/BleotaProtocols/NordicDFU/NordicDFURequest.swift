import BleotaCodec

/// A request written to the Secure DFU control point (8EC90001-…): an
/// operation byte and its little-endian parameters. The host half encodes
/// them; the simulated bootloader decodes them from untrusted bytes.
package enum NordicDFURequest: Sendable, Hashable {
    case protocolVersion
    /// Creates (and so erases) an object of `size` bytes.
    case create(NordicDFUObjectType, size: UInt32)
    /// A receipt notification every `packets` packets (0: none).
    case setReceiptNotification(packets: UInt16)
    case calculateChecksum
    case execute
    /// The current object of a type: its maximum size, offset and CRC.
    case select(NordicDFUObjectType)
    case getSerialMTU
    /// Serial transports only: object data.
    case write([UInt8])
    case ping(id: UInt8)
    case hardwareVersion
    case firmwareVersion(image: UInt8)
    case abort

    package var operation: NordicDFUOperation {
        switch self {
        case .protocolVersion: .protocolVersion
        case .create: .create
        case .setReceiptNotification: .setReceiptNotification
        case .calculateChecksum: .calculateChecksum
        case .execute: .execute
        case .select: .select
        case .getSerialMTU: .getSerialMTU
        case .write: .write
        case .ping: .ping
        case .hardwareVersion: .hardwareVersion
        case .firmwareVersion: .firmwareVersion
        case .abort: .abort
        }
    }

    package func encode() -> [UInt8] {
        var writer = ByteWriter()
        writer.write(operation.rawValue)
        switch self {
        case .create(let type, let size):
            writer.write(type.rawValue)
            writer.write(size, .little)
        case .setReceiptNotification(let packets): writer.write(packets, .little)
        case .select(let type): writer.write(type.rawValue)
        case .write(let bytes): writer.write(contentsOf: bytes)
        case .ping(let id): writer.write(id)
        case .firmwareVersion(let image): writer.write(image)
        case .protocolVersion, .calculateChecksum, .execute, .getSerialMTU, .hardwareVersion, .abort: break
        }
        return writer.bytes
    }

    /// Decodes one control point write; parameters must fill it exactly
    /// (a `write` takes the rest, whatever its length).
    package init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        let code = try reader.readUInt8("DFU operation")
        guard let operation = NordicDFUOperation(rawValue: code), operation != .response else {
            throw DecodingError(field: "DFU operation", offset: 0, reason: .invalidValue("0x\(String(code, radix: 16)) is not a request"))
        }
        func objectType() throws(DecodingError) -> NordicDFUObjectType {
            let raw = try reader.readUInt8("DFU object type")
            guard let type = NordicDFUObjectType(rawValue: raw) else {
                throw DecodingError(field: "DFU object type", offset: 1, reason: .invalidValue("\(raw) is neither 1 (command) nor 2 (data)"))
            }
            return type
        }
        switch operation {
        case .protocolVersion: self = .protocolVersion
        case .create:
            let type = try objectType()
            self = .create(type, size: try reader.readUInt32(.little, "DFU object size"))
        case .setReceiptNotification: self = .setReceiptNotification(packets: try reader.readUInt16(.little, "DFU receipt interval"))
        case .calculateChecksum: self = .calculateChecksum
        case .execute: self = .execute
        case .select: self = .select(try objectType())
        case .getSerialMTU: self = .getSerialMTU
        case .write: self = .write(reader.readRemaining())
        case .ping: self = .ping(id: try reader.readUInt8("DFU ping id"))
        case .hardwareVersion: self = .hardwareVersion
        case .firmwareVersion: self = .firmwareVersion(image: try reader.readUInt8("DFU image number"))
        case .abort: self = .abort
        case .response: throw DecodingError(field: "DFU operation", offset: 0, reason: .invalidValue("0x60 is not a request"))
        }
        try reader.expectEnd("DFU \(operation) request")
    }
}
