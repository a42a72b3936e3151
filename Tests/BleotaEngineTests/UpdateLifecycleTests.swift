import Testing

@testable import BleotaEngine

/// Steps that answer from a script and write down what the lifecycle asked of them.
struct ScriptedSteps: UpdateLifecycleSteps {
    var calls: [String] = []
    var entered: [UpdateStep] = []
    /// What each connect or reconnect finds, in order.
    var modes: [DeviceMode]
    /// Whether each enter-bootloader request is answered, in order.
    var bootloaderAnswers: [Bool] = [true]
    var activateAnswers: [Bool] = [true]
    var verdict = (ok: true, detail: "")
    var running: String? = "2.0"
    var tries = UpdateTries(limit: 1)
    /// What each try's transfer throws, in order, before the tries that succeed.
    var tryFailures: [TryFailure] = []
    var probeFinds: UpdateStateMachine.DeviceReport?
    /// What the device says of the image when it connects (a protocol whose devices report one).
    var targetAtConnect: UpdateStateMachine.DeviceReport?
    /// What each confirmation reports, in order, in place of ``running`` while any are left.
    var runningReports: [UpdateStateMachine.DeviceReport] = []
    /// Steps that throw, by name.
    var failing: [String: TransferError] = [:]
    var gateRefusal: TransferError?

    init(modes: [DeviceMode]) { self.modes = modes }

    mutating func call(_ name: String) throws(TransferError) {
        calls.append(name)
        if let error = failing[name] { throw error }
    }

    mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError) {
        entered.append(step)
        if case .transfer = action, let gateRefusal { throw gateRefusal }
    }
    mutating func connect() async throws(TransferError) -> DeviceMode {
        try call("connect")
        return modes.removeFirst()
    }
    mutating func enterBootloader() async throws(TransferError) -> Bool {
        try call("enterBootloader")
        return bootloaderAnswers.removeFirst()
    }
    mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
        try call("reconnect(\(mode.rawValue))")
        return modes.removeFirst()
    }
    mutating func transfer() async throws(TryFailure) {
        do throws(TransferError) { try call("transfer") } catch { throw .final(error) }
        if !tryFailures.isEmpty { throw tryFailures.removeFirst() }
    }
    mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String) {
        do throws(TransferError) { try call("verify") } catch { throw .final(error) }
        return verdict
    }
    mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {
        try call("retry(\(retry.reason))")
    }
    mutating func activate() async throws(TransferError) -> Bool {
        try call("activate")
        return activateAnswers.removeFirst()
    }
    mutating func runningVersion() async throws(TransferError) -> String? {
        try call("runningVersion")
        return running
    }
    mutating func reportRunning() async throws(TransferError) -> UpdateStateMachine.DeviceReport? {
        guard !runningReports.isEmpty else { return nil }
        try call("reportRunning")
        return runningReports.removeFirst()
    }
    mutating func probe() async -> UpdateStateMachine.DeviceReport? {
        calls.append("probe")
        return probeFinds
    }
    mutating func finish() async -> String {
        calls.append("finish")
        return "done"
    }
    mutating func abandon(_ error: TransferError) async { calls.append("abandon") }
}

/// The engine's one lifecycle: the state machine's actions performed through a host half's steps.
@Suite struct UpdateLifecycleTests {
    func run(_ steps: inout ScriptedSteps, applicationReceives: Bool = false, activates: Bool = true) async -> Result<String, TransferError> {
        var machine = UpdateStateMachine(expectedVersion: "2.0", applicationReceives: applicationReceives, activates: activates)
        do throws(TransferError) { return .success(try await machine.run(&steps)) } catch { return .failure(error) }
    }

