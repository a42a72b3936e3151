/// A connection to a protocol that spans several characteristics, carrying
/// ``ChannelMessage``s: packets on numbered channels, the directory of
/// channels present, and the device's answers to writes.
///
/// Every ``Link`` offers one (``Link/channelLink``). Over GATT the link maps
/// channels onto characteristics and answers the directory from discovery;
/// over a serial port the protocol's own framing does; on a link that carries
/// bytes only (the simulator, UDP) ``FramedChannelLink`` frames each message
/// with ``ChannelFrame``.
///
/// ``Link/parameters``' `maximumPayload` counts one byte for the channel, as
/// the framed form does, whether or not the link sends it.
public protocol ChannelLink: Sendable {
    /// What the engine may assume about this link: those of the link it is made from.
    var parameters: LinkParameters { get }

    /// Sends one message. Throws as ``Link/send(_:)`` does.
    func send(_ message: ChannelMessage) async throws(LinkError)

    /// Waits for the next message from the peer; cancellation loses none, as ``Link/receive()``.
    func receiveMessage() async throws(LinkError) -> ChannelMessage

    /// Closes the link.
    func close() async
}

extension ChannelLink {
    /// The next message, or nil when `timeout` passes first on `clock`.
    public func receiveMessage(within timeout: Duration, clock: any BleotaClock) async throws(LinkError) -> ChannelMessage? {
        try await receiving(within: timeout, clock: clock) { try await self.receiveMessage() }
    }
}

/// A link that carries ``ChannelMessage``s itself (GATT onto characteristics, a serial
/// transport onto its framing): it is its own ``Link/channelLink``, and as a byte ``Link``
/// it takes and gives ``ChannelFrame``s, for whatever wraps it.
public protocol MessageCarryingLink: Link, ChannelLink {}

extension MessageCarryingLink {
    public var channelLink: any ChannelLink { self }

    /// Sends the message `packet` frames; bytes that frame none (an empty packet, a marker that is
    /// not its message whole) are an error, not dropped, since nothing would say they were lost.
    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard let message = ChannelFrame.decode(packet) else {
            throw .notAMessage("\(packet.count) bytes\(packet.first.map { " starting 0x\(String($0, radix: 16))" } ?? "") frame no channel message")
        }
        try await send(message)
    }

    public func receive() async throws(LinkError) -> [UInt8] { try ChannelFrame.encode(try await receiveMessage()) }
}

/// The ``ChannelLink`` of a link that carries bytes only: each message framed by ``ChannelFrame``.
public struct FramedChannelLink: ChannelLink {
    public let base: any Link

    public init(_ base: any Link) { self.base = base }

    public var parameters: LinkParameters { base.parameters }

    public func send(_ message: ChannelMessage) async throws(LinkError) {
        try await base.send(try ChannelFrame.encode(message))
    }

    public func receiveMessage() async throws(LinkError) -> ChannelMessage {
        while true {
            // An empty packet carries no message; it is dropped as a damaged one would be.
            if let message = ChannelFrame.decode(try await base.receive()) { return message }
        }
    }

    public func close() async { await base.close() }
}

extension Link {
    /// Sends `payload` on `channel` of ``channelLink``.
    public func send(channel: UInt8, _ payload: some Sequence<UInt8>) async throws(LinkError) {
        try await channelLink.send(.packet(channel, payload))
    }

    /// Sends `message` on ``channelLink``.
    public func send(message: ChannelMessage) async throws(LinkError) {
        try await channelLink.send(message)
    }

    /// The next message on ``channelLink``.
    public func receiveMessage() async throws(LinkError) -> ChannelMessage {
        try await channelLink.receiveMessage()
    }

    /// The next message on ``channelLink``, or nil when `timeout` passes first on `clock`.
    public func receiveMessage(within timeout: Duration, clock: any BleotaClock) async throws(LinkError) -> ChannelMessage? {
        try await channelLink.receiveMessage(within: timeout, clock: clock)
    }
}
