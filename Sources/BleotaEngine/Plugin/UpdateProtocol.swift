import BleotaATT
import BleotaLink

/// An update protocol as a plug-in: everything bleota needs to know to flash,
/// transfer files to and simulate a device that speaks it.
///
/// A protocol is a value registered once in a ``ProtocolRegistry``; nothing
/// above it names it again. It brings:
///
/// - **Identity and detection** (``identity``): its name for `--protocol` and
///   `sim://…?protocol=`, the GATT services it is reached through, the
///   transports it runs on, and a test on an image file
///   (``imageAffinity(_:)``) so `flash` can pick it from the image alone.
/// - **Capabilities** (``capabilities``, ``flashModes``, ``tuningKnobs``): what
///   its host half can do and what each knob of ``TransferTuning`` means for
///   it, so the CLI offers only what the protocol can do and refuses the rest
///   with a message instead of ignoring it.
/// - **A host half** (``makeHost(_:)``): the ``ProtocolHost`` that drives an
///   update through the shared step, report and transfer machinery.
/// - **A device half** (``makeDevice(_:)``): the ``DeviceHalf`` that the
///   simulator, `bleota sim serve` and `bleota serve` host, modelled on the
///   firmware it stands for.
///
/// The sample package `samples/vendor-protocol` shows a protocol written
/// outside bleota's own sources; the DocC article "Writing an update protocol"
/// walks through it.
public protocol UpdateProtocol: Sendable {
    var identity: ProtocolIdentity { get }
    var capabilities: ProtocolCapabilities { get }
    /// The flash modes the host half supports; the first is the default.
    var flashModes: [FlashMode] { get }
    /// What each tuning knob means for this protocol, in one line each. A knob
    /// missing here has no meaning for it and is refused when given.
    var tuningKnobs: [TuningKnob: String] { get }
    /// The keys its device half accepts (in a `sim://` address, for `sim serve`),
    /// beyond those every simulated device has.
    var deviceOptions: [DeviceOptionSpec] { get }
    /// Whether its test transfers (`tune`) need a real image: its devices take
    /// nothing else (Nordic's bootloaders check an init packet, usually signed),
    /// so `tune` sends the image given without activating it.
    var testTransferNeedsImage: Bool { get }
    /// The keys its host half accepts (`flash --protocol-option KEY=VALUE`), for
    /// what only this protocol has (a name for Nordic's bootloader).
    var hostOptions: [HostOptionSpec] { get }

    /// How strongly an image file belongs to this protocol.
    func imageAffinity(_ probe: ImageProbe) -> ImageAffinity
    /// A line for the log when another protocol carries the image: a file beside it that this
    /// protocol would have read with it (a Nordic image's `.dat`) and that is therefore left
    /// unread, and why. Nil by default, and when there is no such file.
    func unreadCompanion(of probe: ImageProbe) -> String?
    /// Reads and checks an image before anything connects: a bad image, a hash
    /// that does not match or a signature that does not verify is refused here.
    func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage
    /// What `bleota image info` shows of an image in this protocol's own format
    /// (a package's parts, versions, hashes, signatures, checked against
    /// `request.keyPath` when given); nil for an image that is not (the command
    /// then shows it as a plain image). A description with
    /// ``ImageDescription/embedded`` set is metadata inside a plain image (an
    /// MCUboot header and TLVs), shown after the plain report. Every protocol is
    /// asked, so an implementation checks cheaply first that the file is its own.
    /// Unreadable input throws, as for `flash`.
    func describeImage(_ request: ImageRequest) throws(TransferError) -> ImageDescription?
    /// Puts this protocol's framing on a serial port's byte stream (SMP's console
    /// lines, Nordic's SLIP frames); both halves use it. Only serial transports
    /// ask: links that carry whole messages (GATT, UDP, the simulator) carry a
    /// protocol's messages as they are. By default a line is a message.
    func frame(serial lines: any DelimitedByteStream) -> any Link
    func makeHost(_ context: HostContext) -> any ProtocolHost
    func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf
}

