import BleotaCodec

/// An ATT opcode (Core v5.4, Vol 3, Part F, §3.4.8). Unknown values decode as
/// themselves rather than failing, so a bearer can answer them properly.
public struct ATTOpcode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let errorResponse = ATTOpcode(rawValue: 0x01)
    public static let exchangeMTURequest = ATTOpcode(rawValue: 0x02)
    public static let exchangeMTUResponse = ATTOpcode(rawValue: 0x03)
    public static let findInformationRequest = ATTOpcode(rawValue: 0x04)
    public static let findInformationResponse = ATTOpcode(rawValue: 0x05)
    public static let findByTypeValueRequest = ATTOpcode(rawValue: 0x06)
    public static let findByTypeValueResponse = ATTOpcode(rawValue: 0x07)
    public static let readByTypeRequest = ATTOpcode(rawValue: 0x08)
    public static let readByTypeResponse = ATTOpcode(rawValue: 0x09)
    public static let readRequest = ATTOpcode(rawValue: 0x0A)
    public static let readResponse = ATTOpcode(rawValue: 0x0B)
    public static let readBlobRequest = ATTOpcode(rawValue: 0x0C)
    public static let readBlobResponse = ATTOpcode(rawValue: 0x0D)
    public static let readMultipleRequest = ATTOpcode(rawValue: 0x0E)
    public static let readMultipleResponse = ATTOpcode(rawValue: 0x0F)
    public static let readByGroupTypeRequest = ATTOpcode(rawValue: 0x10)
    public static let readByGroupTypeResponse = ATTOpcode(rawValue: 0x11)
    public static let writeRequest = ATTOpcode(rawValue: 0x12)
    public static let writeResponse = ATTOpcode(rawValue: 0x13)
    public static let prepareWriteRequest = ATTOpcode(rawValue: 0x16)
    public static let prepareWriteResponse = ATTOpcode(rawValue: 0x17)
    public static let executeWriteRequest = ATTOpcode(rawValue: 0x18)
    public static let executeWriteResponse = ATTOpcode(rawValue: 0x19)
    public static let handleValueNotification = ATTOpcode(rawValue: 0x1B)
    public static let handleValueIndication = ATTOpcode(rawValue: 0x1D)
    public static let handleValueConfirmation = ATTOpcode(rawValue: 0x1E)
    public static let readMultipleVariableRequest = ATTOpcode(rawValue: 0x20)
    public static let readMultipleVariableResponse = ATTOpcode(rawValue: 0x21)
    public static let multipleHandleValueNotification = ATTOpcode(rawValue: 0x23)
    public static let writeCommand = ATTOpcode(rawValue: 0x52)
    public static let signedWriteCommand = ATTOpcode(rawValue: 0xD2)

    /// Bit 6: a command — no response, never throttled (§3.3).
    public var isCommand: Bool { rawValue & 0x40 != 0 }

    /// What kind of PDU this opcode makes, which decides the bearer's queueing (§3.3, §3.4.9).
    public enum Kind: Sendable { case request, response, command, notification, indication, confirmation, unknown }

    public var kind: Kind {
        switch self {
        case .errorResponse, .exchangeMTUResponse, .findInformationResponse, .findByTypeValueResponse, .readByTypeResponse,
            .readResponse, .readBlobResponse, .readMultipleResponse, .readByGroupTypeResponse, .writeResponse,
            .prepareWriteResponse, .executeWriteResponse, .readMultipleVariableResponse:
            return .response
        case .exchangeMTURequest, .findInformationRequest, .findByTypeValueRequest, .readByTypeRequest, .readRequest,
            .readBlobRequest, .readMultipleRequest, .readByGroupTypeRequest, .writeRequest, .prepareWriteRequest,
            .executeWriteRequest, .readMultipleVariableRequest:
            return .request
        case .handleValueNotification, .multipleHandleValueNotification: return .notification
        case .handleValueIndication: return .indication
        case .handleValueConfirmation: return .confirmation
        default: return isCommand ? .command : .unknown
        }
    }

    /// The response opcode a request expects.
    public var response: ATTOpcode? {
        kind == .request ? ATTOpcode(rawValue: rawValue + 1) : nil
    }

    public var description: String { "0x" + [rawValue].hexString }
}

