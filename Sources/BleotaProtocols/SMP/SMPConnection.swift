import BleotaCodec
import BleotaEngine
import BleotaLink
import Synchronization

/// Why an SMP exchange failed, before it is given an update step.
public enum SMPClientError: Error, Sendable, Equatable, CustomStringConvertible {
    case timeout(String)
    case linkLost(LinkError)
    case malformed(String)
    case sequence(String)
    case device(SMPDeviceError)
    case field(String)

    public var description: String {
        switch self {
        case .timeout(let what): "no answer to \(what)"
        case .linkLost(let error): "the link dropped: \(error)"
        case .malformed(let why): "the device sent a malformed SMP response: \(why)"
        case .sequence(let why): why
        case .device(let error): error.description
        case .field(let why): "the device's answer does not fit the SMP schema: \(why)"
        }
    }
}

/// One SMP connection: sends requests with fresh sequence numbers and
/// collects the answers, putting them back together from the link's packets.
///
/// Requests can be pipelined: ``send(_:command:body:)`` returns the sequence
/// number, ``nextResponse(timeout:)`` the next answer. Answers are pulled from
/// the link by whoever waits for one (no reader task of its own, so it runs on
/// whatever executor and clock its caller does: the simulator's virtual one
/// included). A typed request (``request(_:timeout:attempts:)``) names its
/// response type and gets it decoded.
public final class SMPConnection: Sendable {
    public let link: any Link
    public let clock: any BleotaClock
    public let version: SMPHeader.Version
    private struct Incoming {
        var reassembler = SMPReassembler()
        var ready: [Result<SMPPacket, SMPClientError>] = []
    }
    private let incoming = Mutex(Incoming())
    private let sequence: Mutex<UInt8>
    /// Sequence numbers sent on this connection (answers to them may still arrive late).
    private let sent = Mutex<Set<UInt8>>([])
    /// Request-to-answer times on this connection, so a lost answer is given up on
    /// after a few round trips rather than the full worst-case timeout.
    private let roundTrip = Mutex(RoundTripEstimator())
    /// Where requests are cut into writes, once the device's buffer size is known (nil: at the link's largest write).
    private let shape = Mutex<SMPWriteShape?>(nil)

    /// Cuts the following requests as `shape` says (``SMPWriteShape``).
    public func shapeWrites(_ shape: SMPWriteShape?) { self.shape.withLock { $0 = shape } }

    /// How long one try of a request waits: four smoothed round trips once known,
    /// within 300 ms and `limit` (a device that erases flash answers later).
    public func answerTimeout(within limit: Duration) -> Duration {
        roundTrip.withLock { $0.scaled(by: 4, minimum: .milliseconds(300), maximum: limit, fallback: limit) }
    }

    public init(link: any Link, clock: any BleotaClock, version: SMPHeader.Version = .v2, firstSequence: UInt8 = 0) {
        self.link = link
        self.clock = clock
        self.version = version
        sequence = Mutex(firstSequence)
    }

    public func close() async {
        await link.close()
    }

    /// Sends a request; returns its sequence number.
    @discardableResult
    public func send(_ operation: SMPHeader.Operation, command: SMPCommand, body: CBOR) async throws(SMPClientError) -> UInt8 {
        let number = sequence.withLock { value -> UInt8 in
            defer { value &+= 1 }
            return value
        }
        sent.withLock { _ = $0.insert(number) }
        let packet = SMPPacket(operation, command: command, sequence: number, version: version, body: body)
        do { try await SMPTransport.send(packet, on: link, shape: shape.withLock { $0 }) } catch { throw .linkLost(error) }
        return number
    }

    /// The next answer, or nil when `timeout` passes first.
    public func nextResponse(timeout: Duration) async throws(SMPClientError) -> SMPPacket? {
        let deadline = clock.now + timeout
        while true {
            if let ready = incoming.withLock({ $0.ready.isEmpty ? nil : $0.ready.removeFirst() }) {
                return try ready.get()
            }
            let left = deadline - clock.now
            guard left > .zero else { return nil }
            let link = self.link
            let packet: [UInt8]
            do {
                packet = try await withDeadline(left, clock: clock) { try await link.receive() }
            } catch is DeadlineExceeded {
                return nil
            } catch let error as LinkError {
                throw .linkLost(error)
            } catch {
                throw .linkLost(.cancelled)
            }
            incoming.withLock { state in
                for message in state.reassembler.feed(packet) {
                    do {
                        let decoded = try SMPPacket(decoding: message)
                        guard decoded.header.operation.isResponse else { continue }  // a request from the device: not ours
                        state.ready.append(.success(decoded))
                    } catch {
                        state.ready.append(.failure(.malformed("\(error)")))
                    }
                }
            }
        }
    }

    /// Drops a partly received answer (after a timeout its rest is not coming).
    public func resetReassembly() {
        incoming.withLock { $0.reassembler.reset() }
    }

    /// Whether `number` was sent on this connection (a late answer to it is stale, not stray).
    public func wasSent(_ number: UInt8) -> Bool { sent.withLock { $0.contains(number) } }

    /// A typed request and its decoded answer, sent up to `attempts` times. An answer
    /// that does not fit the response's schema (damaged on the way) counts as no answer
    /// until the last try.
    public func request<R: SMPRequest>(_ request: R, timeout: Duration, attempts: Int = 8) async throws(SMPClientError) -> R.Response {
        try await exchange(
            R.operation, command: R.command, body: request.body, timeout: timeout, attempts: attempts,
            what: request.what
        ) { body throws(SMPBody.FieldError) in try R.Response(body: body) }
    }