    @Test func anApplicationIsTakenThroughEveryStepInOrder() async throws {
        var steps = ScriptedSteps(modes: [.application, .bootloader, .application])
        #expect(try await run(&steps).get() == "done")
        #expect(
            steps.calls == [
                "connect", "enterBootloader", "reconnect(bootloader)", "transfer", "verify", "activate", "reconnect(application)", "runningVersion",
                "finish",
            ])
        #expect(steps.entered == [.connect, .enterBootloader, .reconnect, .transfer, .verify, .activate, .confirm, .confirm, .confirm])
    }

    @Test func aBootloaderRequestWhoseAnswerWasLostIsSentAgainWhenTheDeviceStayed() async throws {
        var steps = ScriptedSteps(modes: [.application, .application, .bootloader, .application])
        steps.bootloaderAnswers = [false, true]
        #expect(try await run(&steps).get() == "done")
        #expect(steps.calls.prefix(5) == ["connect", "enterBootloader", "reconnect(bootloader)", "enterBootloader", "reconnect(bootloader)"])
    }

    @Test func aFailureBeforeTheActivationEndsTheUpdateNamingItsStep() async throws {
        var steps = ScriptedSteps(modes: [.bootloader])
        steps.failing["transfer"] = TransferError(.linkLost, step: .transfer, "the link dropped")
        let error = await run(&steps).failure
        #expect(error?.step == .transfer && error?.message == "the link dropped")
        #expect(error?.outcome == nil)
        #expect(steps.calls == ["connect", "transfer", "abandon"], "no probe: the device never got the activation")
    }

    @Test func aRefusedImageIsNeverActivated() async throws {
        var steps = ScriptedSteps(modes: [.bootloader])
        steps.verdict = (false, "hash mismatch")
        let error = await run(&steps).failure
        #expect(error?.code == .verificationFailed)
        #expect(error?.message == "the device rejected the image (hash mismatch); it was not activated and the old firmware still runs")
        #expect(!steps.calls.contains("activate"))
    }

    @Test func aFailureAfterTheActivationIsProbedAndSaysWhatRuns() async throws {
        var steps = ScriptedSteps(modes: [.bootloader])
        steps.failing["reconnect(application)"] = TransferError(.timeout, step: .confirm, "the device did not come back")
        steps.probeFinds = UpdateStateMachine.DeviceReport(mode: .application, version: "1.0")
        let error = await run(&steps).failure
        #expect(error?.outcome == .oldImage("1.0"))
        #expect(steps.calls.suffix(3) == ["reconnect(application)", "probe", "abandon"])
    }

    @Test func aProbeThatFindsTheNewImageRunningEndsInSuccess() async throws {
        var steps = ScriptedSteps(modes: [.bootloader])
        steps.failing["reconnect(application)"] = TransferError(.timeout, step: .confirm, "the answer was lost")
        steps.probeFinds = UpdateStateMachine.DeviceReport(mode: .application, version: "2.0")
        #expect(try await run(&steps).get() == "done")
        #expect(steps.calls.suffix(2) == ["probe", "finish"])
    }

    @Test func aRefusalAtTheTransferGateEndsTheUpdateAsItIs() async throws {
        var steps = ScriptedSteps(modes: [.bootloader])
        steps.gateRefusal = TransferError(.timeout, step: .transfer, "the fleet withdrew the wait")
        let error = await run(&steps).failure
        #expect(error?.message == "the fleet withdrew the wait")
        #expect(steps.calls == ["connect"], "neither a transfer nor an abandon: the gate's error is thrown as it is")
    }
}

extension UpdateLifecycleTests {
    @Test func aTryThatFailsIsMadeAgainAfterTheHostGetsReadyAndCountsTowardsTheLimit() async throws {
        var steps = ScriptedSteps(modes: [.bootloader, .application])
        steps.tries = UpdateTries(limit: 3)
        steps.tryFailures = [.retry("a block was lost"), .retry("the link dropped", linkDropped: true)]
        #expect(try await run(&steps).get() == "done")
        #expect(
            steps.calls == [
                "connect", "transfer", "retry(a block was lost)", "transfer", "retry(the link dropped)", "transfer", "verify", "activate",
                "reconnect(application)", "runningVersion", "finish",
            ])
        #expect(steps.entered.prefix(5) == [.connect, .transfer, .transfer, .transfer, .verify], "each try enters the transfer through the gate again")
    }

    @Test func triesThatRunOutEndTheUpdateBeforeAnyActivationSayingTheOldImageRuns() async throws {
        var steps = ScriptedSteps(modes: [.bootloader])
        steps.tries = UpdateTries(limit: 2)
        steps.tryFailures = [.retry("a block was lost"), .retry("a block was lost again")]
        let error = await run(&steps).failure
        #expect(error?.message == "the image did not arrive whole in 2 tries (a block was lost again)")
        #expect(error?.outcome == .oldImage("its old image"))
        #expect(steps.calls == ["connect", "transfer", "retry(a block was lost)", "transfer", "abandon"])
    }

    @Test func aTryThatMayHaveBeenTakenLeavesWhatRunsUnknownWhenTheTriesRunOut() async throws {
        var steps = ScriptedSteps(modes: [.bootloader])
        steps.tries = UpdateTries(limit: 2)
        steps.tryFailures = [.retry("END's answer was lost", mayHaveActivated: true), .retry("a block was lost")]
        let error = await run(&steps).failure
        #expect(error?.outcome == .unknown)
    }

    @Test func anApplicationThatTakesTheImageItselfIsSentItWithNoBootloaderToEnter() async throws {
        var steps = ScriptedSteps(modes: [.application, .application])
        steps.running = nil
        #expect(try await run(&steps, applicationReceives: true).get() == "done")
        #expect(
            steps.calls == [
                "connect", "transfer", "verify", "activate", "reconnect(application)", "runningVersion", "finish",
            ], "a device that does not say what it runs is confirmed by coming back")
    }

    @Test func aLateFailureThatSaysWhatRunsIsNotProbed() async throws {
        var steps = ScriptedSteps(modes: [.bootloader, .application])
        var refused = TransferError(.deviceRefused, step: .activate, "the device refused Enable Image")
        refused.outcome = .oldImage("1.0")
        steps.failing["runningVersion"] = refused
        let error = await run(&steps).failure
        #expect(error == refused)
        #expect(steps.calls.suffix(2) == ["runningVersion", "abandon"])
    }
}

