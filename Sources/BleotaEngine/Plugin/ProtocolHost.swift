import BleotaLink
import Logging

/// The host half of a protocol: what `flash`, `push`, `pull`, `tune` and the
/// device-management commands call.
///
/// A host half is made per operation from a ``HostContext`` (connector, clock,
/// tuning, timeouts, logger, event sink) and is expected to be a thin shell
/// around a pure state machine, reporting its steps through an
/// ``OperationRecorder``. Operations a protocol does not declare in its
/// ``ProtocolCapabilities`` keep the default implementation, which refuses before connecting;
/// the declaration is the one the commands read, and a test holds every shipped protocol's
/// host to it (CapabilityAgreementTests).
public protocol ProtocolHost: Sendable {
    /// connect → (bootloader) → transfer → verify → activate → confirm, as far as `mode` goes.
    func flash(_ image: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport
    /// Stores `file` on the device as `name`; kept only if it verifies.
    func push(_ file: [UInt8], name: String) async throws(TransferError) -> UpdateReport
    /// Fetches `name`, checked against the device's hash before it is returned.
    func pull(_ name: String) async throws(TransferError) -> PulledFile
    /// Sends bytes the device checks and discards (for `tune`).
    func testTransfer(_ bytes: [UInt8]) async throws(TransferError) -> UpdateReport
    /// Sends a real image the way `flash` would but stops before anything is
    /// activated, leaving the device running what it ran (for `tune` with a
    /// protocol whose devices take only real, often signed, images:
    /// ``UpdateProtocol/testTransferNeedsImage``).
    func testTransfer(image: PreparedImage) async throws(TransferError) -> UpdateReport
    /// Reads the image slots; with a change, applies it first.
    func imageState(_ change: ImageStateChange?) async throws(TransferError) -> DeviceImageState
    func echo(_ text: String) async throws(TransferError) -> String
    func reset() async throws(TransferError)
    func eraseStaging() async throws(TransferError)
}

extension ProtocolHost {
    public func push(_ file: [UInt8], name: String) async throws(TransferError) -> UpdateReport { throw Self.refusal("push files") }
    public func pull(_ name: String) async throws(TransferError) -> PulledFile { throw Self.refusal("pull files") }
    public func testTransfer(_ bytes: [UInt8]) async throws(TransferError) -> UpdateReport { throw Self.refusal("run test transfers") }
    public func testTransfer(image: PreparedImage) async throws(TransferError) -> UpdateReport { try await testTransfer(image.bytes) }
    public func imageState(_ change: ImageStateChange?) async throws(TransferError) -> DeviceImageState {
        throw Self.refusal("show image state")
    }
    public func echo(_ text: String) async throws(TransferError) -> String { throw Self.refusal("echo") }
    public func reset() async throws(TransferError) { throw Self.refusal("reset the device") }
    public func eraseStaging() async throws(TransferError) { throw Self.refusal("erase its staging slot") }

    static func refusal(_ what: String) -> TransferError {
        TransferError(.unsupported, step: .connect, "this protocol cannot \(what)")
    }
}

/// What a host half is made from: the same for every protocol.
public struct HostContext: Sendable {
    /// The protocol's name, for reports.
    public var protocolName: String
    /// Finds the device and opens links to it (framed for the protocol), again after every reboot.
    public var connector: any DeviceConnector
    public var clock: any BleotaClock
    public var tuning: TransferTuning
    /// The knobs of ``tuning`` that were given (on the command line, or by a saved tuning);
    /// a protocol whose own defaults differ from ``TransferTuning``'s uses them for the rest.
    public var explicitKnobs: Set<TuningKnob>
    public var timeouts: StepTimeouts
    public var logger: Logger
    public var onEvent: @Sendable (UpdateEvent) -> Void
    /// The protocol's own host options (``UpdateProtocol/hostOptions``), parsed where they were given.
    public var options: ProtocolOptions
    /// The place among transfers sharing the device's radio that the operation's transfer step
    /// waits for (``OperationRecorder/enterTransfer()``): set by a fleet, nil otherwise.
    public var transferTurn: (any TransferTurn)?