/// The largest attribute value ATT carries, and so the largest write: 512
/// bytes (Core v5.4, Vol 3, Part F, §3.2.9), whatever the MTU. At an MTU of
/// 517 a Write Command could hold 514, but a server must not accept a value
/// longer than 512: Bumble's GATT server drops it without a word, which is how
/// the limit was found (a peripheral received every full-size write "8 bytes
/// short": the last ACL fragment of a 521-byte frame was all that was visible).
public enum ATTLimits {
    public static let maximumAttributeValue = 512

    /// The most a write or notification can carry at `mtu`: MTU − 3, at most 512.
    public static func largestValue(mtu: Int) -> Int { min(mtu - 3, maximumAttributeValue) }

    /// The largest link-layer payload LE allows (Core v5.4, Vol 6, Part B, §2.4.2.21), and what
    /// a controller with Data Length Extension negotiates: the size of the fragments a host's
    /// writes are cut into. Over BlueZ the host never learns the length the link settled on, so
    /// it assumes this one.
    public static let largestLinkLayerPayload = 251

    /// ATT's opcode and handle (3) and L2CAP's length and channel (4): what a write adds before
    /// it is cut into link-layer fragments.
    public static let writeOverhead = 7

    /// The largest value at `mtu` whose write fills whole link-layer fragments of
    /// ``largestLinkLayerPayload`` bytes (n × 251 − 7: 244, 495), or ``largestValue(mtu:)`` where
    /// that is one fragment or less.
    ///
    /// Why a host streams writes of this size rather than the largest: a write a few bytes over
    /// whole fragments costs a fragment more. At MTU 517 a 512-byte write goes as 251 + 251 + 17
    /// bytes, three pairs of a connection event for what two full pairs and a bit carry; a
    /// controller that counts the packets of an event (its ACL buffers) then carries 4 such writes
    /// where it carries 6 of 495 bytes, and one that counts air time still spends an inter-frame
    /// space and an acknowledgement on the sliver. Where the link negotiated no DLE (27-byte
    /// fragments) 495 bytes take 19 fragments and 512 take 20: the smaller write loses nothing.
    public static func fullFragmentValue(mtu: Int) -> Int {
        let largest = largestValue(mtu: mtu)
        let fragments = (largest + writeOverhead) / largestLinkLayerPayload
        guard fragments >= 1 else { return largest }
        return fragments * largestLinkLayerPayload - writeOverhead
    }
}

/// ATT error codes (§3.4.1.1 and Core Specification Supplement).
public struct ATTErrorCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let invalidHandle = ATTErrorCode(rawValue: 0x01)
    public static let readNotPermitted = ATTErrorCode(rawValue: 0x02)
    public static let writeNotPermitted = ATTErrorCode(rawValue: 0x03)
    public static let invalidPDU = ATTErrorCode(rawValue: 0x04)
    public static let insufficientAuthentication = ATTErrorCode(rawValue: 0x05)
    public static let requestNotSupported = ATTErrorCode(rawValue: 0x06)
    public static let invalidOffset = ATTErrorCode(rawValue: 0x07)
    public static let insufficientAuthorization = ATTErrorCode(rawValue: 0x08)
    public static let prepareQueueFull = ATTErrorCode(rawValue: 0x09)
    public static let attributeNotFound = ATTErrorCode(rawValue: 0x0A)
    public static let attributeNotLong = ATTErrorCode(rawValue: 0x0B)
    public static let insufficientEncryptionKeySize = ATTErrorCode(rawValue: 0x0C)
    public static let invalidAttributeValueLength = ATTErrorCode(rawValue: 0x0D)
    public static let unlikelyError = ATTErrorCode(rawValue: 0x0E)
    public static let insufficientEncryption = ATTErrorCode(rawValue: 0x0F)
    public static let unsupportedGroupType = ATTErrorCode(rawValue: 0x10)
    public static let insufficientResources = ATTErrorCode(rawValue: 0x11)

    public var description: String {
        switch self {
        case .invalidHandle: "invalid handle"
        case .readNotPermitted: "read not permitted"
        case .writeNotPermitted: "write not permitted"
        case .invalidPDU: "invalid PDU"
        case .insufficientAuthentication: "insufficient authentication"
        case .requestNotSupported: "request not supported"
        case .invalidOffset: "invalid offset"
        case .insufficientAuthorization: "insufficient authorization"
        case .prepareQueueFull: "prepare queue full"
        case .attributeNotFound: "attribute not found"
        case .attributeNotLong: "attribute not long"
        case .insufficientEncryptionKeySize: "insufficient encryption key size"
        case .invalidAttributeValueLength: "invalid attribute value length"
        case .unlikelyError: "unlikely error"
        case .insufficientEncryption: "insufficient encryption"
        case .unsupportedGroupType: "unsupported group type"
        case .insufficientResources: "insufficient resources"
        default: "ATT error 0x\([rawValue].hexString)"
        }
    }
}

