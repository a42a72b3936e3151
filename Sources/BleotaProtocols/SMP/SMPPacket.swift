import BleotaCodec

/// One SMP message: header plus CBOR body (a map).
public struct SMPPacket: Sendable, Hashable {
    public var header: SMPHeader
    public var body: CBOR

    public init(header: SMPHeader, body: CBOR) {
        self.header = header
        self.body = body
    }

    public init(
        _ operation: SMPHeader.Operation, group: SMPGroup, command: UInt8, sequence: UInt8,
        version: SMPHeader.Version = .v2, body: CBOR = .map([])
    ) {
        header = SMPHeader(operation: operation, version: version, length: 0, group: group, sequence: sequence, command: command)
        self.body = body
    }

    public init(
        _ operation: SMPHeader.Operation, command: SMPCommand, sequence: UInt8, version: SMPHeader.Version = .v2,
        body: CBOR = .map([])
    ) {
        self.init(operation, group: command.group, command: command.id, sequence: sequence, version: version, body: body)
    }

    public func encode() -> [UInt8] {
        let cbor = body.encode()
        var header = self.header
        header.length = UInt16(truncatingIfNeeded: cbor.count)
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