    public init(
        protocolName: String, connector: any DeviceConnector, clock: any BleotaClock,
        tuning: TransferTuning = TransferTuning(), explicitKnobs: Set<TuningKnob> = [], timeouts: StepTimeouts = StepTimeouts(),
        logger: Logger = Logger(label: "bleota"), options: ProtocolOptions = ProtocolOptions(), transferTurn: (any TransferTurn)? = nil,
        onEvent: @escaping @Sendable (UpdateEvent) -> Void = { _ in }
    ) {
        self.options = options
        self.transferTurn = transferTurn
        self.protocolName = protocolName
        // Every link the update opens is the turn's to shorten while its transfer is the last on the radio.
        self.connector = transferTurn.map { TurnAdoptingConnector(connector: connector, turn: $0) } ?? connector
        self.clock = clock
        self.tuning = tuning
        self.explicitKnobs = explicitKnobs
        self.timeouts = timeouts
        self.logger = logger
        self.onEvent = onEvent
    }

    /// The packet size `--packet-size` asked for, or nil where the host chooses.
    public var askedPacketSize: Int? { explicitKnobs.contains(.packetSize) ? tuning.packetSize : nil }

    /// Tries of a whole transfer a protocol makes: `--retries` when given, else the protocol's own default.
    public func tries(default value: Int) -> Int {
        explicitKnobs.contains(.retries) ? max(1, tuning.maxRetries) : value
    }

    /// A link to the device, or the failure named for `step`: the connect timeout for the first
    /// connection, the reboot timeout for every later one (the device may be restarting).
    public func connect(_ purpose: ConnectPurpose, step: UpdateStep) async throws(TransferError) -> any Link {
        try await connect(purpose, step: step, timeout: purpose == .initial ? timeouts.connect : timeouts.reboot)
    }

    /// A recorder for one operation, stamped with this context's protocol, device and clock.
    public func recorder(_ operation: String) -> OperationRecorder {
        OperationRecorder(
            operation: operation, protocolName: protocolName, device: connector.description,
            clock: clock, transferTurn: transferTurn, onEvent: onEvent)
    }
}

/// A file fetched by `pull`, with its report.
public struct PulledFile: Sendable {
    public var bytes: [UInt8]
    public var report: UpdateReport
    public init(bytes: [UInt8], report: UpdateReport) {
        self.bytes = bytes
        self.report = report
    }
}

/// A device's image slots, as `image state` shows them.
public struct DeviceImageState: Sendable, Hashable, Codable {
    public var slots: [ImageSlotState]
    /// The bootloader's name and mode, when the device tells.
    public var bootloader: String?

    public init(slots: [ImageSlotState], bootloader: String? = nil) {
        self.slots = slots
        self.bootloader = bootloader
    }

    /// The slot the device runs.
    public var active: ImageSlotState? { slots.first(where: \.active) }
}

/// One image slot.
public struct ImageSlotState: Sendable, Hashable, Codable {
    public var image: Int
    public var slot: Int
    public var version: String
    public var hash: [UInt8]
    public var bootable: Bool
    public var pending: Bool
    public var confirmed: Bool
    public var active: Bool
    public var permanent: Bool

    public init(
        image: Int = 0, slot: Int, version: String, hash: [UInt8], bootable: Bool = true, pending: Bool = false,
        confirmed: Bool = false, active: Bool = false, permanent: Bool = false
    ) {
        self.image = image
        self.slot = slot
        self.version = version
        self.hash = hash
        self.bootable = bootable
        self.pending = pending
        self.confirmed = confirmed
        self.active = active
        self.permanent = permanent
    }
}

/// A change `image state` asks for.
public enum ImageStateChange: Sendable, Hashable {
    /// Mark the image with this hash for one test boot.
    case test(hash: [UInt8])
    /// Confirm the running image, or the one with this hash (making it permanent).
    case confirm(hash: [UInt8]?)
}

/// A host half made from a ``HostContext`` that reads what it needs from it: the connector,
/// the clock, the step timeouts, the device's description for messages, the logger and the
/// event sink, without each host forwarding them again.
public protocol ContextHost: ProtocolHost {
    var context: HostContext { get }
}

extension ContextHost {
    public var connector: any DeviceConnector { context.connector }
    public var clock: any BleotaClock { context.clock }
    public var timeouts: StepTimeouts { context.timeouts }
    /// The device as messages name it.
    public var device: String { context.connector.description }
    public var logger: Logger { context.logger }
    public var onEvent: @Sendable (UpdateEvent) -> Void { context.onEvent }
}