/// Every ATT PDU (Core v5.4, Vol 3, Part F, §3.4), as a value with an exact
/// `encode()` and an `init(decoding:)` that throws on malformed input — it never
/// traps, whatever arrives from the air.
public enum ATTPDU: Sendable, Hashable, WireCodable {
    /// §3.4.1.1
    case errorResponse(request: ATTOpcode, handle: UInt16, error: ATTErrorCode)
    /// §3.4.2.1 / §3.4.2.2
    case exchangeMTURequest(clientMTU: UInt16)
    case exchangeMTUResponse(serverMTU: UInt16)
    /// §3.4.3.1 / §3.4.3.2
    case findInformationRequest(start: UInt16, end: UInt16)
    case findInformationResponse([HandleUUID])
    /// §3.4.3.3 / §3.4.3.4
    case findByTypeValueRequest(start: UInt16, end: UInt16, type: UInt16, value: [UInt8])
    case findByTypeValueResponse([HandleRange])
    /// §3.4.4.1 / §3.4.4.2
    case readByTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    case readByTypeResponse([HandleValue])
    /// §3.4.4.3 / §3.4.4.4
    case readRequest(handle: UInt16)
    case readResponse(value: [UInt8])
    /// §3.4.4.5 / §3.4.4.6
    case readBlobRequest(handle: UInt16, offset: UInt16)
    case readBlobResponse(part: [UInt8])
    /// §3.4.4.7 / §3.4.4.8
    case readMultipleRequest(handles: [UInt16])
    case readMultipleResponse(values: [UInt8])
    /// §3.4.4.9 / §3.4.4.10
    case readByGroupTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    case readByGroupTypeResponse([GroupValue])
    /// §3.4.4.11 / §3.4.4.12
    case readMultipleVariableRequest(handles: [UInt16])
    case readMultipleVariableResponse(values: [[UInt8]])
    /// §3.4.5.1 / §3.4.5.2 / §3.4.5.3 / §3.4.5.4
    case writeRequest(handle: UInt16, value: [UInt8])
    case writeResponse
    case writeCommand(handle: UInt16, value: [UInt8])
    case signedWriteCommand(handle: UInt16, value: [UInt8], signature: [UInt8])
    /// §3.4.6.1 – §3.4.6.4
    case prepareWriteRequest(handle: UInt16, offset: UInt16, part: [UInt8])
    case prepareWriteResponse(handle: UInt16, offset: UInt16, part: [UInt8])
    case executeWriteRequest(commit: Bool)
    case executeWriteResponse
    /// §3.4.7.1 – §3.4.7.4
    case handleValueNotification(handle: UInt16, value: [UInt8])
    case handleValueIndication(handle: UInt16, value: [UInt8])
    case handleValueConfirmation
    case multipleHandleValueNotification([HandleValue])

    public struct HandleUUID: Sendable, Hashable {
        public var handle: UInt16
        public var uuid: BluetoothUUID
        public init(handle: UInt16, uuid: BluetoothUUID) {
            self.handle = handle
            self.uuid = uuid
        }
    }

    public struct HandleRange: Sendable, Hashable {
        public var found: UInt16
        public var groupEnd: UInt16
        public init(found: UInt16, groupEnd: UInt16) {
            self.found = found
            self.groupEnd = groupEnd
        }
    }

    public struct HandleValue: Sendable, Hashable {
        public var handle: UInt16
        public var value: [UInt8]
        public init(handle: UInt16, value: [UInt8]) {
            self.handle = handle
            self.value = value
        }
    }

    public struct GroupValue: Sendable, Hashable {
        public var handle: UInt16
        public var groupEnd: UInt16
        public var value: [UInt8]
        public init(handle: UInt16, groupEnd: UInt16, value: [UInt8]) {
            self.handle = handle
            self.groupEnd = groupEnd
            self.value = value
        }
    }

