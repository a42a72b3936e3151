import BleotaLink

/// What a simulated device demands of a link and what it can do to pair:
/// the `security=`, `device-io=`, `device-passkey=`, `legacy-pairing=` and `ccc=`
/// keys of a `sim://` address.
///
/// A device that demands a level drops every packet that reaches it over a
/// link below it (as Zephyr drops a Write Command to a characteristic whose
/// permission the link lacks: ATT cannot answer a command with an error), and
/// refuses the host's subscription, a Write Request, with Insufficient
/// Authentication or Insufficient Encryption, which is where a host learns
/// that it must pair.
public struct SimulatedDeviceSecurity: Sendable, Hashable {
    /// The level every characteristic of the device demands.
    public var required: SecurityLevel
    /// What the device can show or enter: a display showing ``passkey`` by default.
    public var ioCapability: PairingIOCapability
    /// The six-digit passkey the device shows (or types, when it has only a keyboard).
    public var passkey: UInt32
    /// False for a device that can do only LE legacy pairing.
    public var secureConnections: Bool
    /// False for a device whose CCC descriptor is open to any link (`ccc=open`; Bumble's default,
    /// several vendor SDKs): the subscription then succeeds on a plain link, and every packet
    /// after it is dropped without a word.
    public var protectsSubscription: Bool

    public init(
        required: SecurityLevel = .low, ioCapability: PairingIOCapability = .displayOnly, passkey: UInt32 = 123_456,
        secureConnections: Bool = true, protectsSubscription: Bool = true
    ) {
        self.required = required
        self.ioCapability = ioCapability
        self.passkey = passkey
        self.secureConnections = secureConnections
        self.protectsSubscription = protectsSubscription
    }

    /// A device that demands nothing.
    public static let open = SimulatedDeviceSecurity()

    /// `display`, `yesno`, `keyboard`, `keyboard-display`, `none`, as `device-io=` takes them.
    public static func ioCapability(named name: String) -> PairingIOCapability? {
        switch name {
        case "display": .displayOnly
        case "yesno": .displayYesNo
        case "keyboard": .keyboardOnly
        case "keyboard-display": .keyboardDisplay
        case "none": .noInputNoOutput
        default: nil
        }
    }

    /// What the device answers a Write Request on a link at `state`: nil when it accepts.
    ///
    /// As Zephyr's `bt_gatt_check_perm`: an authenticated level the link lacks is
    /// Insufficient Authentication; a missing encryption is Insufficient Encryption
    /// when the device holds a key for the host (it can encrypt without pairing), and
    /// Insufficient Authentication when it holds none (pairing is what is missing).
    func refusal(of state: LinkSecurityState, bonded: Bool) -> SecurityShortfall? {
        guard state.level < required else { return nil }
        if required >= .high && state.level >= .medium { return .authentication }
        return bonded ? .encryption : .authentication
    }
}

/// The counters of simulated pairings, for tests and reports.
public struct PairingStatistics: Sendable, Hashable, Codable {
    /// Pairings that ran (successful or not).
    public var pairings = 0
    /// Links encrypted with a stored bond, without pairing.
    public var encryptionsWithBond = 0
    /// Host packets a device dropped because the link lacked the level it demands.
    public var refusedForSecurity = 0
    /// Subscriptions (Write Requests) refused for want of security.
    public var refusedSubscriptions = 0

    public init() {}

    mutating func add(_ other: PairingStatistics) {
        pairings += other.pairings
        encryptionsWithBond += other.encryptionsWithBond
        refusedForSecurity += other.refusedForSecurity
        refusedSubscriptions += other.refusedSubscriptions
    }
}

