import Synchronization

/// How well a Bluetooth LE link is protected: the four levels of LE security
/// mode 1 (Core v5.4, Vol 3, Part C, §10.2.1), which are also the kernel's
/// `BT_SECURITY` levels.
///
/// Why a host cares: a device decides per characteristic what it demands.
/// Zephyr's MCUmgr transport demands an authenticated link by default
/// (`CONFIG_MCUMGR_TRANSPORT_BT_PERM_RW_AUTHEN`), Nordic's bonded buttonless
/// DFU an encrypted one; below that level its writes are refused or dropped.
public enum SecurityLevel: Int, Sendable, Hashable, Codable, CaseIterable, Comparable, CustomStringConvertible {
    /// No encryption (mode 1 level 1).
    case low = 1
    /// Encrypted with a key from unauthenticated pairing: Just Works (level 2).
    case medium = 2
    /// Encrypted with a key from authenticated (MITM-protected) pairing: passkey
    /// entry, numeric comparison or out of band (level 3).
    case high = 3
    /// Authenticated LE Secure Connections with a 128-bit key (level 4).
    case fips = 4

    /// The name the command line and reports use.
    public var name: String {
        switch self {
        case .low: "low"
        case .medium: "medium"
        case .high: "high"
        case .fips: "fips"
        }
    }

    /// Parses `low`, `medium`, `high` or `fips`, and the simulator's synonyms
    /// `none`, `encrypted` and `authenticated`.
    public init?(name: String) {
        switch name.lowercased() {
        case "low", "none": self = .low
        case "medium", "encrypted": self = .medium
        case "high", "authenticated": self = .high
        case "fips", "secure-connections": self = .fips
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .low: "low (not encrypted)"
        case .medium: "medium (encrypted, unauthenticated)"
        case .high: "high (encrypted, authenticated)"
        case .fips: "fips (encrypted, authenticated LE Secure Connections)"
        }
    }

    public static func < (lhs: SecurityLevel, rhs: SecurityLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    public static let names = "low, medium, high or fips"

    /// Encoded by name (`"high"`), as the command line writes it.
    public init(from decoder: any Decoder) throws {
        let name = try decoder.singleValueContainer().decode(String.self)
        guard let level = SecurityLevel(name: name) else {
            throw Swift.DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "'\(name)' is not \(Self.names)"))
        }
        self = level
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(name)
    }
}

/// A device's refusal that more security would cure: the three ATT errors for
/// which BlueZ's ATT layer (`src/shared/att.c`) raises the link's security and
/// repeats the request.
public enum SecurityShortfall: Error, Sendable, Hashable, CustomStringConvertible {
    /// ATT Insufficient Authentication (0x05): the link is not encrypted, or its
    /// key did not come from authenticated pairing.
    case authentication
    /// ATT Insufficient Encryption (0x0F): the link is not encrypted.
    case encryption
    /// ATT Insufficient Encryption Key Size (0x0C): the key is shorter than the device wants.
    case encryptionKeySize

    public var description: String {
        switch self {
        case .authentication: "insufficient authentication"
        case .encryption: "insufficient encryption"
        case .encryptionKeySize: "insufficient encryption key size"
        }
    }

    /// The level to raise a link at `current` to, or nil when no higher level cures this.
    ///
    /// BlueZ's rule: missing encryption asks for medium; missing authentication
    /// goes one level up from where the link is (medium, then high, then fips);
    /// a short key is cured only by pairing again for a full-size key, which
    /// the authenticated Secure Connections level (fips) demands.
    public func levelNeeded(from current: SecurityLevel) -> SecurityLevel? {
        switch self {
        case .encryption:
            return current < .medium ? .medium : nil
        case .authentication:
            switch current {
            case .low: return .medium
            case .medium: return .high
            case .high: return .fips
            case .fips: return nil
            }
        case .encryptionKeySize:
            return current < .fips ? .fips : nil
        }
    }
}

