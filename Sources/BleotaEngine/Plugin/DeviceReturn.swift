import BleotaLink

extension HostContext {
    /// Waits until the device drops `link` (it resets after a jump or an activation), at most
    /// `timeout` (`--response-timeout` by default), skipping whatever still arrives on it; then
    /// closes it from this side too. What the device says before it drops is the old state, so
    /// a host reads what runs only on the link it finds the device on again (``reconnect(after:expecting:timeout:)``).
    public func awaitDisconnect(_ link: any Link, timeout: Duration? = nil) async {
        let deadline = clock.now + (timeout ?? timeouts.response)
        while deadline > clock.now, (try? await link.receive(within: deadline - clock.now, clock: clock)) != nil {}
        await link.close()
    }

    /// The device found again after a reset, in `mode`: `previous` (the link its reset was asked
    /// on, if still open) let go once the device dropped it, then a link for that mode within
    /// `timeout` (`--connect-timeout`'s reboot wait by default). It fails as the step the mode
    /// belongs to: the reconnect for a bootloader, the confirmation for the application, whose
    /// failure the update's lifecycle then probes for what runs.
    ///
    /// Where the device will be is the connector's to know (``/BleotaLink/ConnectPurpose``: a bootloader at
    /// another address, a private address resolved with the bond's IRK, a firmware loader's name),
    /// so each protocol states only the mode it expects and reads what it needs on the new link.
    public func reconnect(after previous: (any Link)?, expecting mode: DeviceMode, timeout: Duration? = nil) async throws(TransferError) -> any Link {
        if let previous { await awaitDisconnect(previous) }
        let wait = timeout ?? timeouts.reboot
        let expected = ExpectedReturn(mode)
        do { return try await connector.connect(for: expected.purpose, timeout: wait) } catch {
            throw notBack(expected, step: expected.step, within: wait, error)
        }
    }

    /// What a reset is expected to bring back: the connector's purpose for it, the step a failure
    /// belongs to, and how the failure names it.
    struct ExpectedReturn {
        let purpose: ConnectPurpose
        let step: UpdateStep
        let place: String

        init(_ mode: DeviceMode) {
            (purpose, step, place) =
                mode == .bootloader ? (.bootloader, .reconnect, "its bootloader") : (.application, .confirm, "its application")
        }
    }

    /// The device did not come back as `expected` within `wait` (`error`: the last connect's).
    func notBack(_ expected: ExpectedReturn, step: UpdateStep, within wait: Duration, _ error: LinkError? = nil) -> TransferError {
        TransferError(
            .linkLost, step: step,
            "\(connector.description) did not come back in \(expected.place) within \(wait) (raise --connect-timeout if its reset takes longer)"
                + (error.map { ": \($0)" } ?? ""))
    }
}

extension HostContext {
    /// The device found again as ``reconnect(after:expecting:timeout:)`` finds it, then greeted:
    /// `greet` reads on the new link what the protocol needs to go on (a hello, an echo, whether
    /// the bootloader's characteristics are there). A device still starting may take a connection
    /// and not answer on it yet, so a greeting that fails closes that link and the device is found
    /// again, 200 ms later, until `timeout` is spent; the last failure is the step's. A link refused
    /// for its security is not tried again: the next one would be refused the same way.
    ///
    /// `advertisedName` finds a device that comes back under another name (a firmware loader, a
    /// bootloader that renames itself); `step` is the step a failure is named for, by default the
    /// one the mode belongs to.
    public func reconnect<Greeting>(
        after previous: (any Link)?, expecting mode: DeviceMode, timeout: Duration? = nil, advertisedName: String? = nil,
        step: UpdateStep? = nil, greeting greet: (any Link) async throws(TransferError) -> Greeting
    ) async throws(TransferError) -> (link: any Link, greeting: Greeting) {
        if let previous { await awaitDisconnect(previous) }
        let wait = timeout ?? timeouts.reboot
        let deadline = clock.now + wait
        let expected = ExpectedReturn(mode)
        let purpose = expected.purpose
        let failedStep = step ?? expected.step
        var last: TransferError?
        repeat {
            let left = max(.milliseconds(1), deadline - clock.now)
            do {
                let link =
                    if let advertisedName {
                        try await connector.connect(for: purpose, timeout: left, advertisedName: advertisedName)
                    } else {
                        try await connector.connect(for: purpose, timeout: left)
                    }
                do throws(TransferError) { return (link, try await greet(link)) } catch {
                    await link.close()
                    last = error
                }
            } catch {
                last = notBack(expected, step: failedStep, within: wait, error)
                if case .security = error { break }
            }
            guard deadline > clock.now else { break }
            try? await clock.sleep(for: min(Self.greetingPause, deadline - clock.now))
        } while deadline > clock.now
        throw last ?? notBack(expected, step: failedStep, within: wait)
    }

    /// The pause before the device is looked for again after a greeting went unanswered.
    static let greetingPause = Duration.milliseconds(200)
}

/// The reconnects one transfer step may make when its link drops mid-transfer, before it gives
/// up: counted, refused past the limit, and said in one wording by every protocol that resumes
/// (native, SMP, Nordic's Secure DFU). What differs stays the protocol's: how it reconnects
/// (``/BleotaLink/ConnectPurpose/resume``) and how it learns what the device already holds.
public struct TransferResumption: Sendable {
    /// Reconnects allowed in the step.
    public let limit: Int
    /// Reconnects made so far.
    public private(set) var reconnects = 0

    public init(limit: Int) { self.limit = max(0, limit) }

    /// The link dropped with `error`: the step's failure when the operation was cancelled (Ctrl-C:
    /// the link "lost" is the operation stopping, not a drop to mend) or when this drop is one past
    /// the limit; otherwise it is counted and noted, and the caller reconnects and resumes.
    public mutating func linkDropped(_ error: any Error, onEvent: (UpdateEvent) -> Void) throws(TransferError) {
        if Task.isCancelled { throw TransferError(.linkLost, step: .transfer, "cancelled: \(error)") }
        reconnects += 1
        guard reconnects <= limit else {
            throw TransferError(.linkLost, step: .transfer, "the link dropped \(reconnects) times (last: \(error)); run the same command again to resume")
        }
        onEvent(.note("link lost (\(error)); reconnecting to resume"))
    }
}
