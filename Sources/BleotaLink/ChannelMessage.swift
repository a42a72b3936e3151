import BleotaCodec

/// One message of a protocol that spans several characteristics (Nordic DFU's
/// control point, packet and buttonless characteristics; a vendor's control
/// point and data stream), as a ``ChannelLink`` carries it.
///
/// The channel numbers are the protocol's own (an index into the
/// characteristics its GATT service declares). Which channels a connection has
/// is what GATT discovery tells a real host: a device in its application
/// offers the buttonless characteristic, its bootloader the control point and
/// packet characteristics. The host asks with ``directoryQuery`` and the
/// device (or the link, which knows its characteristics) answers
/// ``directory(_:)``.
public enum ChannelMessage: Sendable, Hashable {
    /// A packet on `channel`: a write from the host, a notification or a read's value from the device.
    case packet(channel: UInt8, payload: ArraySlice<UInt8>)
    /// A read of a readable channel, from the host; the value comes back as a packet on it.
    case read(channel: UInt8)
    /// "Which channels does this connection have?"
    case directoryQuery
    /// The answer to ``directoryQuery``: each channel present.
    case directory([UInt8])
    /// A device's answer to a write on a channel whose writes it answers: 0 for
    /// taken, otherwise the code it refuses with. Over GATT this is the ATT
    /// Write Response (0) or the Error Response's code (the application range
    /// 0x80…0x9F, Silicon Labs' AppLoader answers so).
    case writeResult(channel: UInt8, code: UInt8)

    /// A packet on `channel`.
    public static func packet(_ channel: UInt8, _ payload: some Sequence<UInt8>) -> ChannelMessage {
        .packet(channel: channel, payload: ArraySlice(payload))
    }

    /// Its size framed (``ChannelFrame``): what a device spends processing time on.
    public var framedSize: Int {
        switch self {
        case .packet(_, let payload): 1 + payload.count
        case .directoryQuery: 1
        case .read: 2
        case .directory(let channels): 1 + channels.count
        case .writeResult: 3
        }
    }
}

extension ChannelMessage: CustomStringConvertible {
    /// For logs: what it is, with a packet's first bytes in hex.
    public var description: String {
        switch self {
        case .packet(let channel, let payload):
            return "a packet of \(payload.count) byte\(payload.count == 1 ? "" : "s") on channel \(channel) (\(payload.prefix(8).hexString)\(payload.count > 8 ? "…" : ""))"
        case .directoryQuery: return "a directory query"
        case .read(let channel): return "a read of channel \(channel)"
        case .directory(let channels): return "the directory \(channels)"
        case .writeResult(let channel, let code): return "a write result \(code) on channel \(channel)"
        }
    }
}

/// How a ``ChannelMessage`` travels on a link that carries bytes only (the
/// simulated link, UDP): the first byte names the channel, or marks the two
/// messages that belong to no channel. Only ``FramedChannelLink`` and the links
/// that speak both (GATT) use it; protocols see messages.
public enum ChannelFrame {
    /// A directory query: this byte alone.
    static let directoryQueryMarker: UInt8 = 0xFF
    /// The first byte of a read, then the channel.
    static let readMarker: UInt8 = 0xFC
    /// The first byte of a directory, then each channel (none for a device that offers none).
    static let directoryMarker: UInt8 = 0xFE
    /// The first byte of a write result, then the channel and the code.
    static let writeResultMarker: UInt8 = 0xFD
    /// Channel numbers at or above this are the markers': no protocol may use them.
    public static let firstReservedChannel: UInt8 = 0xFC

    /// The bytes of `message`. A packet on a reserved channel (``firstReservedChannel`` and up)
    /// has none: its first byte would read as a marker.
    public static func encode(_ message: ChannelMessage) throws(LinkError) -> [UInt8] {
        switch message {
        case .packet(let channel, let payload):
            guard channel < firstReservedChannel else {
                throw .notAMessage("channel 0x\(String(channel, radix: 16)) is reserved for the channel frame's markers (0xfc and up)")
            }
            return [channel] + payload
        case .directoryQuery: return [directoryQueryMarker]
        case .read(let channel): return [readMarker, channel]
        case .directory(let channels): return [directoryMarker] + channels
        case .writeResult(let channel, let code): return [writeResultMarker, channel, code]
        }
    }

    /// The message `bytes` carry; nil for an empty packet, or one that starts with a marker
    /// but is not that message whole (a query with bytes after it, a read of other than
    /// two bytes, a write result of other than three), which carry none.
    public static func decode(_ bytes: [UInt8]) -> ChannelMessage? {
        guard let first = bytes.first else { return nil }
        switch first {
        case directoryQueryMarker: return bytes.count == 1 ? .directoryQuery : nil
        case readMarker: return bytes.count == 2 ? .read(channel: bytes[1]) : nil
        case directoryMarker: return .directory(Array(bytes.dropFirst()))
        case writeResultMarker: return bytes.count == 3 ? .writeResult(channel: bytes[1], code: bytes[2]) : nil
        default: return .packet(channel: first, payload: bytes.dropFirst())
        }
    }
}
