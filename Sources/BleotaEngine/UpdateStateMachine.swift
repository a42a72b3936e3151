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

    /// What a reconnect found the device doing.
    public struct DeviceReport: Sendable, Hashable {
        public var mode: DeviceMode
        public var version: String
        public init(mode: DeviceMode, version: String) {
            self.mode = mode
            self.version = version
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
    /// Requests sent again so far; bounded so a device that never obeys ends the run.
    public private(set) var repeats = 0
    public static let maximumRepeats = 2

    /// Whether the application itself takes the image (SUOTA, TI OAD, Espressif's BLE OTA,
    /// Silicon Labs' AppLoader entered by the host's write): a device found running it is then
    /// sent the image at once, with no bootloader to enter.
    public let applicationReceives: Bool

    public init(expectedVersion: String, applicationReceives: Bool = false) {
        self.expectedVersion = expectedVersion
        self.applicationReceives = applicationReceives
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
        case (.connecting, .connected(.application)) where applicationReceives:
            state = .transferring
            return .transfer
        case (.connecting, .connected(.application)):
            state = .enteringBootloader
            return .enterBootloader
        case (.reconnectingToBootloader, .connected(.application)):
            if !lastRequestAnswered, repeats < Self.maximumRepeats {
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
            if !lastRequestAnswered, repeats < Self.maximumRepeats {
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
            if report.mode == .application, report.version == expectedVersion {
                state = .done
                return .finish
            }
            return failed(error, outcome: report.mode == .bootloader ? .inBootloader : .oldImage(report.version))
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