    public var opcode: ATTOpcode {
        switch self {
        case .errorResponse: .errorResponse
        case .exchangeMTURequest: .exchangeMTURequest
        case .exchangeMTUResponse: .exchangeMTUResponse
        case .findInformationRequest: .findInformationRequest
        case .findInformationResponse: .findInformationResponse
        case .findByTypeValueRequest: .findByTypeValueRequest
        case .findByTypeValueResponse: .findByTypeValueResponse
        case .readByTypeRequest: .readByTypeRequest
        case .readByTypeResponse: .readByTypeResponse
        case .readRequest: .readRequest
        case .readResponse: .readResponse
        case .readBlobRequest: .readBlobRequest
        case .readBlobResponse: .readBlobResponse
        case .readMultipleRequest: .readMultipleRequest
        case .readMultipleResponse: .readMultipleResponse
        case .readByGroupTypeRequest: .readByGroupTypeRequest
        case .readByGroupTypeResponse: .readByGroupTypeResponse
        case .readMultipleVariableRequest: .readMultipleVariableRequest
        case .readMultipleVariableResponse: .readMultipleVariableResponse
        case .writeRequest: .writeRequest
        case .writeResponse: .writeResponse
        case .writeCommand: .writeCommand
        case .signedWriteCommand: .signedWriteCommand
        case .prepareWriteRequest: .prepareWriteRequest
        case .prepareWriteResponse: .prepareWriteResponse
        case .executeWriteRequest: .executeWriteRequest
        case .executeWriteResponse: .executeWriteResponse
        case .handleValueNotification: .handleValueNotification
        case .handleValueIndication: .handleValueIndication
        case .handleValueConfirmation: .handleValueConfirmation
        case .multipleHandleValueNotification: .multipleHandleValueNotification
        }
    }

    public func encode(into w: inout ByteWriter) {
        w.write(opcode.rawValue)
        switch self {
        case .errorResponse(let request, let handle, let error):
            w.write(request.rawValue)
            w.write(handle)
            w.write(error.rawValue)
        case .exchangeMTURequest(let mtu), .exchangeMTUResponse(let mtu):
            w.write(mtu)
        case .findInformationRequest(let start, let end), .readBlobRequest(let start, let end):
            w.write(start)
            w.write(end)
        case .findInformationResponse(let entries):
            let format: UInt8 = entries.first?.uuid.wireSize == 16 ? 2 : 1
            w.write(format)
            for entry in entries {
                w.write(entry.handle)
                w.write(contentsOf: entry.uuid.littleEndian)
            }
        case .findByTypeValueRequest(let start, let end, let type, let value):
            w.write(start)
            w.write(end)
            w.write(type)
            w.write(contentsOf: value)
        case .findByTypeValueResponse(let ranges):
            for range in ranges {
                w.write(range.found)
                w.write(range.groupEnd)
            }
        case .readByTypeRequest(let start, let end, let type), .readByGroupTypeRequest(let start, let end, let type):
            w.write(start)
            w.write(end)
            w.write(contentsOf: type.littleEndian)
        case .readByTypeResponse(let entries):
            w.write(UInt8(2 + (entries.first?.value.count ?? 0)))
            for entry in entries {
                w.write(entry.handle)
                w.write(contentsOf: entry.value)
            }
        case .readRequest(let handle):
            w.write(handle)
        case .readResponse(let value), .readBlobResponse(let value), .readMultipleResponse(let value):
            w.write(contentsOf: value)
        case .readMultipleRequest(let handles), .readMultipleVariableRequest(let handles):
            for handle in handles { w.write(handle) }
        case .readByGroupTypeResponse(let entries):
            w.write(UInt8(4 + (entries.first?.value.count ?? 0)))
            for entry in entries {
                w.write(entry.handle)
                w.write(entry.groupEnd)
                w.write(contentsOf: entry.value)
            }
        case .readMultipleVariableResponse(let values):
            for value in values {
                w.write(UInt16(value.count))
                w.write(contentsOf: value)
            }
        case .writeRequest(let handle, let value), .writeCommand(let handle, let value),
            .handleValueNotification(let handle, let value), .handleValueIndication(let handle, let value):
            w.write(handle)
            w.write(contentsOf: value)
        case .signedWriteCommand(let handle, let value, let signature):
            w.write(handle)
            w.write(contentsOf: value)
            w.write(contentsOf: signature)
        case .prepareWriteRequest(let handle, let offset, let part), .prepareWriteResponse(let handle, let offset, let part):
            w.write(handle)
            w.write(offset)
            w.write(contentsOf: part)
        case .executeWriteRequest(let commit):
            w.write(UInt8(commit ? 1 : 0))
        case .writeResponse, .executeWriteResponse, .handleValueConfirmation:
            break
        case .multipleHandleValueNotification(let entries):
            for entry in entries {
                w.write(entry.handle)
                w.write(UInt16(entry.value.count))
                w.write(contentsOf: entry.value)
            }
        }
    }

