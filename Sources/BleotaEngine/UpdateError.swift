/// The steps of an update, in order. Every failure names the one it happened in,
/// so "verification failed" is never confused with "link lost while verifying".
public enum UpdateStep: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    case load
    case connect
    case enterBootloader = "enter-bootloader"
    case reconnect
    case transfer
    case verify
    case activate
    case confirm
    /// File transfers (`push`/`pull`) use the transfer and verify steps plus this one.
    case store

    public var description: String { rawValue }
}

/// A failure of an update or transfer: what kind, in which step, what to do.
///
/// The message is one line written for the person at the terminal; the code
/// decides the exit status; the step says where in the sequence it happened.
public struct TransferError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable, Codable {
        /// A tuning value is out of range (a usage error).
        case invalidTuning
        /// The input image or file is unusable.
        case badInput
        /// The device answered with an error or refused.
        case deviceRefused
        /// The device's checks of the image failed, or the host's of a pulled file.
        case verificationFailed
        /// The link dropped and reconnecting failed, or the device could not be found.
        case linkLost
        /// The device stopped answering (acknowledgement timeouts exhausted).
        case timeout
        /// The device said something that breaks the protocol.
        case protocolViolation
        /// The device came back running something other than what was sent.
        case confirmFailed
        /// The protocol cannot do what was asked (a usage error).
        case unsupported
        /// The device runs a version the update is not for (``PreparedImage/fromVersions``,
        /// `--from-version`): nothing was sent. A fleet lists the device as another version's,
        /// not as failed.
        case otherVersion
        /// Pairing failed, or could not be done with what was given (a passkey, a bond): exit 13.
        case pairingFailed
    }

    public var code: Code
    public var step: UpdateStep
    public var message: String
    /// What the device runs after the failure, when the failure came after the
    /// activation could have reached it (nil: nothing on the device changed).
    public var outcome: DeviceOutcome?

    public init(_ code: Code, step: UpdateStep, _ message: String) {
        self.code = code
        self.step = step
        self.message = message
    }

    public var description: String {
        guard let outcome else { return "\(step) failed: \(message)" }
        return "\(step) failed: \(message); \(outcome.sentence)"
    }
}

/// What a device runs after an update that failed late, found by reconnecting
/// and asking it: never left to guesswork.
public enum DeviceOutcome: Sendable, Hashable, Codable {
    /// The new image runs and is confirmed: the update took effect in the end.
    case newImageConfirmed
    /// The new image runs but is not confirmed: the bootloader reverts it at the next reset unless it is confirmed.
    case newImageUnconfirmed
    /// The old image runs (its version); nothing changed.
    case oldImage(String)
    /// The device is in its bootloader, running neither image until it is flashed again.
    case inBootloader
    /// The device could not be reached to find out.
    case unknown

    /// For `--json`: "new-image-confirmed", "new-image-unconfirmed", "old-image", "unknown".
    public var name: String {
        switch self {
        case .newImageConfirmed: "new-image-confirmed"
        case .newImageUnconfirmed: "new-image-unconfirmed"
        case .oldImage: "old-image"
        case .inBootloader: "in-bootloader"
        case .unknown: "unknown"
        }
    }

    /// The version of an old image the protocol cannot name (its device reports none): said as
    /// "its old image", not "its old image (its old image)".
    public static let unnamedOldImage = "its old image"

    public var sentence: String {
        switch self {
        case .newImageConfirmed: "the device runs the new image, confirmed"
        case .newImageUnconfirmed: "the device runs the new image but it is not confirmed: confirm it (bleota image state --confirm) or it is reverted at the next reset"
        case .oldImage(Self.unnamedOldImage): "the device still runs its old image"
        case .oldImage(let version): "the device still runs its old image (\(version))"
        case .inBootloader: "the device waits in its bootloader: run the same command again to finish the update"
        case .unknown: "the device could not be reached afterwards, so what it runs is unknown: check it with bleota image state"
        }
    }
}
