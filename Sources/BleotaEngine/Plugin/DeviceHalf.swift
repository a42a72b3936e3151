import BleotaLink

/// The device half of a protocol: a model of the firmware that speaks it,
/// hosted by the simulator, `bleota sim serve` and `bleota serve` alike.
///
/// It keeps its own storage (what survives a reboot) and RAM (what does not),
/// answers on whatever ``/BleotaLink/Link`` it is given, and asks its host to reboot it
/// through the ``DeviceEnvironment``, which also supplies time and the costs
/// of processing and flash. Its rules should be the real firmware's: what it
/// refuses, when it activates, what it does at boot.
public protocol DeviceHalf: AnyObject, Sendable {
    /// Application or bootloader: the simulator advertises a device in its
    /// bootloader at address + 1 when the protocol's bootloaders do that.
    var mode: DeviceMode { get async }
    /// The running firmware's version, for logs and `serve`'s messages.
    var runningVersion: String { get async }
    /// Serves one connection until the link drops (or the device reboots).
    func serve(_ link: any Link, environment: DeviceEnvironment) async
    /// Power-up after a reset or power loss: RAM is gone, flash decides.
    func powerCycle() async
    /// Whether its bootloader advertises at the application's address rather
    /// than at address + 1 (a Nordic bootloader entered by a bonded peer).
    var bootloaderKeepsAddress: Bool { get async }
    /// The name it advertises now, when the protocol decides it (a Nordic
    /// bootloader's "DfuTarg", or the name a buttonless jump set); nil for the host's default.
    var advertisedName: String? { get async }
    /// For a protocol of several characteristics: the channels its firmware offers now
    /// (an application's buttonless one, a bootloader's control point and packet), so
    /// `bleota serve` builds that GATT database; nil for all of them.
    var offeredChannels: [UInt8]? { get async }
    /// The values of its readable channels now (legacy DFU's revision: 0x0001 in the
    /// application, 0x0008 in the bootloader), which `bleota serve` puts in its GATT
    /// database for the host to read.
    var readableValues: [UInt8: [UInt8]] { get async }
    /// What it holds and runs: how an update ended, seen from the device (the fault
    /// matrix and tests judge every protocol's endings by it, without knowing the protocol).
    var firmware: FirmwareState { get async }
    /// What its firmware does with a write that finds its receive queue full: whether a slow device
    /// loses writes or slows its link. Fixed for a firmware, so asked without waiting.
    var whenQueueFull: FullQueueHandling { get }
}

/// What a device holds and runs, as an update's outcome goes.
public struct FirmwareState: Sendable, Hashable {
    /// The image it runs (in its bootloader: the one it would start); nil when it has none
    /// and its bootloader waits for one.
    public var running: [UInt8]?
    /// False for an image on trial that the bootloader reverts at the next reset unless confirmed (MCUboot's test).
    public var confirmed: Bool
    /// An image that replaces the running one at the next reset (MCUboot's pending swap).
    public var pending: [UInt8]?
    /// The version the device keeps for its image, where the protocol has one apart from the bytes.
    public var version: String?
    /// Application, or waiting in its bootloader.
    public var mode: DeviceMode

    public init(running: [UInt8]?, confirmed: Bool = true, pending: [UInt8]? = nil, version: String? = nil, mode: DeviceMode = .application) {
        self.running = running
        self.confirmed = confirmed
        self.pending = pending
        self.version = version
        self.mode = mode
    }
}

extension DeviceHalf {
    public var bootloaderKeepsAddress: Bool { false }
    public var advertisedName: String? { nil }
    public var offeredChannels: [UInt8]? { nil }
    public var readableValues: [UInt8: [UInt8]] { [:] }
    public var whenQueueFull: FullQueueHandling { .drop }
}