/// How the keys protecting a link were made.
public enum PairingMethod: String, Sendable, Hashable, Codable, CustomStringConvertible {
    /// Unauthenticated: neither side could show or enter a number.
    case justWorks = "just-works"
    /// One side displays a six-digit passkey, the other enters it.
    case passkeyEntry = "passkey-entry"
    /// Both sides display a six-digit number and a person confirms they match (Secure Connections only).
    case numericComparison = "numeric-comparison"
    /// Keys stored from an earlier pairing (a bond) were used: no pairing ran.
    case storedKey = "stored-key"

    public var description: String {
        switch self {
        case .justWorks: "Just Works"
        case .passkeyEntry: "passkey entry"
        case .numericComparison: "numeric comparison"
        case .storedKey: "a stored bond"
        }
    }
}

/// What protects an open link: its level, and when it was encrypted, how.
public struct LinkSecurityState: Sendable, Hashable, Codable, CustomStringConvertible {
    public var level: SecurityLevel
    /// How the key was made, when this link paired or used a bond; nil when the
    /// transport does not say (a kernel link encrypted before bleota looked).
    public var method: PairingMethod?
    /// True for LE Secure Connections, false for LE legacy pairing, nil when unknown.
    public var secureConnections: Bool?
    /// True when the keys were kept for later connections.
    public var bonded: Bool

    public init(level: SecurityLevel, method: PairingMethod? = nil, secureConnections: Bool? = nil, bonded: Bool = false) {
        self.level = level
        self.method = method
        self.secureConnections = secureConnections
        self.bonded = bonded
    }

    public static let unencrypted = LinkSecurityState(level: .low)

    /// `high (encrypted, authenticated) by passkey entry, LE Secure Connections, bonded`.
    public var description: String {
        var parts = [level.description]
        if let method { parts[0] += " by \(method)" }
        if let secureConnections { parts.append(secureConnections ? "LE Secure Connections" : "LE legacy pairing (the device cannot do Secure Connections)") }
        if bonded { parts.append("bonded") }
        return parts.joined(separator: ", ")
    }
}

/// Why the Security Manager stopped a pairing: the reason of an SMP Pairing
/// Failed PDU (Core v5.4, Vol 3, Part H, §3.5.5). Unknown codes keep their value.
public struct PairingFailureReason: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let passkeyEntryFailed = PairingFailureReason(rawValue: 0x01)
    public static let oobNotAvailable = PairingFailureReason(rawValue: 0x02)
    public static let authenticationRequirements = PairingFailureReason(rawValue: 0x03)
    public static let confirmValueFailed = PairingFailureReason(rawValue: 0x04)
    public static let pairingNotSupported = PairingFailureReason(rawValue: 0x05)
    public static let encryptionKeySize = PairingFailureReason(rawValue: 0x06)
    public static let commandNotSupported = PairingFailureReason(rawValue: 0x07)
    public static let unspecifiedReason = PairingFailureReason(rawValue: 0x08)
    public static let repeatedAttempts = PairingFailureReason(rawValue: 0x09)
    public static let invalidParameters = PairingFailureReason(rawValue: 0x0A)
    public static let dhKeyCheckFailed = PairingFailureReason(rawValue: 0x0B)
    public static let numericComparisonFailed = PairingFailureReason(rawValue: 0x0C)
    public static let pairingInProgress = PairingFailureReason(rawValue: 0x0D)
    public static let crossTransportKeyDerivationNotAllowed = PairingFailureReason(rawValue: 0x0E)

    public var description: String {
        switch self {
        case .passkeyEntryFailed: "passkey entry failed"
        case .oobNotAvailable: "out-of-band data not available"
        case .authenticationRequirements: "authentication requirements cannot be met"
        case .confirmValueFailed: "confirm value failed (the passkeys did not match)"
        case .pairingNotSupported: "pairing not supported"
        case .encryptionKeySize: "encryption key too short"
        case .commandNotSupported: "command not supported"
        case .unspecifiedReason: "unspecified reason"
        case .repeatedAttempts: "repeated attempts (the device waits before it pairs again)"
        case .invalidParameters: "invalid parameters"
        case .dhKeyCheckFailed: "DHKey check failed (the passkeys or numbers did not match)"
        case .numericComparisonFailed: "numeric comparison failed (the numbers were not confirmed)"
        case .pairingInProgress: "pairing already in progress"
        case .crossTransportKeyDerivationNotAllowed: "cross-transport key derivation not allowed"
        default: "reason 0x\(String(rawValue, radix: 16))"
        }
    }
}

