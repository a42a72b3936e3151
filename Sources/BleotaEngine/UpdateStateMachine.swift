/// Whether a device runs its application or its bootloader.
public enum DeviceMode: String, Sendable, Hashable, Codable {
    case application
    case bootloader
}

/// The firmware update sequence as a pure state machine: an event in, one
/// action out, no I/O — so every (state, event) pair is tested as a table,
/// and the shell that performs the actions (a protocol's updater) stays thin.
///
/// connect → enter bootloader → reconnect → transfer → verify → activate →
/// reconnect → confirm. Any failure ends in ``State/failed(_:)`` carrying the
/// step it happened in; an unexpected event is itself a failure, never ignored.
///
/// A request after which the device resets (enter bootloader, activate) may
/// lose its answer to the reset, or never arrive: the reconnect tells which.
/// A device found still where it was after a request whose answer never came
/// gets the request again (up to ``maximumRepeats``), rather than being
/// declared unwilling. And once the activation could have reached the device,
/// a failure is followed by a probe (reconnect, ask what it runs), so the
/// failure says what the device runs (``DeviceOutcome``) — or the update turns
/// out to have succeeded.
///
/// A device that says more than its version of what it holds (MCUboot's slots) reports a
/// ``TargetImage``: one that already runs the image is not sent it, and after the activation
/// or a probe the image running unconfirmed is confirmed again, and one held but not running
/// is activated again, within ``maximumRepeats``.
public struct UpdateStateMachine: Sendable {
    public enum State: Sendable, Hashable {
        case idle
        case connecting
        case enteringBootloader
        case reconnectingToBootloader
        case transferring
        case verifying
        case activating
        case reconnectingToApplication
        case confirming
        /// After a failure once the activation may have reached the device: finding out what it runs.
        case probing(after: TransferError)
        case done
        case failed(TransferError)
    }

    /// What a device that keeps images in slots (MCUboot) says of the update's image, which
    /// its version label alone cannot tell: a device may hold the image without running it,
    /// or run it without having confirmed it.
    public enum TargetImage: Sendable, Hashable {
        /// It runs the image; `confirmationOwed` when the update's mode still asks for it to be
        /// confirmed (the engine then confirms again).
        case running(confirmationOwed: Bool)
        /// It holds the image, verified, but runs another: the activation did not arrive (the
        /// engine activates again).
        case held
        /// It neither runs nor holds the image.
        case absent
    }

    /// What a reconnect found the device doing.
    public struct DeviceReport: Sendable, Hashable {
        public var mode: DeviceMode
        public var version: String
        /// What the device says of the update's image; nil from a protocol whose devices say only
        /// their version, which is then compared with ``UpdateStateMachine/expectedVersion``.
        public var target: TargetImage?
        /// Why the device is where it is, in the protocol's words, for the failure that follows
        /// a report of an image held or absent (an MCUboot that reverted, or refused the image at boot).
        public var detail: String?
        public init(mode: DeviceMode, version: String, target: TargetImage? = nil, detail: String? = nil) {
            self.mode = mode
            self.version = version
            self.target = target
            self.detail = detail
        }
    }

    public enum Event: Sendable, Hashable {
        case start
        case connected(DeviceMode)
        case bootloaderEntered
        /// The enter-bootloader request went out but its answer never came (the link dropped, or it timed out).
        case bootloaderRequestUnanswered
        case transferred
        case verified(ok: Bool, detail: String)
        case activated
        /// The activate request went out but its answer never came.
        case activateRequestUnanswered
        /// What the device says it runs; nil from a protocol whose devices do not say.
        case confirmed(version: String?)
        case failed(TransferError)
        /// What a probe found; nil when the device could not be reached.
        case probed(DeviceReport?)
        /// What the device says of the image, in place of ``connected(_:)`` when it already runs
        /// it, and of ``confirmed(version:)`` from a protocol whose devices report a ``TargetImage``.
        case reported(DeviceReport)
    }

