import BleotaLink

/// The step timer and report builder every protocol's host half shares.
///
/// An operation enters steps as it goes (each change is reported once as an
/// ``UpdateEvent/step(_:)``) and ends with ``finish(bytes:transfer:statistics:tuning:)``,
/// which turns the time spent per step, the transfer's figures and the
/// statistics into the ``UpdateReport`` that `--json` prints. Keeping this in
/// one place is what makes every protocol's reports and progress look alike.
public struct OperationRecorder: Sendable {
    public let operation: String
    public let protocolName: String
    public let device: String
    public let clock: any BleotaClock
    private let onEvent: @Sendable (UpdateEvent) -> Void
    public let started: Duration
    public private(set) var currentStep: UpdateStep?
    private var stepStarted: Duration
    public private(set) var stepSeconds: [String: Double] = [:]
    public var versionBefore: String?
    public var versionAfter: String?
    /// The place among transfers sharing a radio this operation waits for before it transfers
    /// (a fleet's transfer gate); nil outside a fleet.
    public let transferTurn: (any TransferTurn)?
    /// Set while ``enterTransfer()`` enters the step, waited or not.
    private var enteringThroughGate = false

    public init(
        operation: String, protocolName: String, device: String, clock: any BleotaClock,
        transferTurn: (any TransferTurn)? = nil, onEvent: @escaping @Sendable (UpdateEvent) -> Void
    ) {
        self.transferTurn = transferTurn
        self.operation = operation
        self.protocolName = protocolName
        self.device = device
        self.clock = clock
        self.onEvent = onEvent
        started = clock.now
        stepStarted = started
    }

    /// Starts counting time in `step` without reporting it: for work before the
    /// device is involved (loading and checking an image), which the report
    /// accounts for but progress need not announce.
    public mutating func beginQuietly(_ step: UpdateStep) {
        closeStep()
        currentStep = step
        stepStarted = clock.now
    }

    /// Starts the transfer step, after waiting for a place among the transfers that share this
    /// device's radio (``transferTurn``; at once when there is none). Every protocol's host enters
    /// its transfer this way, when the device is ready for the bytes: a fleet then prepares the next
    /// devices while others transfer (BleotaFleet's `TransferGate`). Leaving the step gives the place back.
    ///
    /// Throws when a fleet withdrew the wait (``TransferTurn/wasWithdrawn``): a place is free on
    /// another adapter, and the update ends here, before any byte is sent, to start again there.
    public mutating func enterTransfer() async throws(TransferError) {
        guard currentStep != .transfer else { return }
        if let turn = transferTurn, !turn.isHeld {
            // The wait is not the current step's time: the report shows it on its own.
            let began = clock.now
            let placed = await turn.wait(clock: clock)
            let waited = clock.now - began
            if waited > .zero {
                stepSeconds[Self.transferWaitKey, default: 0] += waited.seconds
                stepStarted += waited
            }
            if turn.wasWithdrawn {
                throw TransferError(
                    .linkLost, step: .transfer,
                    "left the queue for a transfer place: another adapter has one free, and the update starts again there")
            }
            if !placed, let limit = turn.maximumWait, waited >= limit {
                onEvent(.note("waited \(Int(limit.seconds)) s for a transfer place; transferring beside the others rather than leave the device idle longer"))
            }
        }
        enteringThroughGate = true
        defer { enteringThroughGate = false }
        enter(.transfer)
    }

    /// Starts `step` (once: entering the current step again changes nothing). The transfer step is
    /// entered with ``enterTransfer()``.
    public mutating func enter(_ step: UpdateStep) {
        guard step != currentStep else { return }
        if step == .transfer, !enteringThroughGate, let transferTurn, !transferTurn.isHeld {
            // A protocol that skipped enterTransfer() would crowd the transfers of a fleet's adapter.
            onEvent(.note("the transfer began without waiting for a transfer place: its protocol should call OperationRecorder.enterTransfer()"))
        }
        closeStep()
        currentStep = step
        stepStarted = clock.now
        onEvent(.step(step))
    }

    /// ``enterTransfer()`` for a protocol that holds `link` open while it waits: a withdrawn wait
    /// closes the link before it throws, so the device is free to connect through another adapter.
    public mutating func enterTransfer(closing link: (any Link)?) async throws(TransferError) {
        do {
            try await enterTransfer()
        } catch {
            await link?.close()
            throw error
        }
    }

    /// The ``UpdateReport/stepSeconds`` key of the time spent waiting for a transfer place.
    public static let transferWaitKey = "transfer-wait"

    /// Ends the current step's timing; leaving the transfer step gives its place back.
    private mutating func closeStep() {
        if currentStep == .transfer { transferTurn?.release() }
        if let currentStep { stepSeconds[currentStep.rawValue, default: 0] += (clock.now - stepStarted).seconds }
    }

    /// The report of the operation so far; the current step's time is counted up to now.
    public mutating func finish(
        bytes: Int, transfer: TransferSummary?, statistics: TransferStatistics,
        tuning: TransferTuning
    ) -> UpdateReport {
        closeStep()
        currentStep = nil
        var report = UpdateReport(
            operation: operation, device: device, bytes: bytes,
            streamBytes: transfer?.streamBytes ?? bytes, compressed: transfer?.compressed ?? false,
            packetSize: transfer?.packetSize ?? 0, transferSeconds: transfer?.elapsed.seconds ?? 0,
            totalSeconds: (clock.now - started).seconds, statistics: statistics,
            stepSeconds: stepSeconds, tuning: tuning)
        report.delta = transfer?.delta == true ? true : nil
        report.protocolName = protocolName
        report.versionBefore = versionBefore
        report.versionAfter = versionAfter
        return report
    }
}

/// What a transfer step moved, for the report.
public struct TransferSummary: Sendable, Hashable {
    public var streamBytes: Int
    public var compressed: Bool
    /// The stream was a delta patch against the image the device ran.
    public var delta: Bool
    public var packetSize: Int
    public var elapsed: Duration
    public init(streamBytes: Int, compressed: Bool = false, delta: Bool = false, packetSize: Int, elapsed: Duration) {
        self.streamBytes = streamBytes
        self.compressed = compressed
        self.delta = delta
        self.packetSize = packetSize
        self.elapsed = elapsed
    }
}
