import BleotaCodec

/// MCUmgr's Simple Management Protocol: an 8-byte header and a CBOR map
/// (see protocols/smp.md). This file holds the frame; SMPCommands.swift the
/// typed bodies of the commands bleota speaks.
public struct SMPHeader: Sendable, Hashable {
    public enum Operation: UInt8, Sendable, Hashable {
        case read = 0, readResponse = 1, write = 2, writeResponse = 3

        public var response: Operation { self == .read ? .readResponse : .writeResponse }
        public var isResponse: Bool { rawValue & 1 == 1 }
    }

    /// Version 1 answers errors with `rc`; version 2 with `err {group, rc}`.
    public enum Version: UInt8, Sendable, Hashable { case v1 = 0, v2 = 1 }

    public static let size = 8

    public var operation: Operation
    public var version: Version
    public var flags: UInt8
    /// Bytes of CBOR after the header.
    public var length: UInt16
    public var group: UInt16
    public var sequence: UInt8
    public var command: UInt8

    public init(operation: Operation, version: Version = .v2, flags: UInt8 = 0, length: UInt16, group: UInt16,
                sequence: UInt8, command: UInt8) {
        self.operation = operation
        self.version = version
        self.flags = flags
        self.length = length
        self.group = group
        self.sequence = sequence
        self.command = command
    }

    /// `[res:3 ver:2 op:3][flags][length BE16][group BE16][sequence][command]`.
    public func encode(into writer: inout ByteWriter) {
        writer.write(version.rawValue << 3 | operation.rawValue)
        writer.write(flags)
        writer.write(length, .big)
        writer.write(group, .big)
        writer.write(sequence)
        writer.write(command)
    }

    public init(decoding reader: inout ByteReader) throws(DecodingError) {
        let start = reader.offset
        let first = try reader.readUInt8("SMP header")
        guard let operation = Operation(rawValue: first & 0x07) else {
            throw reader.invalid("SMP operation", "\(first & 0x07) is not read, write or a response", at: start)
        }
        guard let version = Version(rawValue: (first >> 3) & 0x03) else {
            throw reader.invalid("SMP version", "\((first >> 3) & 0x03) is not 1 or 2", at: start)
        }
        self.operation = operation
        self.version = version
        flags = try reader.readUInt8("SMP flags")
        length = try reader.readUInt16(.big, "SMP length")
        group = try reader.readUInt16(.big, "SMP group")
        sequence = try reader.readUInt8("SMP sequence")
        command = try reader.readUInt8("SMP command")
    }
}

/// One SMP message: header plus CBOR body.
public struct SMPPacket: Sendable, Hashable {
    public var header: SMPHeader
    public var body: CBOR

    public init(header: SMPHeader, body: CBOR) {
        self.header = header
        self.body = body
    }

    public init(_ operation: SMPHeader.Operation, group: UInt16, command: UInt8, sequence: UInt8,
                version: SMPHeader.Version = .v2, body: CBOR = .map([])) {
        header = SMPHeader(operation: operation, version: version, length: 0, group: group, sequence: sequence, command: command)
        self.body = body
    }

    public func encode() -> [UInt8] {
        let cbor = body.encode()
        var header = self.header
        header.length = UInt16(cbor.count)
        var writer = ByteWriter(capacity: SMPHeader.size + cbor.count)
        header.encode(into: &writer)
        writer.write(contentsOf: cbor)
        return writer.bytes
    }

    /// Decodes one whole message; its CBOR must be exactly `length` bytes and a map.
    public init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        header = try SMPHeader(decoding: &reader)
        guard reader.remaining == Int(header.length) else {
            throw reader.invalid("SMP length", "header says \(header.length) bytes of CBOR but \(reader.remaining) follow")
        }
        do {
            body = try CBOR(decoding: reader.readRemaining())
        } catch {
            // Offsets are the message's: the CBOR starts after the header.
            throw DecodingError(field: error.field, offset: SMPHeader.size + error.offset, reason: error.reason)
        }
        guard case .map = body else { throw reader.invalid("SMP body", "is \(body), not a CBOR map", at: SMPHeader.size) }
    }

    /// The total length of the message at the front of `bytes`, once its header has arrived.
    public static func totalLength(of bytes: some Collection<UInt8>) -> Int? {
        guard bytes.count >= SMPHeader.size else { return nil }
        let start = bytes.startIndex
        let high = bytes[bytes.index(start, offsetBy: 2)], low = bytes[bytes.index(start, offsetBy: 3)]
        return SMPHeader.size + (Int(high) << 8 | Int(low))
    }
}

/// The management groups and commands bleota speaks.
public enum SMPGroup {
    public static let os: UInt16 = 0
    public static let image: UInt16 = 1
    public static let fileSystem: UInt16 = 8