extension UpdateProtocol {
    public var name: String { identity.name }
    public var deviceOptions: [DeviceOptionSpec] { [] }
    public var testTransferNeedsImage: Bool { false }
    public var hostOptions: [HostOptionSpec] { [] }
    public var flashModes: [FlashMode] { [.testAndConfirm] }
    public func frame(serial lines: any DelimitedByteStream) -> any Link { lines }
    public func describeImage(_ request: ImageRequest) throws(TransferError) -> ImageDescription? { nil }
    public func unreadCompanion(of probe: ImageProbe) -> String? { nil }

    /// Whether the device whose GATT database lists `services` speaks this protocol.
    public func recognises(services: [BluetoothUUID]) -> Bool {
        identity.gattServices.contains { service in services.contains(service.service) }
    }

    /// The message for a capability this protocol lacks, naming what it can do instead.
    public func unsupported(_ what: String) -> TransferError {
        TransferError(
            .unsupported, step: .load,
            "\(identity.displayName) (--protocol \(name)) cannot \(what): it can \(capabilities.summary)")
    }
}

/// Who a protocol is and how it is reached.
public struct ProtocolIdentity: Sendable, Hashable {
    /// The name for `--protocol` and `sim://…?protocol=`: lower case, no spaces.
    public var name: String
    /// For messages: "MCUmgr SMP", "bleota native".
    public var displayName: String
    /// One line for `--help` and `bleota protocols`.
    public var summary: String
    /// The GATT services a device offers it through, tried in order.
    public var gattServices: [GATTPacketService]
    /// The transports it runs over.
    public var transports: Set<TransportKind>
    /// The image formats it takes, for help texts ("bin, hex, srec", "MCUboot").
    public var imageFormats: [String]
    /// Transports of `transports` it is used over only when named (`--protocol`):
    /// what answers on a UDP port is taken to be MCUmgr unless said otherwise,
    /// though bleota's own protocol runs over UDP too.
    public var transportsWhenNamed: Set<TransportKind>

    public init(
        name: String, displayName: String, summary: String, gattServices: [GATTPacketService],
        transports: Set<TransportKind>, transportsWhenNamed: Set<TransportKind> = [], imageFormats: [String]
    ) {
        self.name = name
        self.displayName = displayName
        self.summary = summary
        self.gattServices = gattServices
        self.transports = transports
        self.transportsWhenNamed = transportsWhenNamed
        self.imageFormats = imageFormats
    }

    /// Whether it is a candidate over `transport` when no protocol was named.
    public func isDefault(over transport: TransportKind) -> Bool {
        transports.contains(transport) && !transportsWhenNamed.contains(transport)
    }
}

/// What a protocol's host half can do.
public struct ProtocolCapabilities: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Update firmware (`flash`).
    public static let flash = ProtocolCapabilities(rawValue: 1 << 0)
    /// Store a file on the device (`push`).
    public static let push = ProtocolCapabilities(rawValue: 1 << 1)
    /// Fetch a file from the device (`pull`).
    public static let pull = ProtocolCapabilities(rawValue: 1 << 2)
    /// Send test transfers the device checks and discards (`tune`).
    public static let testTransfer = ProtocolCapabilities(rawValue: 1 << 3)
    /// Read the device's image slots and mark one for test or confirm it (`image state`).
    public static let imageState = ProtocolCapabilities(rawValue: 1 << 4)
    /// Echo text (`echo`).
    public static let echo = ProtocolCapabilities(rawValue: 1 << 5)
    /// Reset the device (`reset`).
    public static let reset = ProtocolCapabilities(rawValue: 1 << 6)
    /// Erase the staging slot (`image erase`).
    public static let eraseStaging = ProtocolCapabilities(rawValue: 1 << 7)
    /// Send a delta patch against the image the device runs (``PreparedImage/deltaBase``, `flash --base`).
    public static let deltaFlash = ProtocolCapabilities(rawValue: 1 << 8)
    /// Refuse an image not newer than the one the device runs, the device checking it too
    /// (``PreparedImage/refusesDowngrade``, `flash --no-downgrade`; SMP's upload `upgrade` flag).
    public static let refuseDowngrade = ProtocolCapabilities(rawValue: 1 << 9)
    /// Update one of several images (cores) a device has, or all of a package's in one update
    /// (``ImageRequest/imageNumber``, `flash --image N`; MCUboot's image numbers).
    public static let multipleImages = ProtocolCapabilities(rawValue: 1 << 10)
    /// Send only to a device that runs one of ``PreparedImage/fromVersions`` (a campaign's
    /// `--from-version`), checked against the version the device reports before anything is sent.
    public static let versionCohort = ProtocolCapabilities(rawValue: 1 << 11)

    static let names: [(ProtocolCapabilities, String)] = [
        (.flash, "flash"), (.push, "push files"), (.pull, "pull files"), (.testTransfer, "tune"),
        (.imageState, "show and change image state"), (.echo, "echo"), (.reset, "reset"), (.eraseStaging, "erase its staging slot"), (.refuseDowngrade, "refuse a downgrade"),
        (.deltaFlash, "flash delta patches"), (.multipleImages, "update several images"),
        (.versionCohort, "update only given versions"),
    ]

    /// "flash, push files and tune".
    public var summary: String {
        let parts = Self.names.filter { contains($0.0) }.map(\.1)
        guard parts.count > 1 else { return parts.first ?? "nothing" }
        return parts.dropLast().joined(separator: ", ") + " and " + parts.last!
    }
}

