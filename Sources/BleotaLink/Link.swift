import BleotaCodec

/// The seam between the transfer engine and whatever carries its bytes.
///
/// `BleotaLink` holds the one abstraction every transport implements — ATT/GATT
/// writes and notifications, an L2CAP credit-based channel, the simulated BLE
/// link, UDP, a serial console — and nothing Bluetooth-specific. The engine and
/// the protocols are written against ``Link`` alone, so the same update code runs
/// unchanged over a radio, a socket in a VM, or the discrete-event simulator.
///
/// A link is packet-oriented: ``Link/send(_:)`` takes one packet of at most
/// ``LinkParameters/maximumPayload`` bytes and ``Link/receive()`` returns one
/// packet as the peer sent it. Links do not promise delivery: a BLE write
/// command can be dropped by a flooded peer, so reliability is the engine's job.
public protocol Link: AnyObject, Sendable {
    /// What the engine may assume about this link; fixed once connected.
    var parameters: LinkParameters { get }

    /// Sends one packet. Suspends while the transport's transmit queue is full
    /// (backpressure), so a sender can never outrun the link. Throws
    /// ``LinkError/payloadTooLarge(size:maximum:)`` for an oversized packet and
    /// ``LinkError/disconnected(_:)`` once the link is gone.
    func send(_ packet: [UInt8]) async throws(LinkError)

    /// Waits for the next packet from the peer. Cancelling the waiting task throws
    /// `CancellationError`-wrapped ``LinkError/cancelled`` and loses no packet, so a
    /// caller can race `receive()` against a timer.
    func receive() async throws(LinkError) -> [UInt8]

    /// Closes the link; pending and later calls throw ``LinkError/disconnected(_:)``.
    func close() async

    /// This link as a ``ChannelLink``, for protocols that span several characteristics.
    /// By default each message is framed (``FramedChannelLink``); a link that knows the
    /// characteristics (GATT) or has a framing of its own carries them itself.
    var channelLink: any ChannelLink { get }

    /// Called by a device half when it starts serving after a boot: a link whose framing
    /// keeps state per boot (legacy DFU's serial sequence numbers) starts afresh, as the
    /// device's transport does. A link that wraps another passes it on; most keep nothing.
    func deviceBooted()
}

extension Link {
    public var channelLink: any ChannelLink { FramedChannelLink(self) }
    public func deviceBooted() {}
}

/// What carries a link's channels, as a typed capability of the link: a host whose protocol
/// differs by transport (Nordic's serial bootloaders answer Get MTU and take object data as Write
/// requests; legacy DFU's HCI transport acknowledges frames and notifies nothing) asks the link,
/// instead of recognising a channel number only that transport would list. The link that frames
/// a line says what it is; a link that wraps another passes it on with the other ``LinkParameters``.
public struct LinkTransport: Sendable, Hashable, CustomStringConvertible {
    /// For logs: "Nordic serial DFU".
    public let name: String

    public init(_ name: String) { self.name = name }

    public var description: String { name }

    /// Characteristics, or a byte link that frames them (the simulator, UDP): the default.
    public static let characteristics = LinkTransport("characteristics")
}

/// What a link tells the engine about itself.
public struct LinkParameters: Sendable, Hashable, Codable {
    /// The largest packet ``Link/send(_:)`` accepts: ATT MTU − 3 for GATT writes,
    /// the CoC's SDU size, the UDP datagram limit.
    public var maximumPayload: Int
    /// The packet size a host streams data in: ``maximumPayload``, or less where the link carries
    /// a packet a little smaller in fewer pieces (an ATT write that fills whole link-layer
    /// fragments, `ATTLimits.fullFragmentValue(mtu:)`). Control messages may still use
    /// ``maximumPayload``.
    public var preferredPayload: Int
    /// True when ``Link/send(_:)`` returns only after the peer acknowledged the
    /// packet (ATT write requests); false for write commands and datagrams.
    public var acknowledgedWrites: Bool
    /// How the link was reached, for logs and reports (`sim://slow-flash`, `ble://…`).
    public var description: String
    /// True when every packet is a whole message of the protocol above, and the receiver never
    /// joins two (a UDP datagram; a serial frame put back together by its framing); false where a
    /// message may span packets that the receiver reassembles (GATT writes, notifications). A
    /// device reading a datagram cut short sees a message shorter than its header says, not the
    /// start of one whose rest is to come.
    public var carriesWholeMessages: Bool
    /// What carries the link's channels, for a host that speaks differently over a serial
    /// bootloader's framing than over characteristics. Not saved with a tuning: it is what the
    /// link is, not what was measured on it.
    public var transport: LinkTransport = .characteristics