    public static func name(_ group: UInt16) -> String {
        switch group {
        case os: "OS"
        case image: "image"
        case 2: "statistics"
        case 3: "settings"
        case 4: "log"
        case fileSystem: "file system"
        case 9: "shell"
        case 63: "Zephyr"
        default: "group \(group)"
        }
    }
}

public enum SMPCommandID {
    public static let echo: UInt8 = 0
    public static let reset: UInt8 = 5
    public static let parameters: UInt8 = 6
    public static let bootloaderInfo: UInt8 = 8
    public static let imageState: UInt8 = 0
    public static let imageUpload: UInt8 = 1
    public static let imageErase: UInt8 = 5
    public static let file: UInt8 = 0
}

/// An error a device answered with: v1's `rc` (MCUmgr's general codes) or
/// v2's `err {group, rc}` (the group's own codes), with the names from Zephyr's
/// mgmt headers so a person can tell what failed and why.
public struct SMPDeviceError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The group whose codes `rc` uses; nil for v1's general codes.
    public var group: UInt16?
    public var rc: Int
    /// A v1 device's optional reason text.
    public var reason: String?

    public init(group: UInt16?, rc: Int, reason: String? = nil) {
        self.group = group
        self.rc = rc
        self.reason = reason
    }

    /// Finds an error in a response body; nil when it reports success.
    public init?(response body: CBOR) {
        if let err = body["err"], let rc = err["rc"]?.int {
            guard rc != 0 else { return nil }
            self.init(group: err["group"]?.int.map { UInt16(clamping: $0) }, rc: rc)
        } else if let rc = body["rc"]?.int, rc != 0 {
            self.init(group: nil, rc: rc, reason: body["rsn"]?.string)
        } else {
            return nil
        }
    }

    public var body: CBOR {
        if let group { return .textMap(["err": .textMap(["group": CBOR(Int(group)), "rc": CBOR(rc)])]) }
        return .textMap(["rc": CBOR(rc)])
    }

    public var name: String {
        switch group {
        case nil: Self.general[rc] ?? "error \(rc)"
        case SMPGroup.image?: Self.image[rc] ?? "image error \(rc)"
        case SMPGroup.fileSystem?: Self.fileSystem[rc] ?? "file system error \(rc)"
        case SMPGroup.os?: Self.os[rc] ?? "OS error \(rc)"
        case let other?: "\(SMPGroup.name(other)) error \(rc)"
        }
    }

    public var description: String {
        var text = group.map { "the device's \(SMPGroup.name($0)) group answered \(name) (rc \(rc))" }
            ?? "the device answered \(name) (rc \(rc))"
        if let reason, !reason.isEmpty { text += ": \(reason)" }
        return text
    }

    static let general: [Int: String] = [
        1: "unknown error", 2: "out of memory", 3: "invalid argument", 4: "timeout", 5: "no such entry",
        6: "bad state", 7: "message too large", 8: "not supported", 9: "corrupt", 10: "busy", 11: "access denied",
        12: "protocol version too old", 13: "protocol version too new",
    ]
    static let os: [Int: String] = [1: "unknown error", 2: "invalid format", 3: "query yields no answer",
                                    4: "RTC not set", 5: "RTC command failed"]
    static let image: [Int: String] = [
        1: "unknown error", 2: "flash configuration query failed", 3: "no image", 4: "no TLVs", 5: "invalid TLV",
        6: "multiple hash TLVs", 7: "invalid TLV size", 8: "hash not found", 9: "no free slot",
        10: "flash open failed", 11: "flash read failed", 12: "flash write failed", 13: "flash erase failed",
        14: "invalid slot", 15: "no free memory", 16: "flash context already set", 17: "flash context not set",
        18: "flash area device null", 19: "invalid page offset", 20: "invalid offset", 21: "invalid length",
        22: "invalid image header", 23: "invalid image header magic", 24: "invalid hash", 25: "invalid flash address",
        26: "version get failed", 27: "current version is newer", 28: "image already pending",
        29: "invalid image vector table", 30: "image too large", 31: "image data overrun",
        32: "image confirmation denied", 33: "setting the active image to test denied",
    ]
    static let fileSystem: [Int: String] = [
        1: "unknown error", 2: "invalid file name", 3: "file not found", 4: "file is a directory", 5: "file open failed",
        6: "file seek failed", 7: "file read failed", 8: "file truncate failed", 9: "file delete failed",
        10: "file write failed", 11: "offset not valid", 12: "offset larger than file", 13: "checksum hash not found",
        14: "mount point not found", 15: "read-only file system", 16: "file empty",
    ]
}