/// What a device half needs from the world around it: time, costs, reboots.
public struct DeviceEnvironment: Sendable {
    public var clock: any BleotaClock
    /// CPU time to take in one packet of `bytes` bytes (the receive buffer slot stays
    /// occupied meanwhile, which is how a slow device ends up dropping packets).
    public var processingTime: @Sendable (_ bytes: Int) -> Duration
    public var flashPageSize: Int
    public var eraseTimePerPage: Duration
    /// Drops the connection and restarts the device (calling its ``DeviceHalf/powerCycle()``);
    /// returns once the connection is gone.
    public var reboot: @Sendable (RebootRequest) async -> Void

    public init(
        clock: any BleotaClock, processingTime: @escaping @Sendable (Int) -> Duration = { _ in .zero },
        flashPageSize: Int = 4096, eraseTimePerPage: Duration = .zero,
        reboot: @escaping @Sendable (RebootRequest) async -> Void
    ) {
        self.clock = clock
        self.processingTime = processingTime
        self.flashPageSize = flashPageSize
        self.eraseTimePerPage = eraseTimePerPage
        self.reboot = reboot
    }

    /// The next request to a protocol spread over characteristics (a ``/BleotaLink/ChannelLink``),
    /// once the device has spent its processing time on it: a packet written to a channel, or a
    /// read of one. A directory query is answered with `channels` on the way. Nil once the link is gone.
    public func nextChannelRequest(from link: any Link, channels: @Sendable () async -> [UInt8]) async -> ChannelMessage? {
        let channelLink = link.channelLink
        while true {
            let message: ChannelMessage
            do { message = try await channelLink.receiveMessage() } catch { return nil }
            let cost = processingTime(message.framedSize)
            if cost > .zero { try? await clock.sleep(for: cost) }
            switch message {
            case .packet, .read: return message
            case .directoryQuery:
                do { try await channelLink.send(.directory(await channels())) } catch { return nil }
            // Answers are a host's to receive: a device ignores them.
            case .directory, .writeResult: continue
            }
        }
    }

    /// Flash programming time per byte, at roughly one page erase per page written.
    public var writeTimePerByte: Duration {
        flashPageSize > 0 ? eraseTimePerPage / flashPageSize : .zero
    }
}

/// Why and for how long a device goes away.
public struct RebootRequest: Sendable, Hashable {
    /// It was asked to enter its bootloader.
    public var toBootloader: Bool
    /// Time away beyond the ordinary reboot (an MCUboot swap, say).
    public var extraDowntime: Duration

    public init(toBootloader: Bool = false, extraDowntime: Duration = .zero) {
        self.toBootloader = toBootloader
        self.extraDowntime = extraDowntime
    }
}

/// How to make a device half: what every simulated device has, plus the
/// protocol's own keys.
public struct DeviceConfiguration: Sendable {
    /// The name it advertises.
    public var name: String
    /// The firmware version it starts with.
    public var initialVersion: String
    /// Bytes its image slot holds.
    public var slotSize: Int
    /// Packets its receive buffer holds.
    public var bufferCount: Int
    /// The largest packet its link carries (ATT MTU − 3 on BLE).
    public var maximumPacket: Int
    /// Files it starts with, by plain name (a protocol puts them where its file system keeps them).
    public var files: [String: [UInt8]]
    /// The protocol's own keys (``UpdateProtocol/deviceOptions``), parsed where they were given.
    public var options: ProtocolOptions

    public init(
        name: String = "bleota-sim", initialVersion: String = "1.0.0", slotSize: Int = 1 << 20, bufferCount: Int = 32,
        maximumPacket: Int = 244, files: [String: [UInt8]] = [:], options: ProtocolOptions = ProtocolOptions()
    ) {
        self.name = name
        self.initialVersion = initialVersion
        self.slotSize = slotSize
        self.bufferCount = bufferCount
        self.maximumPacket = maximumPacket
        self.files = files
        self.options = options
    }

    /// A file every simulated device starts with, so `pull` has something to fetch.
    public static let welcomeFile = (name: "hello.txt", bytes: Array("Hello from the bleota simulator.\n".utf8))
}

/// A device option that does not parse or is out of range, said in one line:
/// the key, and what is wrong with the value and what to use instead.
public struct DeviceConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var key: String
    public var problem: String
    public init(key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }
    public var description: String { "\(key) \(problem)" }
}