    public enum Action: Sendable, Hashable {
        case connect
        case enterBootloader
        case reconnect(expecting: DeviceMode)
        case transfer
        case verify
        case activate
        case confirm
        /// Reconnect and ask the device what it runs (after a late failure).
        case probe
        case finish
        case fail(TransferError)
    }

    public private(set) var state: State = .idle
    /// The version label the device must report after activation.
    public let expectedVersion: String
    /// Whether the last reset-causing request's answer came back.
    private var lastRequestAnswered = true
    /// Requests sent again so far (an activation or a confirmation repeated after a report
    /// included); bounded so a device that never obeys ends the run.
    public private(set) var repeats = 0
    /// The bound on ``repeats``.
    public let maximumRepeats: Int
    /// The default bound on ``repeats``.
    public static let defaultMaximumRepeats = 2

    /// Whether the application itself takes the image (SUOTA, TI OAD, Espressif's BLE OTA,
    /// Silicon Labs' AppLoader entered by the host's write): a device found running it is then
    /// sent the image at once, with no bootloader to enter.
    public let applicationReceives: Bool

    /// Whether the update activates the image once it is verified; false for an upload that
    /// leaves it staged (``FlashMode/upload``), which then ends at the verification.
    public let activates: Bool

    public init(expectedVersion: String, applicationReceives: Bool = false, activates: Bool = true, maximumRepeats: Int = defaultMaximumRepeats) {
        self.expectedVersion = expectedVersion
        self.applicationReceives = applicationReceives
        self.activates = activates
        self.maximumRepeats = maximumRepeats
    }

    /// The step the machine is in (or failed in), for progress and errors.
    public var step: UpdateStep {
        switch state {
        case .idle, .connecting: .connect
        case .enteringBootloader: .enterBootloader
        case .reconnectingToBootloader: .reconnect
        case .transferring: .transfer
        case .verifying: .verify
        case .activating: .activate
        case .reconnectingToApplication, .confirming, .done: .confirm
        case .probing(let error), .failed(let error): error.step
        }
    }