/// Why a link could not reach the security it needed. Every case says what to do.
public enum PairingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The Security Manager failed the pairing; `byDevice` when the device sent the reason.
    case failed(PairingFailureReason, byDevice: Bool)
    /// The pairing ended without a reason the host could learn (the kernel reports only "authentication failed").
    case authenticationFailed(String)
    /// Authenticated pairing needs a passkey or a confirmation nobody gave.
    case needsUserInput(PairingMethod)
    /// The person (or `--accept-pairing` left out) declined the number shown.
    case comparisonRejected(UInt32)
    /// No answer within the Security Manager's 30 s.
    case timeout
    /// Pairing completed but below the level the device demands (Just Works cannot give `high`).
    case levelNotReached(wanted: SecurityLevel, reached: SecurityLevel)
    /// The device still refused at the highest level bleota can reach.
    case refusedAtHighestLevel(SecurityShortfall)
    /// The link dropped during pairing.
    case linkLost(String)
    /// The device answered nothing on a link encrypted by Just Works, the best this side could do
    /// with no passkey, comparison or terminal (``SilentDropRecovery``).
    case unansweredWithoutAuthentication
    /// This transport cannot pair (UDP, serial).
    case unsupported(String)
    /// The device must be reached with a bond this host already holds (a device list's `bonded`),
    /// and there is none: it is not paired anew, so neither a device that lost its bond nor one
    /// posing as it gets a new one.
    case noBond

    public var description: String {
        switch self {
        case .failed(let reason, let byDevice):
            let fix: String
            switch reason {
            case .confirmValueFailed, .passkeyEntryFailed, .dhKeyCheckFailed:
                fix = "check the passkey the device shows and give it with --passkey"
            case .numericComparisonFailed:
                fix = "compare the numbers and accept with --accept-pairing (or at the prompt)"
            case .authenticationRequirements:
                fix = "the device demands a pairing method this side cannot do: give --passkey, or --accept-pairing for numeric comparison"
            case .repeatedAttempts:
                fix = "wait a minute and try again"
            case .pairingNotSupported:
                fix = "the device does not pair; connect without security="
            default:
                fix = "remove the device's old bond (bleota bond remove ADDRESS, and on the device) and try again"
            }
            return "pairing failed\(byDevice ? " at the device" : ""): \(reason): \(fix)"
        case .authenticationFailed(let detail):
            return "pairing failed (\(detail)): check the passkey, or remove a stale bond with `bleota bond remove ADDRESS` (and on the device) and pair again"
        case .needsUserInput(let method):
            switch method {
            case .numericComparison:
                return "the device asks to confirm a number (numeric comparison): run on a terminal to be asked, or give --accept-pairing"
            default:
                return "the device asks for a passkey: give it with --passkey N, or run on a terminal to be asked"
            }
        case .comparisonRejected(let number):
            return "pairing rejected: the number \(Self.sixDigits(number)) was not confirmed; give --accept-pairing once it matches the device's"
        case .timeout:
            return "pairing timed out after 30 s with no answer: is the device waiting for input?"
        case .levelNotReached(let wanted, let reached):
            return "the link reached security \(reached.name), but the device demands \(wanted.name): give --passkey or --accept-pairing so pairing can authenticate"
        case .refusedAtHighestLevel(let shortfall):
            return "the device still answers \(shortfall) at the highest security bleota can reach: check its security settings"
        case .linkLost(let why):
            return "the link dropped while pairing: \(why)"
        case .unansweredWithoutAuthentication:
            return
                "the device answered nothing on a link encrypted by Just Works, so it likely demands an authenticated link: give --passkey N with the passkey it shows (or --accept-pairing if it shows a number to compare)"
        case .unsupported(let why):
            return "this link cannot be encrypted: \(why)"
        case .noBond:
            return
                "the device list says this device is bonded, and this host holds no bond with it, so it is not paired anew: pair it once (bleota bond pair), or give its passkey in the list instead"
        }
    }

    /// `012345`: passkeys and comparison numbers are always six digits.
    public static func sixDigits(_ value: UInt32) -> String {
        let digits = String(value % 1_000_000)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }
}

