/// What a host half does at each step of an update, for ``UpdateStateMachine/run(_:)``:
/// the hooks the engine's one lifecycle calls as the state machine asks.
///
/// A host half implements the I/O (connect, send the request, stream the image, read what
/// runs) and nothing of the sequence: which step follows which, a request repeated when its
/// answer was lost to the device's reset, the probe of what the device runs after a late
/// failure — those are the state machine's, the same for every protocol that runs on it.
public protocol UpdateLifecycleSteps {
    associatedtype Report

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
    /// Sends the image.
    mutating func transfer() async throws(TransferError)
    /// The device's verdict on what it received, and a detail for the error when it refused.
    mutating func verify() async throws(TransferError) -> (ok: Bool, detail: String)
    /// Asks the device to run the new image; false when its answer never came.
    mutating func activate() async throws(TransferError) -> Bool
    /// The version the device reports running, once it is back in its application.
    mutating func runningVersion() async throws(TransferError) -> String
    /// After a failure once the activation may have reached the device: reconnects and says
    /// what it runs; nil when it cannot be reached.
    mutating func probe() async -> UpdateStateMachine.DeviceReport?
    /// The update succeeded: the report, with whatever is open closed.
    mutating func finish() async -> Report
    /// The update failed with `error`: closes whatever is open.
    mutating func abandon(_ error: TransferError) async
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
                    event = .connected(try await steps.connect())
                case .enterBootloader:
                    event = try await steps.enterBootloader() ? .bootloaderEntered : .bootloaderRequestUnanswered
                case .reconnect(let mode):
                    event = .connected(try await steps.reconnect(expecting: mode))
                case .transfer:
                    try await steps.transfer()
                    event = .transferred
                case .verify:
                    let verdict = try await steps.verify()
                    event = .verified(ok: verdict.ok, detail: verdict.detail)
                case .activate:
                    event = try await steps.activate() ? .activated : .activateRequestUnanswered
                case .probe:
                    event = .probed(await steps.probe())
                case .confirm:
                    event = .confirmed(version: try await steps.runningVersion())
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