    public mutating func handle(_ event: Event) -> Action {
        switch (state, event) {
        case (.idle, .start):
            state = .connecting
            return .connect
        case (.connecting, .connected(.bootloader)), (.reconnectingToBootloader, .connected(.bootloader)):
            state = .transferring
            return .transfer
        case (.connecting, .reported(let report)):
            switch report.target {
            case .running(let owed)?:
                // It already runs the image: nothing to send, at most a confirmation owed.
                state = owed ? .confirming : .done
                return owed ? .confirm : .finish
            default:
                return handle(.connected(report.mode))
            }
        case (.connecting, .connected(.application)) where applicationReceives:
            state = .transferring
            return .transfer
        case (.connecting, .connected(.application)):
            state = .enteringBootloader
            return .enterBootloader
        case (.reconnectingToBootloader, .connected(.application)):
            if !lastRequestAnswered, repeats < maximumRepeats {
                // The request may never have arrived: ask again.
                repeats += 1
                state = .enteringBootloader
                return .enterBootloader
            }
            return fail(.deviceRefused, "the device came back running its application, not its bootloader: it may not support entering the bootloader remotely")
        case (.enteringBootloader, .bootloaderEntered), (.enteringBootloader, .bootloaderRequestUnanswered):
            lastRequestAnswered = event == .bootloaderEntered
            state = .reconnectingToBootloader
            return .reconnect(expecting: .bootloader)
        case (.transferring, .transferred):
            state = .verifying
            return .verify
        case (.verifying, .verified(true, _)) where !activates:
            state = .done
            return .finish
        case (.verifying, .verified(true, _)):
            state = .activating
            return .activate
        case (.verifying, .verified(false, let detail)):
            return fail(.verificationFailed, "the device rejected the image (\(detail)); it was not activated and the old firmware still runs")
        case (.activating, .activated), (.activating, .activateRequestUnanswered):
            lastRequestAnswered = event == .activated
            state = .reconnectingToApplication
            return .reconnect(expecting: .application)
        case (.reconnectingToApplication, .connected(.application)):
            state = .confirming
            return .confirm
        case (.reconnectingToApplication, .connected(.bootloader)):
            if !lastRequestAnswered, repeats < maximumRepeats {
                // The activation may never have arrived; the device keeps its verified image: activate again.
                repeats += 1
                state = .activating
                return .activate
            }
            return failed(
                .confirmFailed, "the device stayed in its bootloader after activation: the new image did not start",
                outcome: .inBootloader)
        case (.probing(let error), .probed(let report)):
            guard let report else { return failed(error, outcome: .unknown) }
            if report.target != nil { return follow(report, failing: error) }
            if report.mode == .application, report.version == expectedVersion {
                state = .done
                return .finish
            }
            return failed(error, outcome: report.mode == .bootloader ? .inBootloader : .oldImage(report.version))
        case (.confirming, .reported(let report)) where report.target != nil:
            let error = TransferError(
                .confirmFailed, step: .confirm,
                report.detail ?? "the device runs '\(report.version)', not the new image '\(expectedVersion)'")
            return follow(report, failing: error)
        case (.confirming, .reported(let report)):
            return handle(.confirmed(version: report.version))
        case (.confirming, .confirmed(nil)):
            state = .done
            return .finish
        case (.confirming, .confirmed(let version?)):
            guard version == expectedVersion else {
                return failed(.confirmFailed, "the device runs version '\(version)', expected '\(expectedVersion)'", outcome: .oldImage(version))
            }
            state = .done
            return .finish
        case (.done, _), (.failed, _):
            if case .failed(let error) = state { return .fail(error) }
            return .finish
        case (_, .failed(let error)):
            // A step that says what the device runs has found out already: nothing to probe.
            if activationMayHaveStarted, error.outcome == nil {
                state = .probing(after: error)
                return .probe
            }
            state = .failed(error)
            return .fail(error)
        default:
            return fail(.protocolViolation, "unexpected \(event) while in \(step)")
        }
    }

    /// What a report of the update's image asks for (after a probe, or once the device is back
    /// from the activation): done, the confirmation or the activation again (within
    /// ``maximumRepeats``), or `error` naming what the device runs.
    private mutating func follow(_ report: DeviceReport, failing error: TransferError) -> Action {
        switch report.target {
        case .running(confirmationOwed: false)?:
            state = .done
            return .finish
        case .running(confirmationOwed: true)?:
            guard repeats < maximumRepeats else { return failed(error, outcome: .newImageUnconfirmed) }
            repeats += 1
            state = .confirming
            return .confirm
        case .held?:
            guard repeats < maximumRepeats else { return failed(error, outcome: .oldImage(report.version)) }
            repeats += 1
            state = .activating
            return .activate
        case .absent?, nil:
            return failed(error, outcome: report.mode == .bootloader ? .inBootloader : .oldImage(report.version))
        }
    }

    /// From the activate request on, the device may be running the new image.
    var activationMayHaveStarted: Bool {
        switch state {
        case .activating, .reconnectingToApplication, .confirming: true
        default: false
        }
    }

    private mutating func fail(_ code: TransferError.Code, _ message: String) -> Action {
        let error = TransferError(code, step: step, message)
        state = .failed(error)
        return .fail(error)
    }

    private mutating func failed(_ code: TransferError.Code, _ message: String, outcome: DeviceOutcome) -> Action {
        failed(TransferError(code, step: step, message), outcome: outcome)
    }

    private mutating func failed(_ error: TransferError, outcome: DeviceOutcome) -> Action {
        var error = error
        error.outcome = outcome
        state = .failed(error)
        return .fail(error)
    }
}
