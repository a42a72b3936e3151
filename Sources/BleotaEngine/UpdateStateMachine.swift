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
        case done
        case failed(TransferError)
    }

    public enum Event: Sendable, Hashable {
        case start
        case connected(DeviceMode)
        case bootloaderEntered
        case transferred
        case verified(ok: Bool, detail: String)
        case activated
        case confirmed(version: String)
        case failed(TransferError)
    }

    public enum Action: Sendable, Hashable {
        case connect
        case enterBootloader
        case reconnect(expecting: DeviceMode)
        case transfer
        case verify
        case activate
        case confirm
        case finish
        case fail(TransferError)
    }

    public private(set) var state: State = .idle
    /// The version label the device must report after activation.
    public let expectedVersion: String

    public init(expectedVersion: String) {
        self.expectedVersion = expectedVersion
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
        case .failed(let error): error.step
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
        case (.connecting, .connected(.application)):
            state = .enteringBootloader
            return .enterBootloader
        case (.reconnectingToBootloader, .connected(.application)):
            return fail(.deviceRefused, "the device came back running its application, not its bootloader: it may not support entering the bootloader remotely")
        case (.enteringBootloader, .bootloaderEntered):
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
        case (.activating, .activated):
            state = .reconnectingToApplication
            return .reconnect(expecting: .application)
        case (.reconnectingToApplication, .connected(.application)):
            state = .confirming
            return .confirm
        case (.reconnectingToApplication, .connected(.bootloader)):
            return fail(.confirmFailed, "the device stayed in its bootloader after activation: the new image did not start")
        case (.confirming, .confirmed(let version)):
            guard version == expectedVersion else {
                return fail(.confirmFailed, "the device runs version '\(version)', expected '\(expectedVersion)'")
            }
            state = .done
            return .finish
        case (.done, _), (.failed, _):
            if case .failed(let error) = state { return .fail(error) }
            return .finish
        case (_, .failed(let error)):
            state = .failed(error)
            return .fail(error)
        default:
            return fail(.protocolViolation, "unexpected \(event) while in \(step)")
        }
    }

    private mutating func fail(_ code: TransferError.Code, _ message: String) -> Action {
        let error = TransferError(code, step: step, message)
        state = .failed(error)
        return .fail(error)
    }
}
