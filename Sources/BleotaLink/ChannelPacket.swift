/// Packets of a protocol that spans several characteristics (Nordic DFU's
/// control point, packet and buttonless characteristics; a vendor's control
/// point and data stream), carried on one ``Link``: each packet starts with
/// one byte naming the channel it belongs to.
///
/// The channel numbers are the protocol's own (an index into the
/// characteristics its GATT service declares). A link that maps channels onto
/// real characteristics (GATT) or onto a transport's own framing (a serial
/// port) strips and adds the byte; the simulator carries it as it is.
///
/// Which channels a connection has is what GATT discovery tells a real host:
/// a device in its application offers the buttonless characteristic, its
/// bootloader the control point and packet characteristics. Over a channel
/// link the host asks with ``directoryQuery`` and the device (or the link,
/// which knows its characteristics) answers ``directory(_:)``.
public enum ChannelPacket {
    /// The first byte of a request for the channel directory, and of its answer.
    public static let directoryMarker: UInt8 = 0xFE

    /// One packet for `channel`.
    public static func tag(_ channel: UInt8, _ payload: some Sequence<UInt8>) -> [UInt8] {
        var packet: [UInt8] = [channel]
        packet.append(contentsOf: payload)
        return packet
    }

    /// The channel and payload of a received packet; nil for an empty one.
    public static func split(_ packet: [UInt8]) -> (channel: UInt8, payload: ArraySlice<UInt8>)? {
        guard let channel = packet.first else { return nil }
        return (channel, packet.dropFirst())
    }

    /// "Which channels does this connection have?"
    public static let directoryQuery: [UInt8] = [directoryMarker]

    /// The answer to ``directoryQuery``: the marker, then each channel present.
    public static func directory(_ channels: [UInt8]) -> [UInt8] { [directoryMarker] + channels }

    /// The first byte of a write result: the device's answer to a write on a
    /// channel whose writes it answers (``writeResult(channel:code:)``).
    public static let writeResultMarker: UInt8 = 0xFD

    /// A device's answer to a write on `channel`: 0 for taken, otherwise the
    /// code it refuses with. Over GATT this is the ATT Write Response (0) or
    /// the Error Response's code (the application range 0x80…0x9F, Silicon
    /// Labs' AppLoader answers so); on the simulator, UDP and serial it is
    /// this packet, which the device half sends itself.
    public static func writeResult(channel: UInt8, code: UInt8) -> [UInt8] { [writeResultMarker, channel, code] }

    /// The channel and code of a write result, or nil when `packet` is not one.
    public static func writeResult(in packet: [UInt8]) -> (channel: UInt8, code: UInt8)? {
        guard packet.count == 3, packet[0] == writeResultMarker else { return nil }
        return (packet[1], packet[2])
    }

    /// The channels listed in a directory answer, or nil when `packet` is not one.
    public static func channels(inDirectory packet: [UInt8]) -> Set<UInt8>? {
        guard packet.first == directoryMarker else { return nil }
        return Set(packet.dropFirst())
    }
}
