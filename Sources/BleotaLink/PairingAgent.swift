/// What a side of a pairing can show and enter: the IO capability it
/// announces in its Pairing Request or Response (Core v5.4, Vol 3, Part H,
/// §3.5.1), which decides the pairing method with the other side's (§2.3.5.1).
public enum PairingIOCapability: UInt8, Sendable, Hashable, Codable, CustomStringConvertible {
    case displayOnly = 0x00
    case displayYesNo = 0x01
    case keyboardOnly = 0x02
    case noInputNoOutput = 0x03
    case keyboardDisplay = 0x04

    public var description: String {
        switch self {
        case .displayOnly: "DisplayOnly"
        case .displayYesNo: "DisplayYesNo"
        case .keyboardOnly: "KeyboardOnly"
        case .noInputNoOutput: "NoInputNoOutput"
        case .keyboardDisplay: "KeyboardDisplay"
        }
    }

    /// The pairing method two sides' capabilities give when at least one asks
    /// for MITM protection, the table of Core v5.4, Vol 3, Part H, §2.3.5.1
    /// (with `secureConnections`, both sides support LE Secure Connections).
    /// The second value says which side enters the passkey: `initiator`,
    /// `responder`, or both when both can only type.
    public static func method(
        initiator: PairingIOCapability, responder: PairingIOCapability,
        secureConnections: Bool
    ) -> (method: PairingMethod, inputBy: PasskeyInput?) {
        if initiator == .noInputNoOutput || responder == .noInputNoOutput { return (.justWorks, nil) }
        if initiator == .keyboardOnly && responder == .keyboardOnly { return (.passkeyEntry, .both) }
        let confirms: Set<PairingIOCapability> = [.displayYesNo, .keyboardDisplay]
        if secureConnections && confirms.contains(initiator) && confirms.contains(responder) { return (.numericComparison, nil) }
        let types: Set<PairingIOCapability> = [.keyboardOnly, .keyboardDisplay]
        let shows: Set<PairingIOCapability> = [.displayOnly, .displayYesNo, .keyboardDisplay]
        switch (types.contains(initiator) && shows.contains(responder), types.contains(responder) && shows.contains(initiator)) {
        case (true, true):
            // Both could type: the one that cannot display types; when both can (legacy), the responder.
            if initiator == .keyboardOnly { return (.passkeyEntry, .initiator) }
            return (.passkeyEntry, .responder)
        case (true, false): return (.passkeyEntry, .initiator)
        case (false, true): return (.passkeyEntry, .responder)
        case (false, false): return (.justWorks, nil)
        }
    }
}

/// Who types the passkey in passkey entry.
public enum PasskeyInput: Sendable, Hashable { case initiator, responder, both }

/// Answers what pairing asks of the person at this side: a passkey to type,
/// a number to confirm. A transport's Security Manager calls it while it pairs.
///
/// ``PairingPolicy`` is the agent the command line builds from `--passkey`,
/// `--accept-pairing` and, on a terminal, a prompt.
public protocol PairingAgent: Sendable {
    /// The capability to announce: what this agent can answer.
    var ioCapability: PairingIOCapability { get }
    /// Passkey entry, this side types: the six-digit passkey the device shows.
    func passkey(for device: String) async throws(PairingError) -> UInt32
    /// Numeric comparison: whether `number` is the one the device shows.
    func confirm(_ number: UInt32, for device: String) async throws(PairingError) -> Bool
    /// Passkey entry, this side displays: `passkey` is to be typed on the device.
    func display(_ passkey: UInt32, for device: String) async
    /// Whether the user said the device pairs (gave its passkey, or accepted a comparison in
    /// advance): a connector then pairs before it writes anything, since a device that protects
    /// its characteristic but not its CCC descriptor would drop the writes without a word.
    var expectsPairing: Bool { get }
    /// Whether a device with no bond may be paired anew; false: only a bond the host holds
    /// already may secure the link (``PairingError/noBond`` otherwise).
    var pairsAnew: Bool { get }
}

extension PairingAgent {
    public var expectsPairing: Bool { false }
    public var pairsAnew: Bool { true }
    /// Whether pairing with this agent can authenticate (passkey entry or numeric comparison);
    /// without, the kernel pairs Just Works and the key is unauthenticated.
    public var canAuthenticate: Bool { ioCapability != .noInputNoOutput }
}

/// Asks a person, on a terminal, what a pairing needs.
public protocol PairingPrompt: Sendable {
    /// Reads a six-digit passkey; nil when the person gives none.
    func readPasskey(_ question: String) async -> UInt32?
    /// Asks yes or no.
    func confirm(_ question: String) async -> Bool
    /// Shows a line.
    func show(_ line: String) async
}