    private enum CodingKeys: String, CodingKey {
        case maximumPayload, preferredPayload, acknowledgedWrites, description, carriesWholeMessages
    }

    public init(
        maximumPayload: Int, preferredPayload: Int? = nil, acknowledgedWrites: Bool = false, description: String,
        carriesWholeMessages: Bool = false, transport: LinkTransport = .characteristics
    ) {
        self.maximumPayload = maximumPayload
        self.preferredPayload = min(maximumPayload, max(1, preferredPayload ?? maximumPayload))
        self.acknowledgedWrites = acknowledgedWrites
        self.description = description
        self.carriesWholeMessages = carriesWholeMessages
        self.transport = transport
    }

    /// Data bytes per packet for a host that adds `overhead` bytes of its own: what
    /// ``preferredPayload`` leaves by default, or `asked` (an explicit packet size) as far as
    /// ``maximumPayload`` allows — a size asked for may go beyond whole link-layer fragments.
    public func dataPerPacket(after overhead: Int, asked: Int? = nil) -> Int {
        guard let asked else { return preferredPayload - overhead }
        return min(maximumPayload - overhead, asked)
    }
}

extension Link {
    /// The next packet, or nil when `timeout` passes first on `clock` (no packet is lost
    /// either way: ``receive()`` honours cancellation).
    public func receive(within timeout: Duration, clock: any BleotaClock) async throws(LinkError) -> [UInt8]? {
        try await receiving(within: timeout, clock: clock) { try await self.receive() }
    }
}

/// What `receive` returns, or nil when `timeout` passes first on `clock`: a link's errors as
/// they are, anything else (the waiting task cancelled) as ``LinkError/cancelled``.
func receiving<Value: Sendable>(
    within timeout: Duration, clock: any BleotaClock, _ receive: @escaping @Sendable () async throws -> Value
) async throws(LinkError) -> Value? {
    do {
        return try await withDeadline(timeout, clock: clock, operation: receive)
    } catch is DeadlineExceeded {
        return nil
    } catch let error as LinkError {
        throw error
    } catch {
        throw .cancelled
    }
}

/// Why a link operation failed.
public enum LinkError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The peer went away or the link was closed; the reason says which.
    case disconnected(String)
    /// A packet larger than the link carries.
    case payloadTooLarge(size: Int, maximum: Int)
    /// The waiting task was cancelled.
    case cancelled
    /// The device could not be reached at all (address wrong, not advertising, …).
    case unreachable(String)
    /// The operating system refused (errno text included).
    case system(String)
    /// The device demands security the link could not get (pairing failed, or
    /// could not authenticate); connecting again does not help.
    case security(PairingError)
    /// What was sent cannot travel on this link as it is: bytes that frame no ``ChannelMessage``
    /// given to a link that carries messages, or a packet on a channel ``ChannelFrame`` reserves.
    /// A bug in the caller, reported instead of the bytes being dropped or the process trapping.
    case notAMessage(String)

    public var description: String {
        switch self {
        case .disconnected(let why): return "link disconnected: \(why)"
        case .payloadTooLarge(let size, let maximum):
            return "packet of \(size) bytes exceeds the link's maximum payload of \(maximum) bytes"
        case .cancelled: return "link operation cancelled"
        case .unreachable(let why): return "device unreachable: \(why)"
        case .system(let why): return why
        case .security(let error): return error.description
        case .notAMessage(let why): return "not a message this link carries: \(why)"
        }
    }
}

/// Why the host is connecting, so a connector knows where to look: a device
/// that rebooted into its bootloader may advertise under another address
/// (Nordic's bootloaders use address + 1) or name.
public enum ConnectPurpose: String, Sendable, Hashable, Codable {
    case initial
    /// After ENTER_BOOTLOADER: look for the bootloader.
    case bootloader
    /// After activation: look for the application again.
    case application
    /// After a dropped link in the middle of a transfer.
    case resume
}

/// Finds a device and opens a ``Link`` to it, again and again: updates reboot
/// devices and links drop, so the engine reconnects through this.
public protocol DeviceConnector: Sendable {
    /// The address as the user gave it, for messages.
    var description: String { get }
    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link
    /// Connects to the device that advertises `name` (a bootloader a buttonless
    /// jump renamed, found by scanning); a connector that cannot see names
    /// connects as ``connect(for:timeout:)`` does.
    func connect(for purpose: ConnectPurpose, timeout: Duration, advertisedName name: String) async throws(LinkError) -> any Link
}

extension DeviceConnector {
    public func connect(for purpose: ConnectPurpose, timeout: Duration, advertisedName name: String) async throws(LinkError) -> any Link {
        try await connect(for: purpose, timeout: timeout)
    }
}
