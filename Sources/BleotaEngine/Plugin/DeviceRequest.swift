import BleotaLink
import Logging

/// A request to a device that names the answer it expects, as smpclient's requests name their
/// responses: the host says what it asks, the request says what counts as its answer, and one
/// exchange (`HostContext.request(_:on:step:policy:)`, over ``HostContext/exchange(_:step:policy:send:answer:)``) owns sending, waiting, trying again
/// and telling a lost answer from a link that went away.
///
/// This form carries bytes on a ``/BleotaLink/Link``; ``ChannelRequest`` is the same for a
/// protocol that spans characteristics.
public protocol DeviceRequest: Sendable {
    /// What the answer is once decoded.
    associatedtype Response: Sendable
    /// The request for messages: "the version request".
    var what: String { get }
    /// The bytes that carry it.
    func encode() -> [UInt8]
    /// The answer `packet` carries, or nil when it carries none (an answer to an earlier request
    /// that came late, a notification, a damaged packet): such packets are skipped while waiting.
    /// An answer that says no, and that asking again cannot change, throws its ``DeviceRefusal``.
    func response(from packet: [UInt8]) throws(DeviceRefusal) -> Response?
}

/// A request on the channels of a ``/BleotaLink/ChannelLink`` (a protocol that spans several
/// characteristics): one message out, and the message that answers it. Performed by
/// `HostContext.request(_:on:step:policy:)` with the same policy and
/// matching as a ``DeviceRequest``.
public protocol ChannelRequest: Sendable {
    /// What the answer is once decoded.
    associatedtype Response: Sendable
    /// The request for messages: "a read of the DFU revision".
    var what: String { get }
    /// The message that carries it.
    func encode() -> ChannelMessage
    /// The answer `message` carries, or nil when it carries none (another channel, a late answer);
    /// a final refusal throws.
    func response(from message: ChannelMessage) throws(DeviceRefusal) -> Response?
}

/// An answer that ends a request: the device said no, or said something its protocol does not
/// allow. The exchange names the step it happened in.
public struct DeviceRefusal: Error, Sendable, Equatable {
    /// ``TransferError/Code/deviceRefused``, or ``TransferError/Code/protocolViolation`` for an answer outside the protocol.
    public var code: TransferError.Code
    /// What the device said, for the user.
    public var message: String

    public init(_ code: TransferError.Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The device said no: ``TransferError/Code/deviceRefused``.
    public init(_ message: String) { self.init(.deviceRefused, message) }
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

    /// The same policy with another wait per try.
    public func waiting(_ timeout: Duration) -> RequestPolicy {
        RequestPolicy(timeout: timeout, attempts: attempts, backoff: backoff)
    }

    /// The one loop of tries every exchange shares: `attempt` (given its number, from 1) runs until
    /// it returns an answer, at most ``attempts`` times, with ``backoff`` on `clock` after each
    /// unanswered try but the last. Nil when no try was answered, or the pause was cancelled;
    /// whatever `attempt` throws ends the loop.
    public func tries<Answer, Failure: Error>(
        on clock: any BleotaClock, _ attempt: (_ number: Int) async throws(Failure) -> Answer?
    ) async throws(Failure) -> Answer? {
        for number in 1...attempts {
            if let answer = try await attempt(number) { return answer }
            if backoff > .zero, number != attempts {
                do { try await clock.sleep(for: backoff) } catch { return nil }
            }
        }
        return nil
    }
}

extension HostContext {
    /// Sends `request` on `link` and returns its answer, trying again as `policy` says (the
    /// command line's `--response-timeout` and `--attempts` by default). Packets that carry no
    /// answer to it are skipped; a refusal ends the exchange as the step's
    /// ``TransferError/Code/deviceRefused``; a link that closes ends it at once as
    /// ``TransferError/Code/linkLost`` for `step`, and no answer after the last try as
    /// ``TransferError/Code/timeout``, naming the request.
    public func request<Request: DeviceRequest>(
        _ request: Request, on link: any Link, step: UpdateStep, policy: RequestPolicy? = nil
    ) async throws(TransferError) -> Request.Response {
        let bytes = request.encode()
        return try await exchange(request.what, step: step, policy: policy) { () async throws(LinkError) in
            try await link.send(bytes)
        } answer: {
            while true {
                // A closed link ends the wait (it throws); a packet that answers something else is skipped.
                if let answer = try request.response(from: try await link.receive()) { return answer }
            }
        }
    }

    /// The ``ChannelRequest`` form: `request`'s message on `link`'s channels, its answer among the messages that come back.
    public func request<Request: ChannelRequest>(
        _ request: Request, on link: any Link, step: UpdateStep, policy: RequestPolicy? = nil
    ) async throws(TransferError) -> Request.Response {
        let message = request.encode()
        return try await exchange(request.what, step: step, policy: policy) { () async throws(LinkError) in
            try await link.send(message: message)
        } answer: {
            while true {
                if let answer = try request.response(from: try await link.receiveMessage()) { return answer }
            }
        }
    }

    /// The exchange under both forms, and under a protocol whose answers span packets (native's
    /// reassembly): `send` puts the request on the air, `answer` waits for its answer (skipping
    /// what is not), each try within the policy's timeout on the injected clock.
    public func exchange<Response: Sendable>(
        _ what: String, step: UpdateStep, policy: RequestPolicy? = nil,
        send: @escaping @Sendable () async throws(LinkError) -> Void,
        answer: @escaping @Sendable () async throws -> Response
    ) async throws(TransferError) -> Response {
        let policy = policy ?? RequestPolicy(timeouts)
        let answered = try await policy.tries(on: clock) { (number) async throws(TransferError) -> Response? in
            do {
                try await send()
                return try await withDeadline(policy.timeout, clock: clock) { try await answer() }
            } catch is DeadlineExceeded {
                logger.debug("no answer to \(what) (try \(number) of \(policy.attempts))")
                return nil
            } catch let refusal as DeviceRefusal {
                throw TransferError(refusal.code, step: step, refusal.message)
            } catch {
                throw TransferError(.linkLost, step: step, "\(connector.description) dropped the link during \(what): \(error)")
            }
        }
        guard let answered else {
            throw TransferError(
                .timeout, step: step,
                "no answer to \(what) after \(policy.attempts) \(policy.attempts == 1 ? "try" : "tries"): check the device is powered and in range")
        }
        return answered
    }

    /// A link to the device within `timeout`, or the failure named for `step`.
    public func connect(_ purpose: ConnectPurpose, step: UpdateStep, timeout: Duration) async throws(TransferError) -> any Link {
        do { return try await connector.connect(for: purpose, timeout: timeout) } catch {
            throw TransferError(.linkLost, step: step, "cannot reach \(connector.description): \(error)")
        }
    }
}

/// The channels a ``/BleotaLink/ChannelLink`` offers now: what GATT discovery found on a real
/// device, which tells an application from its bootloader.
public struct DirectoryRequest: ChannelRequest {
    public init() {}
    public var what: String { "the list of its characteristics" }
    public func encode() -> ChannelMessage { .directoryQuery }
    public func response(from message: ChannelMessage) -> Set<UInt8>? {
        if case .directory(let channels) = message { return Set(channels) }
        return nil
    }
}
