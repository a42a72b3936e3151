import BleotaLink

/// Why one try of an update's transfer ended short: what a host half's try throws,
/// and what ``UpdateTries`` decides on.
public enum TryFailure: Error {
    /// What a try that is worth another says about itself.
    public struct Retry: Sendable {
        /// One line: what went wrong.
        public var reason: String
        /// The link dropped (or the device stopped answering), rather than the image arriving damaged
        /// or incomplete: what the error says if no try is left.
        public var linkDropped: Bool
        /// What this try sent may have made the device take the image (an END whose answer was
        /// lost, the last sector of a device that restarts by itself): from then on a failure
        /// cannot say the old image runs.
        public var mayHaveActivated: Bool
        /// A link already open to the device, for the next try.
        public var connection: (any Link)?
        /// Whether this try counts towards the limit. A try the host can make better by
        /// itself (fewer packets between receipts after packets were lost) does not, so long
        /// as the host has such a change left to make.
        public var counts: Bool
        /// Whether the try took the transfer further before it failed (a part of a package
        /// delivered whole): it then counts as the first try of what is left, so the limit bounds
        /// the tries of each part, not of the whole.
        public var progressed: Bool

        public init(
            reason: String, linkDropped: Bool = false, mayHaveActivated: Bool = false, connection: (any Link)? = nil, counts: Bool = true,
            progressed: Bool = false
        ) {
            self.reason = reason
            self.linkDropped = linkDropped
            self.mayHaveActivated = mayHaveActivated
            self.connection = connection
            self.counts = counts
            self.progressed = progressed
        }
    }

    /// Worth another try: the link dropped, or the image did not arrive whole.
    case again(Retry)
    /// No use trying again: the device refused, or something is wrong with the image.
    case final(TransferError)

    /// Worth another try, for `reason`.
    public static func retry(
        _ reason: String, linkDropped: Bool = false, mayHaveActivated: Bool = false, connection: (any Link)? = nil, counts: Bool = true,
        progressed: Bool = false
    ) -> TryFailure {
        .again(
            Retry(reason: reason, linkDropped: linkDropped, mayHaveActivated: mayHaveActivated, connection: connection, counts: counts, progressed: progressed))
    }

    /// The one-line reason of a retry, or the error's message.
    public var reason: String {
        switch self {
        case .again(let retry): retry.reason
        case .final(let error): error.message
        }
    }
}

/// The one retry policy of host halves: up to `limit` tries of a transfer, with the
/// host getting ready again between them, and what the device runs named when they
/// run out or one fails for good.
///
/// Each host used to write this loop again (count the try, run it, on a retryable
/// failure check the count, note it, reconnect, go round); what differs between
/// protocols is only what a try is, how the host gets ready for the next, and what
/// running out means, which are the three closures of ``run(_:between:exhausted:)``.
public struct UpdateTries {
    /// How many tries at most.
    public let limit: Int
    /// The tries counted so far (the one running included); see ``TryFailure/Retry/counts``.
    public private(set) var attempt = 0
    /// Whether a try may have made the device take the image: sticky across tries.
    public private(set) var mayHaveActivated = false

    /// Whether tries that run out leave the old image running, as they do on a device
    /// that keeps it until the new one is whole. A bootloader that boots whatever its bank
    /// holds after a reset (Nordic's legacy DFU, after an earlier part of a package was
    /// applied) leaves that unknown to the host, which then says nothing.
    public let exhaustionKeepsTheOldImage: Bool

    public init(limit: Int, exhaustionKeepsTheOldImage: Bool = true) {
        self.limit = max(1, limit)
        self.exhaustionKeepsTheOldImage = exhaustionKeepsTheOldImage
    }

    /// What the device runs when the tries end in failure: unknown once a try may have
    /// activated the image, its old image otherwise.
    public var outcomeAfterFailure: DeviceOutcome { mayHaveActivated ? .unknown : .oldImage(DeviceOutcome.unnamedOldImage) }

    /// Runs `body` (given the try's number, from 1; a try that did not count gives its
    /// number to the next) until it returns.
    ///
    /// - On ``TryFailure/again(_:)`` with tries left, `between` gets the host ready for the
    ///   next try (a note, a reconnect, a slower pace; the retry carries the link the failure
    ///   came with, if any), then `body` runs again.
    /// - With none left, `exhausted` makes the error thrown (given the last retry and the tries
    ///   made); its outcome, if it sets none, is ``outcomeAfterFailure`` (none when the
    ///   old image may not be kept: see ``exhaustionKeepsTheOldImage``).
    /// - ``TryFailure/final(_:)`` is thrown as it is, its outcome unknown if an earlier try
    ///   may have activated the image and it says nothing itself.
    public mutating func run<Result>(
        _ body: (_ attempt: Int) async throws(TryFailure) -> Result,
        between: (_ retry: TryFailure.Retry) async throws(TransferError) -> Void,
        exhausted: (_ retry: TryFailure.Retry, _ attempts: Int) async -> TransferError
    ) async throws(TransferError) -> Result {
        while true {
            attempt += 1
            let failure: TryFailure
            do throws(TryFailure) {
                return try await body(attempt)
            } catch {
                failure = error
            }
            switch failure {
            case .final(var error):
                if error.outcome == nil, mayHaveActivated { error.outcome = .unknown }
                throw error
            case .again(let retry):
                if retry.mayHaveActivated { mayHaveActivated = true }
                if retry.progressed { attempt = 1 }
                if !retry.counts { attempt -= 1 }
                guard attempt < limit else {
                    var error = await exhausted(retry, attempt)
                    if error.outcome == nil, mayHaveActivated || exhaustionKeepsTheOldImage { error.outcome = outcomeAfterFailure }
                    throw error
                }
                try await between(retry)
            }
        }
    }
}
