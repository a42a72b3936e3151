import Testing

@testable import BleotaEngine

@Suite struct UpdateStateMachineTests {
    typealias Machine = UpdateStateMachine

    /// Walks a machine through `events`, returning the actions in order.
    func run(_ events: [Machine.Event], version: String = "2.0") -> (Machine, [Machine.Action]) {
        var machine = Machine(expectedVersion: version)
        var actions: [Machine.Action] = []
        for event in events { actions.append(machine.handle(event)) }
        return (machine, actions)
    }

    @Test func fullUpdateFromApplicationMode() {
        let (machine, actions) = run([
            .start, .connected(.application), .bootloaderEntered, .connected(.bootloader), .transferred,
            .verified(ok: true, detail: "ok"), .activated, .connected(.application), .confirmed(version: "2.0"),
        ])
        #expect(
            actions == [
                .connect, .enterBootloader, .reconnect(expecting: .bootloader), .transfer, .verify,
                .activate, .reconnect(expecting: .application), .confirm, .finish,
            ])
        #expect(machine.state == .done)
    }

    /// A device that says what it holds of the image (MCUboot's slots), as rows: already running
    /// it at connect, an upload that only stages it, and what a report after the activation asks.
    @Test func reportsOfTheImageSkipRepeatOrEndTheUpdate() {
        typealias Report = Machine.DeviceReport
        var settled = Machine(expectedVersion: "2.0", applicationReceives: true)
        _ = settled.handle(.start)
        #expect(settled.handle(.reported(Report(mode: .application, version: "2.0", target: .running(confirmationOwed: false)))) == .finish)
        var owed = Machine(expectedVersion: "2.0", applicationReceives: true)
        _ = owed.handle(.start)
        #expect(owed.handle(.reported(Report(mode: .application, version: "2.0", target: .running(confirmationOwed: true)))) == .confirm)
        var absent = Machine(expectedVersion: "2.0", applicationReceives: true)
        _ = absent.handle(.start)
        #expect(absent.handle(.reported(Report(mode: .application, version: "1.0", target: .absent))) == .transfer)

        var staging = Machine(expectedVersion: "2.0", applicationReceives: true, activates: false)
        #expect([.start, .connected(.application), .transferred, .verified(ok: true, detail: "")].map { staging.handle($0) } == [.connect, .transfer, .verify, .finish])

        var held = Machine(expectedVersion: "2.0", applicationReceives: true, maximumRepeats: 1)
        for event: Machine.Event in [.start, .connected(.application), .transferred, .verified(ok: true, detail: ""), .activated, .connected(.application)] {
            _ = held.handle(event)
        }
        let stillHeld = Report(mode: .application, version: "1.0", target: .held, detail: "still pending")
        #expect(held.handle(.reported(stillHeld)) == .activate)
        _ = held.handle(.activated)
        _ = held.handle(.connected(.application))
        guard case .fail(let error) = held.handle(.reported(stillHeld)) else {
            Issue.record("a device that never starts the image was activated without end")
            return
        }
        #expect(error.message == "still pending" && error.outcome == .oldImage("1.0") && error.step == .confirm)
    }

    @Test func deviceAlreadyInBootloaderSkipsTheSwitch() {
        let (_, actions) = run([.start, .connected(.bootloader)])
        #expect(actions == [.connect, .transfer])
    }

    @Test func failedVerificationNeverActivates() {
        let (machine, actions) = run([.start, .connected(.bootloader), .transferred, .verified(ok: false, detail: "crc mismatch")])
        guard case .fail(let error) = actions.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.step == .verify)
        #expect(error.code == .verificationFailed)
        #expect(error.message.contains("not activated"))
        #expect(!actions.contains(.activate))
        #expect(machine.step == .verify)
    }

    @Test func wrongVersionAfterRebootFailsConfirm() {
        let (_, actions) = run([
            .start, .connected(.bootloader), .transferred, .verified(ok: true, detail: ""),
            .activated, .connected(.application), .confirmed(version: "1.0"),
        ])
        guard case .fail(let error) = actions.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.step == .confirm)
        #expect(error.code == .confirmFailed)
        #expect(error.message == "the device runs version '1.0', expected '2.0'")
    }

    @Test func bootloaderThatComesBackAsApplicationFailsReconnect() {
        let (_, actions) = run([.start, .connected(.application), .bootloaderEntered, .connected(.application)])
        guard case .fail(let error) = actions.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.step == .reconnect)
    }

    @Test func deviceStuckInBootloaderAfterActivateFailsConfirm() {
        let (_, actions) = run([
            .start, .connected(.bootloader), .transferred, .verified(ok: true, detail: ""),
            .activated, .connected(.bootloader),
        ])
        guard case .fail(let error) = actions.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.step == .confirm)
        #expect(error.code == .confirmFailed)
    }

    @Test(arguments: [UpdateStep.connect, .transfer, .verify])
    func failureEventKeepsItsStep(step: UpdateStep) {
        let error = TransferError(.linkLost, step: step, "gone")
        var machine = Machine(expectedVersion: "x")
        _ = machine.handle(.start)
        #expect(machine.handle(.failed(error)) == .fail(error))
        #expect(machine.state == .failed(error))
        // Once failed, it stays failed whatever arrives.
        #expect(machine.handle(.transferred) == .fail(error))
    }

    @Test func unexpectedEventIsAProtocolViolationNamingTheStep() {
        let (_, actions) = run([.start, .transferred])
        guard case .fail(let error) = actions.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.code == .protocolViolation)
        #expect(error.step == .connect)
    }

    @Test func tuningValidationNamesTheRange() {
        var tuning = TransferTuning()
        tuning.window = 0
        #expect(throws: TransferError(.invalidTuning, step: .transfer, "window 0 is out of range: use 1…250")) { try tuning.validate() }
        tuning = TransferTuning(interPacketDelay: .milliseconds(-1))
        #expect(throws: TransferError(.invalidTuning, step: .transfer, "inter-packet delay cannot be negative")) { try tuning.validate() }
        #expect(TransferTuning(window: 16, ackInterval: 12).effectiveAckInterval == 8)
    }

    @Test func anUnansweredSwitchIsRepeatedWhenTheDeviceCameBackUnchanged() {
        let (_, actions) = run([
            .start, .connected(.application), .bootloaderRequestUnanswered, .connected(.application),
            .bootloaderEntered, .connected(.bootloader),
        ])
        #expect(
            actions == [
                .connect, .enterBootloader, .reconnect(expecting: .bootloader), .enterBootloader,
                .reconnect(expecting: .bootloader), .transfer,
            ])
        // An answered request that did not take is the device's refusal, not a loss.
        let (_, refused) = run([.start, .connected(.application), .bootloaderEntered, .connected(.application)])
        guard case .fail(let error) = refused.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.code == .deviceRefused)
    }

    @Test func anUnansweredActivationIsRepeatedAndItsRepeatsAreBounded() {
        let verified: [Machine.Event] = [.start, .connected(.bootloader), .transferred, .verified(ok: true, detail: "")]
        let (_, once) = run(
            verified + [
                .activateRequestUnanswered, .connected(.bootloader), .activated, .connected(.application),
                .confirmed(version: "2.0"),
            ])
        #expect(
            once.suffix(6) == [
                .activate, .reconnect(expecting: .application), .activate, .reconnect(expecting: .application),
                .confirm, .finish,
            ])
        let (_, never) = run(verified + Array(repeating: [Machine.Event.activateRequestUnanswered, .connected(.bootloader)], count: 3).flatMap { $0 })
        guard case .fail(let error) = never.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.outcome == .inBootloader)
        #expect(error.message.contains("stayed in its bootloader"))
    }

    @Test func aLateFailureIsFollowedByAProbeThatSaysWhatTheDeviceRuns() {
        let activating: [Machine.Event] = [.start, .connected(.bootloader), .transferred, .verified(ok: true, detail: "")]
        let lost = TransferError(.linkLost, step: .confirm, "cannot reconnect")
        let (_, probe) = run(activating + [.activated, .failed(lost)])
        #expect(probe.last == .probe)
        let (done, success) = run(activating + [.activated, .failed(lost), .probed(.init(mode: .application, version: "2.0"))])
        #expect(success.last == .finish)
        #expect(done.state == .done)
        for (report, outcome) in [
            (Machine.DeviceReport?.none, DeviceOutcome.unknown),
            (.init(mode: .application, version: "1.0"), .oldImage("1.0")),
            (.init(mode: .bootloader, version: "1.0"), .inBootloader),
        ] {
            let (_, actions) = run(activating + [.activated, .failed(lost), .probed(report)])
            guard case .fail(let error) = actions.last else {
                Issue.record("expected a failure")
                continue
            }
            #expect(error.outcome == outcome)
            #expect(error.step == .confirm)
        }
        // Before the activation, a failure is just a failure: the old image still runs.
        let (_, early) = run([.start, .connected(.bootloader), .failed(TransferError(.linkLost, step: .transfer, "gone"))])
        guard case .fail(let error) = early.last else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.outcome == nil)
    }
}
