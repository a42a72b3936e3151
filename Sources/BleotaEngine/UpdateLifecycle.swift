import BleotaLink

/// What a host half does at each step of an update, for ``UpdateStateMachine/run(_:)``:
/// the hooks the engine's one lifecycle calls as the state machine asks.
///
/// A host half implements the I/O (connect, send the request, stream the image, read what
/// runs) and nothing of the sequence: which step follows which, a request repeated when its
/// answer was lost to the device's reset, the probe of what the device runs after a late
/// failure, the tries of a transfer that did not arrive whole — those are the engine's, the
/// same for every protocol that runs on it.
///
/// The transfer and its verification are one try (``tries``): a protocol that cannot resend
/// inside an upload (SUOTA, TI OAD, Espressif's BLE OTA) throws ``TryFailure/again(_:)`` from
/// either, and the engine gets it ready with ``retry(after:)`` and sends again, up to the limit.
public protocol UpdateLifecycleSteps {
    associatedtype Report

    /// The tries of the transfer with its verification: the limit, and whether one may have
    /// made the device take the image (what a failure then says it runs).
    var tries: UpdateTries { get set }

    /// Before each action: progress, and for ``UpdateStateMachine/Action/transfer`` the
    /// fleet's transfer gate. An error thrown here ends the update as it is, unprobed.
    mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError)
    /// Connects; what the device runs.
    mutating func connect() async throws(TransferError) -> DeviceMode
    /// Asks the device to enter its bootloader; false when its answer never came (the link
    /// dropped, or it timed out), which the reconnect that follows then explains.
    mutating func enterBootloader() async throws(TransferError) -> Bool
    /// Connects again after a reset, looking for the device in `mode`; what it runs.
    mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode
    /// Sends the image (one try of it).
    mutating func transfer() async throws(TryFailure)
    /// The device's verdict on what it received, and a detail for the error when it refused.
    mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String)
    /// Between two tries: the note, the reconnect, a slower pace.
    mutating func retry(after retry: TryFailure.Retry) async throws(TransferError)
    /// The error once `attempts` tries failed, the last for `retry`'s reason.
    mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError
    /// Asks the device to run the new image; false when its answer never came.
    mutating func activate() async throws(TransferError) -> Bool
    /// The version the device reports running, once it is back in its application; nil for a
    /// protocol whose devices do not say (its coming back is then the confirmation).
    mutating func runningVersion() async throws(TransferError) -> String?
    /// After a failure once the activation may have reached the device: reconnects and says
    /// what it runs; nil when it cannot be reached.
    mutating func probe() async -> UpdateStateMachine.DeviceReport?
    /// ``probe()``, told the failure it follows (for a note that names it). The default asks ``probe()``.
    mutating func probe(after error: TransferError) async -> UpdateStateMachine.DeviceReport?
    /// What the device said of the update's image when it connected, for a protocol whose
    /// devices report a ``UpdateStateMachine/TargetImage``: one that already runs it is not sent
    /// it again. The default, nil, goes by the mode ``connect()`` returned.
    var targetAtConnect: UpdateStateMachine.DeviceReport? { get }
    /// What the device says of the update's image once it is back from the activation, for a
    /// protocol whose devices report a ``UpdateStateMachine/TargetImage`` (MCUboot's slots: the
    /// image running, confirmed or not, held but not running, or gone); asked in place of
    /// ``runningVersion()``, and it performs the confirmation the mode asks for. The default,
    /// nil, lets the engine ask ``runningVersion()``.
    mutating func reportRunning() async throws(TransferError) -> UpdateStateMachine.DeviceReport?
    /// The update succeeded: the report, with whatever is open closed.
    mutating func finish() async -> Report
    /// The update failed with `error`: closes whatever is open.
    mutating func abandon(_ error: TransferError) async
}

extension UpdateLifecycleSteps {
    /// A device that takes the image in its application, or whose connect found its bootloader
    /// already, has nothing to enter: it is ready as it is.
    public mutating func enterBootloader() async throws(TransferError) -> Bool { true }
    /// A wire whose device gives its verdict inside the transfer (the answer to its last packet,
    /// a CRC it checks, or nothing but its restart) has nothing more to ask: the transfer's end
    /// was the verification.
    public mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String) { (true, "") }
    /// A protocol whose devices cannot say what they run: a failure after the activation leaves
    /// it unknown, which is what the update then reports.
    public mutating func probe() async -> UpdateStateMachine.DeviceReport? { nil }
    public mutating func probe(after error: TransferError) async -> UpdateStateMachine.DeviceReport? { await probe() }
    public var targetAtConnect: UpdateStateMachine.DeviceReport? { nil }
    public mutating func reportRunning() async throws(TransferError) -> UpdateStateMachine.DeviceReport? { nil }

    /// A protocol that makes one try has nothing to get ready.
    public mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {}

    public mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
        TransferError(.verificationFailed, step: .transfer, "the image did not arrive whole in \(attempts) tries (\(retry.reason))")
    }
}

