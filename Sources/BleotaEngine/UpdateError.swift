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
    }

    public var code: Code
    public var step: UpdateStep
    public var message: String

    public init(_ code: Code, step: UpdateStep, _ message: String) {
        self.code = code
        self.step = step
        self.message = message
    }

    public var description: String { "\(step) failed: \(message)" }
}