/// How far `flash` goes after the transfer.
public enum FlashMode: String, Sendable, Hashable, Codable, CaseIterable {
    /// Transfer, verify, activate, check the device runs the new image, confirm it.
    case testAndConfirm = "test-and-confirm"
    /// Activate for one test boot; the bootloader reverts it at the next reset unless the application confirms it.
    case test
    /// Activate permanently (no revert possible).
    case confirm
    /// Transfer and verify only; the image waits in the staging slot.
    case upload = "upload-only"
}

/// The knobs of ``TransferTuning`` a protocol may give a meaning.
public enum TuningKnob: String, Sendable, Hashable, CaseIterable, Codable {
    case packetSize = "packet-size"
    case window
    case delay
    case ackInterval = "ack-interval"
    case ackTimeout = "ack-timeout"
    case retries
    case adaptive
    case compression
}

/// A key a protocol's host half accepts, with what its value must be: made by
/// ``ProtocolOption/hostSpec``, so the parse that reads a value is the option's own.
public struct HostOptionSpec: Sendable, Hashable, OptionSpec {
    public var key: String
    public var meaning: String
    let parse: @Sendable (String) throws(ProtocolOptionRefusal) -> any Sendable

    init(key: String, meaning: String, parse: @escaping @Sendable (String) throws(ProtocolOptionRefusal) -> any Sendable) {
        self.key = key
        self.meaning = meaning
        self.parse = parse
    }

    public func value(parsing text: String) throws(ProtocolOptionRefusal) -> any Sendable { try parse(text) }
    public static func == (a: Self, b: Self) -> Bool { a.key == b.key && a.meaning == b.meaning }
    public func hash(into hasher: inout Hasher) { hasher.combine(key) }
}

/// A key a protocol's simulated device accepts, with what its value must be: made by
/// ``ProtocolOption/deviceSpec``.
public struct DeviceOptionSpec: Sendable, Hashable, OptionSpec {
    /// The key in a `sim://` address.
    public var key: String
    public var meaning: String
    /// The generic `bleota sim serve` option that sets it (`buffer` for `--buffer`), if any.
    public var serveOption: String?
    let parse: @Sendable (String) throws(ProtocolOptionRefusal) -> any Sendable

    init(key: String, meaning: String, serveOption: String?, parse: @escaping @Sendable (String) throws(ProtocolOptionRefusal) -> any Sendable) {
        self.key = key
        self.meaning = meaning
        self.serveOption = serveOption
        self.parse = parse
    }

    public func value(parsing text: String) throws(ProtocolOptionRefusal) -> any Sendable { try parse(text) }
    public static func == (a: Self, b: Self) -> Bool { a.key == b.key && a.meaning == b.meaning && a.serveOption == b.serveOption }
    public func hash(into hasher: inout Hasher) { hasher.combine(key) }
}

/// The transports bleota carries protocols over.
public enum TransportKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// ATT/GATT over the LE fixed channel: the protocol's GATT service.
    case ble
    /// An LE credit-based channel (L2CAP CoC) carrying the protocol's packets directly.
    case creditChannel = "credit-channel"
    /// The built-in simulator's BLE link.
    case simulator
    /// One message per UDP datagram.
    case udp
    /// A serial port or pseudo-terminal.
    case serial
}
