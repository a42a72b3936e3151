import BleotaEngine

/// An MCUmgr/MCUboot upgrade as a pure state machine: an event in, one action
/// out, no I/O — every (state, event) pair is a row of a table test, and
/// ``SMPUpdater`` only performs the actions.
///
/// connect → read state → upload → verify the slot → mark (test or
/// permanent) → reset → reconnect → check the running image → confirm.
///
/// It never leaves doubt about what the device runs: once the activation
/// could have reached the device, a failure is not the end. The machine asks
/// to reconnect and read the slots, and from what it finds either finishes
/// (the device already did what was asked: a confirm whose answer was lost),
/// repeats the step that did not arrive (a mark, a reset, a confirm), or fails
/// naming what the device now runs (``/BleotaEngine/DeviceOutcome``).
package struct SMPUpgradeStateMachine: Sendable {
    package enum State: Sendable, Hashable {
        case idle
        case connecting
        case readingState
        case uploading
        case verifying
        case marking
        case resetting
        case reconnecting
        case checking
        case confirming
        /// After a failure past the transfer: reconnecting to read what the device runs.
        case probing(after: TransferError)
        case done
        case failed(TransferError)
    }

    package enum Event: Sendable, Hashable {
        case start
        case connected
        case stateRead([SMPImageSlot])
        case uploaded
        case marked([SMPImageSlot])
        /// The reset was sent (its answer may never come: the device resets).
        case resetSent
        case failed(TransferError)
        /// What a probe after a failure found; nil when the device could not be reached.
        case probed([SMPImageSlot]?)
    }

    package enum Action: Sendable, Hashable {
        case connect
        case readState
        case upload
        case mark(confirm: Bool)
        case reset
        /// Reconnect after the reset (the device is away for the swap).
        case reconnect
        case confirm
        /// Reconnect (within the reboot budget) and read the slots, after `error`.
        case probe
        case finish(running: SMPImageSlot?)
        case fail(TransferError)
        /// A note for the user (the device already runs the image, a step is repeated).
        case note(String, then: NextAfterNote)
    }

    /// What follows a note; notes carry their continuation so the table stays one action per event.
    package indirect enum NextAfterNote: Sendable, Hashable {
        case action(Action)
    }

    package let mode: FlashMode
    /// The image's hash TLV: how the device names it.
    package let hash: [UInt8]
    /// The image's version, for messages.
    package let version: String
    package private(set) var state: State = .idle
    /// Times a step was repeated after a probe; bounded so a device that never obeys ends the run.
    package private(set) var recoveries = 0
    package static let maximumRecoveries = 3
    /// Uploads so far: a second one resumes where the device stands when the slot did not list the image.
    package private(set) var uploads = 0
    package static let maximumUploads = 2
    /// Readings of the slots repeated before a negative verdict: an answer damaged on the
    /// way can show a wrong hash, so "not our image" is believed only when read twice.
    package private(set) var rereads = 0
    package static let maximumRereads = 2
    /// What the device ran when the upgrade started.
    package private(set) var versionBefore: String?

    package init(mode: FlashMode, hash: [UInt8], version: String) {
        self.mode = mode
        self.hash = hash
        self.version = version
    }

    /// The step for progress and errors.
    package var step: UpdateStep {
        switch state {
        case .idle, .connecting, .readingState: .connect
        case .uploading: .transfer
        case .verifying: .verify
        case .marking, .resetting: .activate
        case .reconnecting, .checking: .reconnect
        case .confirming, .done: .confirm
        case .probing(let error), .failed(let error): error.step
        }
    }

    /// Whether the activation may already have reached the device: from here on a
    /// failure is followed by a probe of what the device runs.
    var activationMayHaveStarted: Bool {
        switch state {
        case .marking, .resetting, .reconnecting, .checking, .confirming: true
        default: false
        }
    }

    package mutating func handle(_ event: Event) -> Action {
        switch (state, event) {
        case (.idle, .start):
            state = .connecting
            return .connect
        case (.connecting, .connected):
            state = .readingState
            return .readState
        case (.readingState, .stateRead(let slots)):
            versionBefore = slots.first(where: \.active)?.version
            if let active = slots.first(where: \.active), active.hash == hash {
                state = .checking
                return .note("the device already runs this image (\(version))", then: .action(afterRunning(active)))
            }
            if slots.contains(where: { $0.hash == hash && !$0.active }) {
                state = .verifying
                return .note("the image is already in the secondary slot; skipping the upload", then: .action(.readState))
            }
            state = .uploading
            uploads += 1
            return .upload
        case (.uploading, .uploaded):
            state = .verifying
            return .readState
        case (.verifying, .stateRead(let slots)):
            guard slots.contains(where: { !$0.active && $0.hash == hash }) else {
                if rereads < Self.maximumRereads {
                    rereads += 1
                    return .readState
                }
                if uploads < Self.maximumUploads {
                    // An answer damaged on the way can make an upload look finished when it is not:
                    // upload again; the device resumes from what it holds.
                    uploads += 1
                    state = .uploading
                    return .note("the device does not list the uploaded image yet; uploading again", then: .action(.upload))
                }
                return fail(
                    .verificationFailed,
                    "the device does not list the uploaded image (hash \(hash.hexString.prefix(16))…) in its secondary slot: it did not verify there")
            }
            if mode == .upload {
                state = .done
                return .finish(running: slots.first(where: \.active))
            }
            state = .marking
            return .mark(confirm: mode == .confirm)
        case (.marking, .marked(let slots)):
            guard let target = slots.first(where: { $0.hash == hash }), target.pending || target.active else {
                return fail(.deviceRefused, "the device did not mark the image pending")
            }
            state = .resetting
            return .reset
        case (.resetting, .resetSent):
            state = .reconnecting
            return .reconnect
        case (.reconnecting, .connected):
            state = .checking
            return .readState
        case (.checking, .stateRead(let slots)):
            return checkRunning(slots)
        case (.confirming, .stateRead(let slots)), (.confirming, .marked(let slots)):
            guard let active = slots.first(where: \.active), active.hash == hash, active.confirmed else {
                return fail(.confirmFailed, "the device did not mark the running image confirmed")
            }
            state = .done
            return .finish(running: active)

        case (.probing(let error), .probed(let slots)):
            return recover(after: error, slots: slots)

        case (.done, _), (.failed, _):
            if case .failed(let error) = state { return .fail(error) }
            return .finish(running: nil)
        case (_, .failed(let error)):
            if activationMayHaveStarted {
                state = .probing(after: error)
                return .probe
            }
            state = .failed(error)
            return .fail(error)
        default:
            return fail(.protocolViolation, "unexpected \(event) while in \(step)")
        }
    }

    /// The running image is ours: confirm it if the mode asks and it is not yet.
    private mutating func afterRunning(_ active: SMPImageSlot) -> Action {
        if mode == .testAndConfirm, !active.confirmed {
            state = .confirming
            return .confirm
        }
        state = .done
        return .finish(running: active)
    }

    private mutating func checkRunning(_ slots: [SMPImageSlot]) -> Action {
        if let active = slots.first(where: \.active), active.hash == hash { return afterRunning(active) }
        if let staged = slots.first(where: { $0.hash == hash && !$0.active }), staged.pending, recoveries < Self.maximumRecoveries {
            // Still pending: the reset never arrived (its answer was expected to be lost anyway).
            recoveries += 1
            state = .resetting
            return .note("the image is still pending (the reset did not arrive); resetting again", then: .action(.reset))
        }
        if rereads < Self.maximumRereads {
            rereads += 1
            return .readState
        }
        let running = slots.first(where: \.active)?.version ?? "nothing"
        let error: TransferError
        if slots.contains(where: { $0.hash == hash }) {
            error = TransferError(
                .verificationFailed, step: .reconnect,
                "the device came back running \(running), not \(version): MCUboot reverted the image (it did not confirm itself, or failed its test boot)")
        } else {
            error = TransferError(
                .verificationFailed, step: .reconnect,
                "the device came back running \(running), not \(version): MCUboot refused the image at boot (it did not verify: check it is signed with the key the bootloader trusts; if it is, it arrived damaged, so flash it again) and erased it"
            )
        }
        var failed = error
        failed.outcome = .oldImage(running)
        state = .failed(failed)
        return .fail(failed)
    }

    /// After a probe: finish if the device did what was asked, repeat what did not
    /// arrive, or fail saying what it runs.
    private mutating func recover(after error: TransferError, slots: [SMPImageSlot]?) -> Action {
        guard let slots else {
            var failed = error
            failed.outcome = .unknown
            state = .failed(failed)
            return .fail(failed)
        }
        let active = slots.first(where: \.active)
        if let active, active.hash == hash {
            let wanted = mode != .testAndConfirm || active.confirmed
            if wanted {
                state = .done
                return .note("the device runs \(version) despite the error (\(error.message))", then: .action(.finish(running: active)))
            }
            guard recoveries < Self.maximumRecoveries else { return failWithOutcome(error, slots) }
            recoveries += 1
            state = .confirming
            return .note("the device runs \(version) unconfirmed; confirming again", then: .action(.confirm))
        }
        guard recoveries < Self.maximumRecoveries, let staged = slots.first(where: { $0.hash == hash && !$0.active }) else {
            return failWithOutcome(error, slots)
        }
        recoveries += 1
        if staged.pending {
            state = .resetting
            return .note("the image is still pending (the reset did not arrive); resetting again", then: .action(.reset))
        }
        state = .marking
        return .note("the image is not marked pending (the request did not arrive); marking it again", then: .action(.mark(confirm: mode == .confirm)))
    }

    private mutating func failWithOutcome(_ error: TransferError, _ slots: [SMPImageSlot]) -> Action {
        var failed = error
        if let active = slots.first(where: \.active) {
            failed.outcome = active.hash == hash ? (active.confirmed ? .newImageConfirmed : .newImageUnconfirmed) : .oldImage(active.version)
        } else {
            failed.outcome = .unknown
        }
        state = .failed(failed)
        return .fail(failed)
    }

    private mutating func fail(_ code: TransferError.Code, _ message: String) -> Action {
        let error = TransferError(code, step: step, message)
        if activationMayHaveStarted {
            state = .probing(after: error)
            return .probe
        }
        state = .failed(error)
        return .fail(error)
    }
}
