/// What to do when a device answered nothing to the first requests on a link that may be
/// less secure than it wants.
///
/// Some GATT servers protect a characteristic's value but not its Client Characteristic
/// Configuration descriptor (Bumble does by default, and several vendor SDKs set the two
/// permissions apart). A client then subscribes on a plain link without a word, and every
/// Write Command it sends is dropped: ATT cannot answer a command, so the refusal that would
/// have made the client pair never comes. The only sign is silence. So a connect whose
/// requests went unanswered is tried once more on a link raised to the next level the
/// pairing agent can reach, and, if that is silent too, the failure says what security is
/// likely missing and how to give it.
public enum SilentDropRecovery: Equatable, Sendable {
    /// Connect again and raise the link to `level` before writing anything.
    case retry(raisingTo: SecurityLevel)
    /// End with this pairing error: the device is silent on the best link this side can make.
    case fail(PairingError)
    /// End with the request's own error, with `hint` added when there is one.
    case report(hint: String?)

    /// The next step after a connect's requests went unanswered on a link that reached `reached`.
    /// `raised` says whether this connect was already the retry; `canAuthenticate` whether the
    /// pairing agent can answer a passkey or a comparison (a terminal, `--passkey`,
    /// `--accept-pairing`), without which pairing is Just Works and the key unauthenticated.
    public static func next(reached: SecurityLevel, raised: Bool, canAuthenticate: Bool) -> SilentDropRecovery {
        switch reached {
        case .low where !raised:
            return .retry(raisingTo: .medium)
        case .low:
            return .report(hint: Self.plainLinkHint)
        case .medium where !canAuthenticate:
            return .fail(.unansweredWithoutAuthentication)
        case .medium where !raised:
            return .retry(raisingTo: .high)
        case _ where raised:
            return .report(hint: "; the device answered nothing on a link encrypted at security \(reached.name) either: check that it runs the service bleota speaks")
        default:
            return .report(hint: nil)
        }
    }

    /// The level a connector raises a new link to before its first write: what a retry asked
    /// (`asked`), and at least medium (pairing, or encryption with the bond) when the user said the
    /// device pairs or a bond is kept with it; low (nothing) otherwise. One rule for every connector.
    public static func levelBeforeWriting(asked: SecurityLevel, expectsPairing: Bool, bonded: Bool) -> SecurityLevel {
        max(asked, expectsPairing || bonded ? .medium : .low)
    }

    /// What a silent plain link most likely means, and the fix.
    public static let plainLinkHint =
        "; a device that demands encryption may drop writes on a plain link without a word: if it pairs, give --passkey (or ?security=medium in the address for Just Works)"
}

/// A connector that can connect again with every link raised to a security level before anything
/// is written on it: what ``SilentDropRecovery/retry(raisingTo:)`` needs.
public protocol SecurityRaisingConnector: DeviceConnector {
    /// The security each link reached, and the pairing failure that ended connecting; shared with
    /// the connectors ``raisingSecurity(to:)`` makes.
    var security: ConnectionSecurityRecord { get }
    /// This connector, raising every link to at least `level` before writing on it.
    func raisingSecurity(to level: SecurityLevel) -> Self
}