/// The security of one Bluetooth LE connection, which its host can raise: the
/// Security Manager pairs, or encrypts with a stored bond, on request.
///
/// Held beside a link rather than by it: the ATT bearer raises security when a
/// request is refused for want of it, and the connector reports what the
/// connection reached; nothing above them needs to know.
public protocol LinkSecurityControl: Sendable {
    /// What protects the link now.
    var security: LinkSecurityState { get async }
    /// Raises the link to at least `level` (pairing, or encrypting with a
    /// stored bond) and returns what it reached, which may be more than
    /// asked. Throws when it cannot reach `level`; the link may then be gone.
    func raiseSecurity(to level: SecurityLevel) async throws(PairingError) -> LinkSecurityState
}

/// Runs `request`; when the device refuses it for want of security, raises
/// the link's security to the next level BlueZ's rule names
/// (``SecurityShortfall/levelNeeded(from:)``) and runs it once more, until it
/// passes or no higher level is left.
///
/// Each raise is followed by one repeat, as in BlueZ's `att.c`; a link that
/// pairs Just Works when the device wants authentication is raised again,
/// since only authenticated pairing can cure that. `shortfall` tells whether
/// an error is such a refusal. Without a `control` (a transport that cannot
/// pair) the refusal is thrown as it came.
public func withSecurityOnDemand<Value: Sendable, Failure: Error>(
    isolation: isolated (any Actor)? = #isolation,
    control: (any LinkSecurityControl)?,
    shortfall: (Failure) -> SecurityShortfall?,
    _ request: () async throws(Failure) -> Value
) async throws -> Value {
    while true {
        do {
            return try await request()
        } catch {
            guard let control, let missing = shortfall(error) else { throw error }
            let current = await control.security.level
            guard let needed = missing.levelNeeded(from: current) else { throw PairingError.refusedAtHighestLevel(missing) }
            // Each pass raises the level (or throws), so the loop ends.
            let reached = try await control.raiseSecurity(to: needed).level
            guard reached >= needed else { throw PairingError.levelNotReached(wanted: needed, reached: reached) }
        }
    }
}

/// What a connector's links reached, for the report, and the pairing failure
/// that ends its connecting: a wrong passkey is not cured by trying again (and a
/// device counts repeated attempts), so once pairing failed every later connect
/// fails at once with the same error.
public final class ConnectionSecurityRecord: Sendable {
    private struct State {
        var latest: LinkSecurityState?
        var failure: PairingError?
    }
    private let state = Mutex(State())

    public init() {}

    /// What the links reached: the last one's level, with the pairing that made
    /// its keys when one ran in this session (later links encrypt with the bond
    /// it left, which says less). Nil before any link was opened.
    public var latest: LinkSecurityState? { state.withLock { $0.latest } }
    /// The pairing failure that ended connecting, if one did.
    public var failure: PairingError? { state.withLock { $0.failure } }

    public func record(_ security: LinkSecurityState) {
        state.withLock { state in
            if security.method == .storedKey, let earlier = state.latest, earlier.method != .storedKey, earlier.method != nil,
                earlier.level == security.level
            {
                return
            }
            state.latest = security
        }
    }
    public func record(_ failure: PairingError) { state.withLock { $0.failure = $0.failure ?? failure } }

    /// Throws the recorded failure, so a connector does not pair again after it failed.
    public func checkNotFailed() throws(LinkError) {
        if let failure { throw .security(failure) }
    }
}