    /// One request and its answer body, sent up to `attempts` times; a device error becomes ``SMPClientError/device(_:)``.
    ///
    /// Answers to earlier requests of this connection (late or duplicated) are
    /// skipped. An answer carrying a sequence number no request had is skipped
    /// too — a damaged packet must not end an update — but if the request then
    /// goes unanswered, that stray is what the error reports.
    public func request(
        _ operation: SMPHeader.Operation, command: SMPCommand, body: CBOR = .map([]),
        timeout: Duration, attempts: Int = 3, what: String
    ) async throws(SMPClientError) -> CBOR {
        try await exchange(operation, command: command, body: body, timeout: timeout, attempts: attempts, what: what) { $0 }
    }

    private func exchange<T>(
        _ operation: SMPHeader.Operation, command: SMPCommand, body: CBOR, timeout: Duration, attempts: Int,
        what: String, decode: (CBOR) throws(SMPBody.FieldError) -> T
    ) async throws(SMPClientError) -> T {
        var stray: SMPClientError?
        let policy = RequestPolicy(timeout: timeout, attempts: attempts)
        let answer = try await policy.tries(on: clock) { (number) async throws(SMPClientError) -> T? in
            // Whatever half-arrived before the last try timed out will not be completed.
            if number > 1 { resetReassembly() }
            let sequence = try await send(operation, command: command, body: body)
            let sentAt = clock.now
            let deadline = sentAt + answerTimeout(within: policy.timeout)
            while clock.now < deadline {
                let response: SMPPacket?
                do throws(SMPClientError) { response = try await nextResponse(timeout: deadline - clock.now) } catch .malformed(let why) {
                    stray = .malformed(why)
                    continue
                }
                guard let response else { return nil }
                guard response.header.sequence == sequence else {
                    if !wasSent(response.header.sequence) {
                        stray = stray ?? .sequence("the device answered sequence \(response.header.sequence) to request \(sequence) (\(what))")
                    }
                    continue
                }
                guard response.header.smpCommand == command else {
                    stray = .sequence("the device answered \(what) with \(response.header.smpCommand)")
                    continue
                }
                if let error = SMPDeviceError(response: response.body) { throw .device(error) }
                do throws(SMPBody.FieldError) {
                    let value = try decode(response.body)
                    if number == 1 { roundTrip.withLock { $0.add(clock.now - sentAt) } }
                    return value
                } catch {
                    stray = .field(error.description)
                    return nil
                }
            }
            return nil
        }
        guard let answer else { throw stray ?? .timeout("\(what) after \(policy.attempts) \(policy.attempts > 1 ? "tries" : "try")") }
        return answer
    }

    /// The raw form with a group and command number, for tools and tests.
    public func request(
        _ operation: SMPHeader.Operation, group: SMPGroup, command: UInt8, body: CBOR = .map([]),
        timeout: Duration, attempts: Int = 3, what: String
    ) async throws(SMPClientError) -> CBOR {
        try await request(
            operation, command: SMPCommand(group: group, id: command), body: body, timeout: timeout,
            attempts: attempts, what: what)
    }

    // MARK: Commands

    public func echo(_ text: String, timeout: Duration, attempts: Int = 3) async throws(SMPClientError) -> String {
        try await request(SMPEchoRequest(text: text), timeout: timeout, attempts: attempts).text
    }

    public func parameters(timeout: Duration, attempts: Int = 8) async throws(SMPClientError) -> MCUmgrParameters {
        try await request(SMPParametersRequest(), timeout: timeout, attempts: attempts)
    }

    public func imageState(timeout: Duration, attempts: Int = 8) async throws(SMPClientError) -> [SMPImageSlot] {
        try await request(SMPImageStateRequest(), timeout: timeout, attempts: attempts).slots
    }

    /// Marks or confirms; repeating it is harmless (Zephyr answers a repeated mark or
    /// confirm with the same state), so it is retried like a read.
    public func setImageState(hash: [UInt8]?, confirm: Bool, timeout: Duration, attempts: Int = 8) async throws(SMPClientError) -> [SMPImageSlot] {
        try await request(SMPImageStateWriteRequest(hash: hash, confirm: confirm), timeout: timeout, attempts: attempts).slots
    }

    /// Which bootloader, and its MCUboot mode when it answers that query.
    public func bootloaderInfo(timeout: Duration) async throws(SMPClientError) -> (name: String, mode: Int?) {
        let info = try await request(SMPBootloaderInfoRequest(), timeout: timeout)
        guard let name = info.bootloader else { throw .field("the bootloader info lacks a text 'bootloader'") }
        let mode = try? await request(SMPBootloaderInfoRequest(query: "mode"), timeout: timeout)
        return (name, mode?.mode)
    }

    /// Each image's slots and their sizes (image group, command 6); a device without the command
    /// answers "not supported".
    public func slotInfo(timeout: Duration, attempts: Int = 2) async throws(SMPClientError) -> SMPSlotInfo {
        try await request(SMPSlotInfoRequest(), timeout: timeout, attempts: attempts)
    }

    /// Erases the secondary slot.
    public func eraseSecondarySlot(timeout: Duration) async throws(SMPClientError) {
        _ = try await request(SMPImageEraseRequest(slot: 1), timeout: timeout)
    }

    public func reset(timeout: Duration, attempts: Int = 1, bootMode: Int? = nil) async throws(SMPClientError) {
        _ = try await request(SMPResetRequest(bootMode: bootMode), timeout: timeout, attempts: attempts)
    }
}