    public init(decoding r: inout ByteReader) throws(DecodingError) {
        let opcode = ATTOpcode(rawValue: try r.readUInt8("ATT opcode"))
        switch opcode {
        case .errorResponse:
            self = .errorResponse(
                request: ATTOpcode(rawValue: try r.readUInt8("error.request")),
                handle: try r.readUInt16(.little, "error.handle"),
                error: ATTErrorCode(rawValue: try r.readUInt8("error.code")))
        case .exchangeMTURequest, .exchangeMTUResponse:
            let at = r.offset
            let mtu = try r.readUInt16(.little, "mtu")
            guard mtu >= 23 else { throw r.invalid("mtu", "\(mtu) is below the minimum ATT MTU of 23", at: at) }
            self = opcode == .exchangeMTURequest ? .exchangeMTURequest(clientMTU: mtu) : .exchangeMTUResponse(serverMTU: mtu)
        case .findInformationRequest:
            let (start, end) = try Self.range(&r)
            self = .findInformationRequest(start: start, end: end)
        case .findInformationResponse:
            let at = r.offset
            let format = try r.readUInt8("findInformation.format")
            guard format == 1 || format == 2 else { throw r.invalid("findInformation.format", "format \(format) is not 1 or 2", at: at) }
            let size = format == 1 ? 2 : 16
            var entries: [HandleUUID] = []
            repeat {
                let handle = try r.readUInt16(.little, "findInformation.handle")
                entries.append(HandleUUID(handle: handle, uuid: try BluetoothUUID(decoding: &r, size: size, field: "findInformation.uuid")))
            } while !r.isAtEnd
            self = .findInformationResponse(entries)
        case .findByTypeValueRequest:
            let (start, end) = try Self.range(&r)
            self = .findByTypeValueRequest(start: start, end: end, type: try r.readUInt16(.little, "findByTypeValue.type"), value: r.readRemaining())
        case .findByTypeValueResponse:
            var ranges: [HandleRange] = []
            repeat {
                ranges.append(
                    HandleRange(
                        found: try r.readUInt16(.little, "findByTypeValue.found"),
                        groupEnd: try r.readUInt16(.little, "findByTypeValue.groupEnd")))
            } while !r.isAtEnd
            self = .findByTypeValueResponse(ranges)
        case .readByTypeRequest, .readByGroupTypeRequest:
            let (start, end) = try Self.range(&r)
            let type = try BluetoothUUID(decoding: &r, size: r.remaining, field: "type")
            self =
                opcode == .readByTypeRequest
                ? .readByTypeRequest(start: start, end: end, type: type)
                : .readByGroupTypeRequest(start: start, end: end, type: type)
        case .readByTypeResponse:
            let at = r.offset
            let length = Int(try r.readUInt8("readByType.length"))
            guard length >= 2 else { throw r.invalid("readByType.length", "each entry needs at least a 2-byte handle, length is \(length)", at: at) }
            var entries: [HandleValue] = []
            repeat {
                entries.append(
                    HandleValue(
                        handle: try r.readUInt16(.little, "readByType.handle"),
                        value: try r.readBytes(length - 2, "readByType.value")))
            } while !r.isAtEnd
            self = .readByTypeResponse(entries)
        case .readRequest:
            self = .readRequest(handle: try r.readUInt16(.little, "read.handle"))
        case .readResponse: self = .readResponse(value: r.readRemaining())
        case .readBlobRequest:
            self = .readBlobRequest(handle: try r.readUInt16(.little, "readBlob.handle"), offset: try r.readUInt16(.little, "readBlob.offset"))
        case .readBlobResponse: self = .readBlobResponse(part: r.readRemaining())
        case .readMultipleRequest, .readMultipleVariableRequest:
            let at = r.offset
            guard r.remaining >= 4, r.remaining % 2 == 0 else {
                throw r.invalid("readMultiple.handles", "needs two or more 2-byte handles, got \(r.remaining) bytes", at: at)
            }
            var handles: [UInt16] = []
            while !r.isAtEnd { handles.append(try r.readUInt16(.little, "readMultiple.handle")) }
            self = opcode == .readMultipleRequest ? .readMultipleRequest(handles: handles) : .readMultipleVariableRequest(handles: handles)
        case .readMultipleResponse: self = .readMultipleResponse(values: r.readRemaining())
        case .readByGroupTypeResponse:
            let at = r.offset
            let length = Int(try r.readUInt8("readByGroupType.length"))
            guard length >= 4 else { throw r.invalid("readByGroupType.length", "each entry needs two handles, length is \(length)", at: at) }
            var entries: [GroupValue] = []
            repeat {
                entries.append(
                    GroupValue(
                        handle: try r.readUInt16(.little, "readByGroupType.handle"),
                        groupEnd: try r.readUInt16(.little, "readByGroupType.groupEnd"),
                        value: try r.readBytes(length - 4, "readByGroupType.value")))
            } while !r.isAtEnd
            self = .readByGroupTypeResponse(entries)
        case .readMultipleVariableResponse:
            var values: [[UInt8]] = []
            while !r.isAtEnd {
                let length = Int(try r.readUInt16(.little, "readMultipleVariable.length"))
                // The last value may be cut by the MTU (§3.4.4.12): take what there is.
                values.append(try r.readBytes(min(length, r.remaining), "readMultipleVariable.value"))
            }
            self = .readMultipleVariableResponse(values: values)
        case .writeRequest, .writeCommand, .handleValueNotification, .handleValueIndication:
            let handle = try r.readUInt16(.little, "handle")
            let value = r.readRemaining()
            switch opcode {
            case .writeRequest: self = .writeRequest(handle: handle, value: value)
            case .writeCommand: self = .writeCommand(handle: handle, value: value)
            case .handleValueNotification: self = .handleValueNotification(handle: handle, value: value)
            default: self = .handleValueIndication(handle: handle, value: value)
            }
        case .signedWriteCommand:
            let handle = try r.readUInt16(.little, "signedWrite.handle")
            let at = r.offset
            guard r.remaining >= 12 else { throw DecodingError(field: "signedWrite.signature", offset: at, reason: .truncated(needed: 12 - r.remaining)) }
            let rest = r.readRemaining()
            self = .signedWriteCommand(handle: handle, value: Array(rest.dropLast(12)), signature: Array(rest.suffix(12)))
        case .prepareWriteRequest, .prepareWriteResponse:
            let handle = try r.readUInt16(.little, "prepareWrite.handle")
            let offset = try r.readUInt16(.little, "prepareWrite.offset")
            let part = r.readRemaining()
            self =
                opcode == .prepareWriteRequest
                ? .prepareWriteRequest(handle: handle, offset: offset, part: part)
                : .prepareWriteResponse(handle: handle, offset: offset, part: part)
        case .executeWriteRequest:
            let at = r.offset
            let flags = try r.readUInt8("executeWrite.flags")
            guard flags <= 1 else { throw r.invalid("executeWrite.flags", "flags \(flags) are not 0 (cancel) or 1 (write)", at: at) }
            self = .executeWriteRequest(commit: flags == 1)
        case .writeResponse: self = .writeResponse
        case .executeWriteResponse: self = .executeWriteResponse
        case .handleValueConfirmation: self = .handleValueConfirmation
        case .multipleHandleValueNotification:
            var entries: [HandleValue] = []
            repeat {
                let handle = try r.readUInt16(.little, "multipleNotification.handle")
                let length = Int(try r.readUInt16(.little, "multipleNotification.length"))
                entries.append(HandleValue(handle: handle, value: try r.readBytes(length, "multipleNotification.value")))
            } while !r.isAtEnd
            self = .multipleHandleValueNotification(entries)
        default:
            throw DecodingError(field: "ATT opcode", offset: 0, reason: .invalidValue("unknown opcode \(opcode)"))
        }
    }

    private static func range(_ r: inout ByteReader) throws(DecodingError) -> (UInt16, UInt16) {
        let at = r.offset
        let start = try r.readUInt16(.little, "startHandle")
        let end = try r.readUInt16(.little, "endHandle")
        guard start != 0, start <= end else {
            throw r.invalid("startHandle", "handle range 0x\(String(start, radix: 16))–0x\(String(end, radix: 16)) is invalid", at: at)
        }
        return (start, end)
    }
}