/// A protocol whose devices say what they hold of the image (MCUboot's slots), on the same lifecycle.
extension UpdateLifecycleTests {
    typealias Report = UpdateStateMachine.DeviceReport

    @Test func aDeviceThatAlreadyRunsTheImageIsNotSentItOnlyConfirmed() async throws {
        var steps = ScriptedSteps(modes: [.application])
        steps.targetAtConnect = Report(mode: .application, version: "2.0", target: .running(confirmationOwed: true))
        steps.runningReports = [Report(mode: .application, version: "2.0", target: .running(confirmationOwed: false))]
        #expect(try await run(&steps, applicationReceives: true).get() == "done")
        #expect(steps.calls == ["connect", "reportRunning", "finish"])

        var settled = ScriptedSteps(modes: [.application])
        settled.targetAtConnect = Report(mode: .application, version: "2.0", target: .running(confirmationOwed: false))
        #expect(try await run(&settled, applicationReceives: true).get() == "done")
        #expect(settled.calls == ["connect", "finish"])
    }

    @Test func anUploadThatOnlyStagesTheImageEndsAtItsVerification() async throws {
        var steps = ScriptedSteps(modes: [.application])
        #expect(try await run(&steps, applicationReceives: true, activates: false).get() == "done")
        #expect(steps.calls == ["connect", "transfer", "verify", "finish"])
    }

    @Test func anImageHeldButNotRunningAfterTheActivationIsActivatedAgain() async throws {
        var steps = ScriptedSteps(modes: [.application, .application, .application])
        steps.activateAnswers = [true, true]
        steps.runningReports = [
            Report(mode: .application, version: "1.0", target: .held),
            Report(mode: .application, version: "2.0", target: .running(confirmationOwed: false)),
        ]
        #expect(try await run(&steps, applicationReceives: true).get() == "done")
        #expect(
            steps.calls == [
                "connect", "transfer", "verify", "activate", "reconnect(application)", "reportRunning", "activate", "reconnect(application)",
                "reportRunning", "finish",
            ])
    }

    @Test func anImageThatStaysHeldEndsOnceTheRepeatsRunOutSayingTheOldImageRuns() async throws {
        var steps = ScriptedSteps(modes: Array(repeating: .application, count: 4))
        steps.activateAnswers = [true, true, true]
        let held = Report(mode: .application, version: "1.0", target: .held, detail: "the image is still pending after 3 resets")
        steps.runningReports = [held, held, held]
        let error = await run(&steps, applicationReceives: true).failure
        #expect(steps.calls.filter { $0 == "activate" }.count == 1 + UpdateStateMachine.defaultMaximumRepeats)
        #expect(error?.code == .confirmFailed && error?.message == "the image is still pending after 3 resets")
        #expect(error?.outcome == .oldImage("1.0"))
    }

    @Test func aProbeReportDecidesWhatIsRepeated() async throws {
        // The confirmation's answer was lost and the image runs unconfirmed: confirm again.
        var steps = ScriptedSteps(modes: [.application, .application])
        steps.failing["runningVersion"] = TransferError(.timeout, step: .confirm, "no answer to the confirm")
        steps.probeFinds = Report(mode: .application, version: "2.0", target: .running(confirmationOwed: true))
        let owed = await run(&steps, applicationReceives: true).failure
        #expect(steps.calls.suffix(6) == ["probe", "runningVersion", "probe", "runningVersion", "probe", "abandon"])
        #expect(steps.calls.filter { $0 == "probe" }.count == 1 + UpdateStateMachine.defaultMaximumRepeats)
        #expect(owed?.outcome == .newImageUnconfirmed, "the repeats ran out with the image running unconfirmed")

        // A mark that never arrived: the image is held, so the activation is made again.
        var held = ScriptedSteps(modes: [.application, .application])
        held.activateAnswers = [true, true, true]
        held.failing["reconnect(application)"] = TransferError(.timeout, step: .reconnect, "the device did not come back")
        held.probeFinds = Report(mode: .application, version: "1.0", target: .held)
        _ = await run(&held, applicationReceives: true)
        #expect(held.calls.prefix(7) == ["connect", "transfer", "verify", "activate", "reconnect(application)", "probe", "activate"])

        // The image is gone: the failure says the old image runs.
        var absent = ScriptedSteps(modes: [.application])
        absent.failing["reconnect(application)"] = TransferError(.timeout, step: .reconnect, "the device did not come back")
        absent.probeFinds = Report(mode: .application, version: "1.0", target: .absent)
        let gone = await run(&absent, applicationReceives: true).failure
        #expect(gone?.outcome == .oldImage("1.0") && gone?.message == "the device did not come back")
        #expect(absent.calls.suffix(2) == ["probe", "abandon"])
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
