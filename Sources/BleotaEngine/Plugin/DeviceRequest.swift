import BleotaLink
import Logging

/// A request to a device that names the answer it expects, as smpclient's requests name their
/// responses: the host says what it asks, the request says what counts as its answer, and one
/// exchange (``HostContext/request(_:on:step:policy:)``) owns sending, waiting, trying again
/// and telling a lost answer from a link that went away.
public protocol DeviceRequest: Sendable {
    /// What the answer is once decoded.
    associatedtype Response: Sendable
    /// The request for messages: "the version request".
    var what: String { get }
    /// The bytes that carry it.
    func encode() -> [UInt8]
    /// The answer `packet` carries, or nil when it carries none (an answer to an earlier request
    /// that came late, a notification, a damaged packet): such packets are skipped while waiting.
    func response(from packet: [UInt8]) -> Response?
}

/// How one request is tried: the wait for each answer, how many times it is sent, and the pause
/// between tries. A protocol sets its own (``init(_:)`` takes the command line's).
public struct RequestPolicy: Sendable, Equatable {
    /// How long each try waits for the answer.
    public var timeout: Duration
    /// How many times the request is sent before the exchange gives up.
    public var attempts: Int
    /// The pause after a try that went unanswered.
    public var backoff: Duration

    public init(timeout: Duration, attempts: Int, backoff: Duration = .zero) {
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
    }

    /// `--response-timeout` for each try, `--attempts` tries.
    public init(_ timeouts: StepTimeouts) {
        self.init(timeout: timeouts.response, attempts: timeouts.attempts)
    }
}

extension HostContext {
    /// Sends `request` on `link` and returns its answer, trying again as `policy` says (the
    /// command line's `--response-timeout` and `--attempts` by default). Packets that carry no
    /// answer to it are skipped; a link that closes ends the exchange at once as
    /// ``TransferError/Code/linkLost`` for `step`, and no answer after the last try as
    /// ``TransferError/Code/timeout``, naming the request.
    public func request<Request: DeviceRequest>(
        _ request: Request, on link: any Link, step: UpdateStep, policy: RequestPolicy? = nil
    ) async throws(TransferError) -> Request.Response {
        let policy = policy ?? RequestPolicy(timeouts)
        let bytes = request.encode()
        for attempt in 1...policy.attempts {
            do {
                try await link.send(bytes)
                return try await withDeadline(policy.timeout, clock: clock) { () async throws -> Request.Response in
                    while true {
                        // A closed link ends the wait (it throws); a packet that answers something else is skipped.
                        if let answer = request.response(from: try await link.receive()) { return answer }
                    }
                }
            } catch is DeadlineExceeded {
                logger.debug("no answer to \(request.what) (try \(attempt) of \(policy.attempts))")
                if policy.backoff > .zero, attempt != policy.attempts {
                    do { try await clock.sleep(for: policy.backoff) } catch { throw TransferError(.linkLost, step: step, "cancelled") }
                }
            } catch {
                throw TransferError(.linkLost, step: step, "\(error)")
            }
        }
        throw TransferError(
            .timeout, step: step,
            "no answer to \(request.what) after \(policy.attempts) \(policy.attempts == 1 ? "try" : "tries"): check the device is powered and in range")
    }

    /// A link to the device within `timeout`, or the failure named for `step`.
    public func connect(_ purpose: ConnectPurpose, step: UpdateStep, timeout: Duration) async throws(TransferError) -> any Link {
        do { return try await connector.connect(for: purpose, timeout: timeout) } catch {
            throw TransferError(.linkLost, step: step, "cannot reach \(connector.description): \(error)")
        }
    }
}