extension SimulatedConnection {
    /// The host pairs with the device (or encrypts with their bond) for at least `wanted`, as an
    /// LE central's Security Manager does: the IO capabilities of the host's agent and the device
    /// choose the method (Core v5.4, Vol 3, Part H, §2.3.5.1), the agent answers what the method
    /// asks, and each phase costs connection events on air.
    ///
    /// The rules are the Linux kernel's as initiator: MITM is asked for when the level wanted is
    /// high or the host can show or enter anything; a pairing that would be Just Works when high is
    /// wanted fails with Authentication Requirements; Just Works gives medium, authenticated
    /// legacy pairing high, authenticated Secure Connections fips. A failed pairing ends the link,
    /// as the kernel ends it when the device reports Pairing Failed.
    func pair(to wanted: SecurityLevel) async throws(PairingError) -> LinkSecurityState {
        let current = security
        if current.level >= wanted { return current }
        let clock = world.clock
        let interval = connectionInterval
        func spend(_ events: Int) async throws(PairingError) {
            do { try await clock.sleep(for: interval * events) } catch { throw .linkLost("cancelled") }
            if isClosed { throw .linkLost(state.withLock { $0.reason }) }
        }
        if let bond = world.bond(for: peripheral), bond.level >= wanted {
            // LL Encryption Request and Response, Start Encryption Request and Response.
            try await spend(2)
            let encrypted = LinkSecurityState(level: bond.level, method: .storedKey, secureConnections: bond.secureConnections, bonded: true)
            state.withLock { state in
                state.security = encrypted
                state.pairing.encryptionsWithBond += 1
            }
            return encrypted
        }
        let agent = world.pairingAgent
        if !agent.pairsAnew {
            // A bond the host must hold already, and it holds none: never paired anew.
            close("pairing refused: no bond with this device")
            throw .noBond
        }
        state.withLock { $0.pairing.pairings += 1 }
        let device = deviceSecurity
        let secureConnections = device.secureConnections
        let mitm = wanted >= .high || agent.ioCapability != .noInputNoOutput || device.required >= .high
        let (method, input) =
            mitm
            ? PairingIOCapability.method(initiator: agent.ioCapability, responder: device.ioCapability, secureConnections: secureConnections)
            : (.justWorks, nil)
        // Pairing Request and Response; with Secure Connections the public keys too.
        try await spend(secureConnections ? 4 : 2)
        func fail(_ error: PairingError) -> PairingError {
            close("pairing failed: \(error)")
            return error
        }
        if method == .justWorks {
            if agent.ioCapability == .noInputNoOutput && (wanted >= .high || device.required >= .high) {
                // Nobody here can type or confirm: say what to give rather than what the Security Manager made of it.
                let possible = PairingIOCapability.method(
                    initiator: .keyboardDisplay, responder: device.ioCapability,
                    secureConnections: secureConnections
                ).method
                throw fail(.needsUserInput(possible))
            }
            if wanted >= .high { throw fail(.failed(.authenticationRequirements, byDevice: false)) }
            if device.required >= .high { throw fail(.failed(.authenticationRequirements, byDevice: true)) }
        }
        switch (method, input) {
        case (.passkeyEntry, .initiator?), (.passkeyEntry, .both?):
            // The device shows its passkey (or, keyboard on both sides, has it typed there); the person types it here.
            let typed: UInt32
            do { typed = try await agent.passkey(for: address) } catch { throw fail(error) }
            try await spend(secureConnections ? 20 : 2)
            guard typed == device.passkey else { throw fail(.failed(.confirmValueFailed, byDevice: true)) }
        case (.passkeyEntry, _):
            // This side shows a passkey, which the person types on the device.
            let shown = UInt32(world.drawInteger(.pairing, below: 1_000_000))
            await agent.display(shown, for: address)
            try await spend(secureConnections ? 20 : 2)
        case (.numericComparison, _):
            let number = UInt32(world.drawInteger(.pairing, below: 1_000_000))
            let accepted: Bool
            do { accepted = try await agent.confirm(number, for: address) } catch { throw fail(error) }
            guard accepted else { throw fail(.comparisonRejected(number)) }
            try await spend(2)
        default:
            try await spend(2)
        }
        // DHKey check (or the legacy confirm values), encryption, key distribution.
        try await spend(3)
        let level: SecurityLevel = method == .justWorks ? .medium : (secureConnections ? .fips : .high)
        let reached = LinkSecurityState(level: level, method: method, secureConnections: secureConnections, bonded: true)
        state.withLock { $0.security = reached }
        world.storeBond(reached, for: peripheral)
        if level < wanted { throw .levelNotReached(wanted: wanted, reached: level) }
        return reached
    }

    /// The host's subscription to the device's notifications (a Write Request to a CCC descriptor):
    /// refused for want of security when the device demands more than the link has. A device that
    /// demands nothing accepts it at no cost, as the simulator always has.
    func subscribe() async throws(SecurityShortfall) {
        let device = deviceSecurity
        guard device.required > .low, device.protectsSubscription else { return }
        // The request and its response.
        try? await world.clock.sleep(for: connectionInterval * 2)
        let refusal = device.refusal(of: security, bonded: world.bond(for: peripheral) != nil)
        if let refusal {
            state.withLock { $0.pairing.refusedSubscriptions += 1 }
            throw refusal
        }
    }

    /// Whether a host packet reaching the device is dropped for want of security (and counted).
    func refusesForSecurity() -> Bool {
        let required = deviceSecurity.required
        return state.withLock { state in
            guard state.security.level < required else { return false }
            state.pairing.refusedForSecurity += 1
            return true
        }
    }
}