extension UpdateStateMachine {
    /// Runs the update to its end, performing each action with `steps` and feeding what they
    /// return back as the next event; a step's error is an event too (``Event/failed(_:)``),
    /// which the machine answers with a probe or a failure.
    public mutating func run<Steps: UpdateLifecycleSteps>(_ steps: inout Steps) async throws(TransferError) -> Steps.Report {
        var action = handle(.start)
        while true {
            try await steps.entering(step, for: action)
            if case .fail(let error) = action {
                await steps.abandon(error)
                throw error
            }
            let event: Event
            do throws(TransferError) {
                switch action {
                case .connect:
                    let mode = try await steps.connect()
                    event = steps.targetAtConnect.map { .reported($0) } ?? .connected(mode)
                case .enterBootloader:
                    event = try await steps.enterBootloader() ? .bootloaderEntered : .bootloaderRequestUnanswered
                case .reconnect(let mode):
                    event = .connected(try await steps.reconnect(expecting: mode))
                case .transfer:
                    let verdict = try await Self.transferAndVerify(&steps)
                    // The verification was entered inside the try: what the machine asks next is its verdict.
                    let next = handle(.transferred)
                    guard next == .verify else {
                        action = next
                        continue
                    }
                    event = .verified(ok: verdict.ok, detail: verdict.detail)
                case .verify:
                    // Reached only through .transfer, which verifies inside each try.
                    let verdict = try await Self.transferAndVerify(&steps, transferring: false)
                    event = .verified(ok: verdict.ok, detail: verdict.detail)
                case .activate:
                    event = try await steps.activate() ? .activated : .activateRequestUnanswered
                case .probe:
                    // The machine asks for a probe only while probing after a failure.
                    if case .probing(let error) = state {
                        event = .probed(await steps.probe(after: error))
                    } else {
                        event = .probed(await steps.probe())
                    }
                case .confirm:
                    if let report = try await steps.reportRunning() {
                        event = .reported(report)
                    } else {
                        event = .confirmed(version: try await steps.runningVersion())
                    }
                case .finish:
                    return await steps.finish()
                case .fail(let error):
                    // Handled before the switch; the machine answers it again with itself.
                    throw error
                }
            } catch {
                action = handle(.failed(error))
                continue
            }
            action = handle(event)
        }
    }
}

extension UpdateStateMachine {
    /// The transfer and its verification, tried up to the steps' limit (``UpdateTries``).
    static func transferAndVerify<Steps: UpdateLifecycleSteps>(
        _ steps: inout Steps, transferring: Bool = true
    ) async throws(TransferError) -> (ok: Bool, detail: String) {
        var tries = steps.tries
        defer { steps.tries = tries }
        return try await tries.run { (_: Int) async throws(TryFailure) -> (ok: Bool, detail: String) in
            if transferring {
                try await steps.transfer()
                do throws(TransferError) { try await steps.entering(.verify, for: .verify) } catch { throw .final(error) }
            }
            return try await steps.verify()
        } between: { (retry: TryFailure.Retry) async throws(TransferError) in
            try await steps.retry(after: retry)
            try await steps.entering(.transfer, for: .transfer)
        } exhausted: { retry, attempts in
            await steps.triesExhausted(retry, attempts: attempts)
        }
    }
}

/// Steps whose progress an ``OperationRecorder`` keeps, as most host halves' do: entering a
/// step is the recorder's (the transfer through the fleet's gate, closing `link` if a fleet
/// withdraws the wait), so a host half writes only its I/O.
public protocol RecordedLifecycleSteps: UpdateLifecycleSteps {
    var recorder: OperationRecorder { get set }
    /// The link open now, if any: closed when a fleet withdraws the transfer's wait.
    var link: (any Link)? { get }
}

extension RecordedLifecycleSteps {
    /// Closes the link open now.
    public mutating func abandon(_ error: TransferError) async {
        await link?.close()
    }

    public mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError) {
        switch action {
        case .transfer: try await recorder.enterTransfer(closing: link)
        // A failure keeps the step it happened in; a probe reports under it.
        case .fail, .probe, .finish: break
        default: recorder.enter(step)
        }
    }
}

/// Steps whose device says nothing of what it runs (SUOTA, Espressif's BLE OTA): finding it
/// again in its application after the activation is the confirmation, so the reconnect is the
/// engine's and declaring the conformance is all a host half writes of it.
public protocol SilentReturnSteps: RecordedLifecycleSteps {
    /// Where the device is looked for again.
    var context: HostContext { get }
}

extension SilentReturnSteps {
    /// Finds the device again in its application and lets it go: there is nothing to read.
    public mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
        try await context.reconnect(after: nil, expecting: .application).close()
        return .application
    }

    /// Nothing: the device does not say (its coming back was the confirmation).
    public mutating func runningVersion() async throws(TransferError) -> String? { nil }
}
