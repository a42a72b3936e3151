import BleotaCodec
import BleotaEngine

/// ACME OTA's messages: the common private shape of a vendor protocol. One
/// GATT characteristic takes every host → device message; the device answers
/// with notifications. All integers little endian.
///
/// ```
/// START    01 | length u32 | crc32 u32 | chunk u16 | version length u8 | version
/// DATA     02 | index u16 | payload | crc16 u16   (CRC-16/CCITT-FALSE over opcode, index, payload)
/// END      03
/// VERSION  04
/// POLL     05                                      (asks for a STATUS now)
/// STATUS   80 | status u8 | next u16 | count u16   (next: the first index not yet held; count: how many are missing from it, for gaps)
/// VERSION  84 | version length u8 | version
/// ```
public enum AcmeMessage: Sendable, Hashable {
    case start(length: UInt32, crc32: UInt32, chunk: UInt16, version: String)
    case data(index: UInt16, payload: [UInt8])
    case end
    case versionRequest
    case poll
    case status(AcmeStatus, next: UInt16, count: UInt16)
    case version(String)

    public enum Opcode: UInt8 {
        case start = 0x01, data = 0x02, end = 0x03, versionRequest = 0x04, poll = 0x05, status = 0x80, version = 0x84
    }

    public func encode() -> [UInt8] {
        var writer = ByteWriter()
        switch self {
        case .start(let length, let crc32, let chunk, let version):
            let text = Array(version.utf8.prefix(255))
            writer.write(Opcode.start.rawValue)
            writer.write(length, .little)
            writer.write(crc32, .little)
            writer.write(chunk, .little)
            writer.write(UInt8(text.count))
            writer.write(contentsOf: text)
        case .data(let index, let payload):
            writer.write(Opcode.data.rawValue)
            writer.write(index, .little)
            writer.write(contentsOf: payload)
            writer.write(CRC16.checksum(writer.bytes, variant: .ccittFalse), .little)
        case .end: writer.write(Opcode.end.rawValue)
        case .versionRequest: writer.write(Opcode.versionRequest.rawValue)
        case .poll: writer.write(Opcode.poll.rawValue)
        case .status(let status, let next, let count):
            writer.write(Opcode.status.rawValue)
            writer.write(status.rawValue)
            writer.write(next, .little)
            writer.write(count, .little)
        case .version(let version):
            let text = Array(version.utf8.prefix(255))
            writer.write(Opcode.version.rawValue)
            writer.write(UInt8(text.count))
            writer.write(contentsOf: text)
        }
        return writer.bytes
    }

    /// Decodes untrusted bytes; every problem names its field and offset. A DATA
    /// packet whose CRC fails decodes as an error naming the CRC field.
    public init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        let code = try reader.readUInt8("opcode")
        guard let opcode = Opcode(rawValue: code) else { throw reader.invalid("opcode", "0x\(String(code, radix: 16)) is not an ACME OTA opcode", at: 0) }
        switch opcode {
        case .start:
            let length = try reader.readUInt32(.little, "start.length")
            let crc32 = try reader.readUInt32(.little, "start.crc32")
            let chunk = try reader.readUInt16(.little, "start.chunk")
            let count = Int(try reader.readUInt8("start.versionLength"))
            let version = String(decoding: try reader.readBytes(count, "start.version"), as: UTF8.self)
            self = .start(length: length, crc32: crc32, chunk: chunk, version: version)
        case .data:
            guard bytes.count >= 5 else { throw reader.invalid("data", "is \(bytes.count) bytes, fewer than its 5 of header and CRC") }
            let index = try reader.readUInt16(.little, "data.index")
            let payload = try reader.readBytes(bytes.count - 5, "data.payload")
            let carried = try reader.readUInt16(.little, "data.crc16")
            guard carried == CRC16.checksum(bytes.prefix(bytes.count - 2), variant: .ccittFalse) else {
                throw reader.invalid("data.crc16", "does not match the packet", at: bytes.count - 2)
            }
            self = .data(index: index, payload: payload)
        case .end: self = .end
        case .versionRequest: self = .versionRequest
        case .poll: self = .poll
        case .status:
            let raw = try reader.readUInt8("status.code")
            self = .status(
                AcmeStatus(rawValue: raw), next: try reader.readUInt16(.little, "status.next"),
                count: try reader.readUInt16(.little, "status.count"))
        case .version:
            let count = Int(try reader.readUInt8("version.length"))
            self = .version(String(decoding: try reader.readBytes(count, "version.text"), as: UTF8.self))
        }
        try reader.expectEnd()
    }
}

/// What a STATUS says; unknown codes decode as themselves, never a crash.
public struct AcmeStatus: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let ok = AcmeStatus(rawValue: 0)
    /// Packets are missing from `next` (`count` of them), or one arrived damaged.
    public static let missing = AcmeStatus(rawValue: 1)
    public static let verifyFailed = AcmeStatus(rawValue: 2)
    /// The image verified and is being activated: the device reboots.
    public static let done = AcmeStatus(rawValue: 3)
    public static let badState = AcmeStatus(rawValue: 4)
    public static let tooLarge = AcmeStatus(rawValue: 5)

    public var description: String {
        switch self {
        case .ok: "ok"
        case .missing: "missing packets"
        case .verifyFailed: "the image's CRC-32 did not match"
        case .done: "verified and activating"
        case .badState: "not allowed now"
        case .tooLarge: "too large for the device"
        default: "status \(rawValue)"
        }
    }
}

/// ACME OTA's requests, each naming its answer: bleota's exchange
/// (`HostContext.request(_:on:step:policy:)`) sends one, skips packets that do
/// not answer it and tries again when the answer is lost.
enum AcmeRequest {
    /// VERSION, answered by the version the device runs.
    struct Version: DeviceRequest {
        var what: String { "the version request" }
        func encode() -> [UInt8] { AcmeMessage.versionRequest.encode() }
        func response(from packet: [UInt8]) -> String? {
            if case .version(let text)? = try? AcmeMessage(decoding: packet) { text } else { nil }
        }
    }

    /// START, answered by a STATUS: whether the device takes the image.
    struct Start: DeviceRequest {
        var message: AcmeMessage
        var what: String { "the START request" }
        func encode() -> [UInt8] { message.encode() }
        func response(from packet: [UInt8]) -> AcmeStatus? {
            if case .status(let status, _, _)? = try? AcmeMessage(decoding: packet) { status } else { nil }
        }
    }

    /// END, answered by the STATUS of the device's CRC-32 check (a STATUS ok is the transfer's
    /// last acknowledgement, not the verdict, and is skipped).
    struct End: DeviceRequest {
        var what: String { "the END request" }
        func encode() -> [UInt8] { AcmeMessage.end.encode() }
        func response(from packet: [UInt8]) -> AcmeStatus? {
            if case .status(let status, _, _)? = try? AcmeMessage(decoding: packet), status != .ok { status } else { nil }
        }
    }
}
