import BleotaCodec
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
/// Requests can be pipelined: ``send(_:group:command:body:)`` returns the
/// sequence number, ``nextResponse(timeout:)`` the next answer. Answers are
/// pulled from the link by whoever waits for one (no reader task of its own,
/// so it runs on whatever executor and clock its caller does: the simulator's
/// virtual one included).
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
    public func send(_ operation: SMPHeader.Operation, group: UInt16, command: UInt8, body: CBOR) async throws(SMPClientError) -> UInt8 {
        let number = sequence.withLock { value -> UInt8 in
            defer { value &+= 1 }
            return value
        }
        sent.withLock { _ = $0.insert(number) }
        let packet = SMPPacket(operation, group: group, command: command, sequence: number, version: version, body: body)
        do { try await SMPTransport.send(packet, on: link) } catch { throw .linkLost(error) }
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
                        guard decoded.header.operation.isResponse else { continue } // a request from the device: not ours
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

    /// One request and its answer, sent up to `attempts` times; a device error becomes ``SMPClientError/device(_:)``.
    public func request(_ operation: SMPHeader.Operation, group: UInt16, command: UInt8, body: CBOR = .map([]),
                        timeout: Duration, attempts: Int = 3, what: String) async throws(SMPClientError) -> CBOR {
        for attempt in 0..<max(1, attempts) {
            // Whatever half-arrived before the last try timed out will not be completed.
            if attempt > 0 { resetReassembly() }
            let number = try await send(operation, group: group, command: command, body: body)
            let deadline = clock.now + timeout
            while clock.now < deadline {
                guard let response = try await nextResponse(timeout: deadline - clock.now) else { break }
                guard response.header.sequence == number else {
                    if wasSent(response.header.sequence) { continue } // the late answer to an earlier try
                    throw .sequence("the device answered sequence \(response.header.sequence) to request \(number) (\(what))")
                }
                guard response.header.group == group, response.header.command == command else {
                    throw .sequence("the device answered \(what) with group \(response.header.group) command \(response.header.command)")
                }
                if let error = SMPDeviceError(response: response.body) { throw .device(error) }
                return response.body
            }
        }
        throw .timeout("\(what) after \(max(1, attempts)) tries")
    }

    // MARK: Commands

    public func echo(_ text: String, timeout: Duration) async throws(SMPClientError) -> String {
        let body = try await request(.write, group: SMPGroup.os, command: SMPCommandID.echo, body: .textMap(["d": .text(text)]),
                                     timeout: timeout, what: "echo")
        guard let reply = body["r"]?.string else { throw .field("the echo answer lacks a text 'r'") }
        return reply
    }

    public func parameters(timeout: Duration) async throws(SMPClientError) -> MCUmgrParameters {
        let body = try await request(.read, group: SMPGroup.os, command: SMPCommandID.parameters, timeout: timeout,
                                     what: "the MCUmgr parameters request")
        do { return try MCUmgrParameters(body: body) } catch { throw .field(error.description) }
    }

    public func imageState(timeout: Duration) async throws(SMPClientError) -> [SMPImageSlot] {
        let body = try await request(.read, group: SMPGroup.image, command: SMPCommandID.imageState, timeout: timeout,
                                     what: "the image state request")
        do { return try SMPImageSlot.list(from: body) } catch { throw .field(error.description) }
    }

    public func setImageState(hash: [UInt8]?, confirm: Bool, timeout: Duration) async throws(SMPClientError) -> [SMPImageSlot] {
        var pairs: [(key: CBOR, value: CBOR)] = []
        if let hash { pairs.append((.text("hash"), .bytes(hash))) }
        pairs.append((.text("confirm"), .bool(confirm)))
        let body = try await request(.write, group: SMPGroup.image, command: SMPCommandID.imageState, body: .map(pairs),
                                     timeout: timeout, what: confirm ? "the confirm request" : "the test request")
        do { return try SMPImageSlot.list(from: body) } catch { throw .field(error.description) }
    }

    /// OS group command 8: which bootloader, and with `mode` its MCUboot mode.
    public func bootloaderInfo(timeout: Duration) async throws(SMPClientError) -> (name: String, mode: Int?) {
        let body = try await request(.read, group: SMPGroup.os, command: SMPCommandID.bootloaderInfo, timeout: timeout,
                                     what: "the bootloader info request")
        guard let name = body["bootloader"]?.string else { throw .field("the bootloader info lacks a text 'bootloader'") }
        let mode = try? await request(.read, group: SMPGroup.os, command: SMPCommandID.bootloaderInfo,
                                      body: .textMap(["query": .text("mode")]), timeout: timeout, what: "the bootloader mode request")
        return (name, mode?["mode"]?.int)
    }

    /// Image group command 5: erases the secondary slot.
    public func eraseSecondarySlot(timeout: Duration) async throws(SMPClientError) {
        _ = try await request(.write, group: SMPGroup.image, command: SMPCommandID.imageErase, body: .textMap(["slot": CBOR(1)]),
                              timeout: timeout, what: "the erase request")
    }

    public func reset(timeout: Duration) async throws(SMPClientError) {
        _ = try await request(.write, group: SMPGroup.os, command: SMPCommandID.reset, timeout: timeout, attempts: 1,
                              what: "the reset request")
    }
}