/// The agent the command line builds: a passkey given in advance, numeric
/// comparison accepted in advance, and a terminal prompt for whatever was not
/// given. Without any of them it can do only Just Works, and says so when a
/// device asks for more.
public struct PairingPolicy: PairingAgent {
    /// `--passkey N`: the passkey to type when the device displays one.
    public var passkey: UInt32?
    /// `--accept-pairing`: confirm a numeric comparison without asking.
    public var acceptsComparison: Bool
    /// A terminal to ask on when neither was given.
    public var prompt: (any PairingPrompt)?
    /// False for a device whose bond must exist already (a device list's `bonded`).
    public var pairsAnew: Bool

    public init(passkey: UInt32? = nil, acceptsComparison: Bool = false, prompt: (any PairingPrompt)? = nil, pairsAnew: Bool = true) {
        self.pairsAnew = pairsAnew
        self.passkey = passkey
        self.acceptsComparison = acceptsComparison
        self.prompt = prompt
    }

    /// Just Works only: no passkey, no comparison, no terminal.
    public static let justWorks = PairingPolicy()

    /// A passkey as a person writes one: one to six ASCII digits, as the device shows them (leading
    /// zeros allowed; a sign, a space or a seventh digit is no passkey). The one reading of
    /// `--passkey`, a terminal's answer and a device list's `passkey` field.
    public static func passkey(parsing text: String) -> UInt32? {
        guard (1...6).contains(text.count), text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt32(text)
    }

    /// A given passkey (`--passkey`) says the device pairs by passkey entry, and
    /// `--accept-pairing` that it pairs by numeric comparison.
    public var expectsPairing: Bool { passkey != nil || acceptsComparison }

    /// What it can answer: a terminal can do everything; a passkey alone means
    /// typing; an acceptance alone means a yes/no display.
    public var ioCapability: PairingIOCapability {
        if prompt != nil || (passkey != nil && acceptsComparison) { return .keyboardDisplay }
        if passkey != nil { return .keyboardOnly }
        if acceptsComparison { return .displayYesNo }
        return .noInputNoOutput
    }

    public func passkey(for device: String) async throws(PairingError) -> UInt32 {
        if let passkey { return passkey }
        if let prompt, let typed = await prompt.readPasskey("passkey shown by \(device): ") { return typed }
        throw .needsUserInput(.passkeyEntry)
    }

    public func confirm(_ number: UInt32, for device: String) async throws(PairingError) -> Bool {
        if acceptsComparison { return true }
        if let prompt {
            return await prompt.confirm("does \(device) show \(PairingError.sixDigits(number))? [y/N] ")
        }
        throw .needsUserInput(.numericComparison)
    }

    public func display(_ passkey: UInt32, for device: String) async {
        await prompt?.show("type \(PairingError.sixDigits(passkey)) on \(device)")
    }
}

/// The answers for the devices of a fleet, each its own (a device list's passkeys), as one agent.
///
/// An adapter has one pairing agent: the kernel (or bluetoothd) asks it for whichever device is
/// pairing, and announces one IO capability for all of them. So each connection of a fleet passes
/// one of these, all made from the same table: whichever is the adapter's agent at the moment
/// answers every device by its address. The IO capability is the table's: KeyboardOnly once any
/// device has a passkey, so a device that shows a passkey but has none in the table fails alone.
public struct PerDevicePairing: PairingAgent {
    /// The device this connection is for (its address), whose ``expectsPairing`` and ``pairsAnew`` count.
    public let device: String
    /// Every device's answers, by upper-cased address.
    public let policies: [String: PairingPolicy]
    /// For a device the table does not name.
    public let fallback: PairingPolicy

    public init(device: String, policies: [String: PairingPolicy], fallback: PairingPolicy = .justWorks) {
        self.device = device.uppercased()
        var table: [String: PairingPolicy] = [:]
        for (address, policy) in policies { table[address.uppercased()] = policy }
        self.policies = table
        self.fallback = fallback
    }

    func policy(for address: String) -> PairingPolicy { policies[address.uppercased()] ?? fallback }

    public var ioCapability: PairingIOCapability {
        let all = Array(policies.values) + [fallback]
        let types = all.contains { $0.passkey != nil }, confirms = all.contains(where: \.acceptsComparison)
        if all.contains(where: { $0.prompt != nil }) || (types && confirms) { return .keyboardDisplay }
        if types { return .keyboardOnly }
        return confirms ? .displayYesNo : .noInputNoOutput
    }

    public var expectsPairing: Bool { policy(for: device).expectsPairing }
    public var pairsAnew: Bool { policy(for: device).pairsAnew }

    public func passkey(for device: String) async throws(PairingError) -> UInt32 {
        let policy = policy(for: device)
        guard policy.pairsAnew else { throw .noBond }
        return try await policy.passkey(for: device)
    }

    public func confirm(_ number: UInt32, for device: String) async throws(PairingError) -> Bool {
        let policy = policy(for: device)
        guard policy.pairsAnew else { throw .noBond }
        return try await policy.confirm(number, for: device)
    }

    public func display(_ passkey: UInt32, for device: String) async { await policy(for: device).display(passkey, for: device) }
}
