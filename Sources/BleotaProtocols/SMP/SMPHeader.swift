import BleotaCodec

/// The 8-byte header of every SMP message (MCUmgr's Simple Management
/// Protocol; see protocols/smp.md):
/// `[res:3 ver:2 op:3][flags][length BE16][group BE16][sequence][command]`.
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
    public var group: SMPGroup
    public var sequence: UInt8
    /// The command within the group (see ``SMPCommand`` for the named ones).
    public var command: UInt8

    public init(
        operation: Operation, version: Version = .v2, flags: UInt8 = 0, length: UInt16, group: SMPGroup,
        sequence: UInt8, command: UInt8
    ) {
        self.operation = operation
        self.version = version
        self.flags = flags
        self.length = length
        self.group = group
        self.sequence = sequence
        self.command = command
    }

    /// The named command this header carries.
    public var smpCommand: SMPCommand { SMPCommand(group: group, id: command) }

    public func encode(into writer: inout ByteWriter) {
        writer.write(version.rawValue << 3 | operation.rawValue)
        writer.write(flags)
        writer.write(length, .big)
        writer.write(group.rawValue, .big)
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
        group = SMPGroup(rawValue: try reader.readUInt16(.big, "SMP group"))
        sequence = try reader.readUInt8("SMP sequence")
        command = try reader.readUInt8("SMP command")
    }
}
