import BleotaCodec
import BleotaLink
import Synchronization

/// Why an ATT operation failed.
public enum ATTBearerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The peer answered with an Error Response.
    case peer(ATTErrorCode, request: ATTOpcode, handle: UInt16)
    /// No response within the transaction timeout; the bearer is closed (§3.3.3).
    case timeout
    /// The bearer is closed (link dropped, protocol violation, timeout); the reason says which.
    case closed(String)
    /// The value does not fit (e.g. a write without response longer than MTU − 3).
    case tooLong(Int, maximum: Int)
    /// The peer refused for want of security and the link could not get it.
    case security(PairingError)

    public var description: String {
        switch self {
        case .peer(let code, let request, let handle): "ATT \(code) (request \(request), handle 0x\(String(handle, radix: 16)))"
        case .timeout: "ATT transaction timed out after 30 s; the bearer was closed"
        case .closed(let why): "ATT bearer closed: \(why)"
        case .tooLong(let size, let maximum): "value of \(size) bytes exceeds the \(maximum) bytes the ATT MTU allows"
        case .security(let error): error.description
        }
    }
}

extension ATTBearerError {
    /// The want of security this error reports, if it is one a higher level cures.
    public var securityShortfall: SecurityShortfall? {
        guard case .peer(let code, _, _) = self else { return nil }
        return code.securityShortfall
    }
}

extension ATTErrorCode {
    /// Insufficient Authentication, Encryption or Encryption Key Size as a ``/BleotaLink/SecurityShortfall``.
    public var securityShortfall: SecurityShortfall? {
        switch self {
        case .insufficientAuthentication: .authentication
        case .insufficientEncryption: .encryption
        case .insufficientEncryptionKeySize: .encryptionKeySize
        default: nil
        }
    }
}

/// What a bearer does with PDUs the peer starts: the GATT server's side.
public protocol ATTServerHandler: Sendable {
    /// Answers a request; nil means "request not supported".
    func respond(to request: ATTPDU, bearer: ATTBearer) async -> ATTPDU?
    /// A Write Command or Signed Write Command arrived.
    func command(_ command: ATTPDU, bearer: ATTBearer) async
}

/// The ATT bearer: one ATT channel and the rules both roles must keep.
///
/// The rules are BlueZ's (`src/shared/att.c`) and the specification's (Core
/// v5.4, Vol 3, Part F, §3.3): at most one request outstanding at a time (later
/// ones queue, in order); at most one indication outstanding; commands and
/// notifications are never throttled; a transaction that gets no answer in
/// 30 s ends the bearer; a response nobody asked for, or one that does not
/// match the outstanding request, is a protocol violation that ends the
/// bearer; an indication is always confirmed. Each rule has a named test.
///
/// The owner must run ``run()`` (the receive loop) for as long as the bearer
/// is in use, typically in a task group beside the code that uses it.
public actor ATTBearer {
    public nonisolated let link: any Link
    public nonisolated let clock: any BleotaClock
    public let transactionTimeout: Duration
    /// The negotiated ATT MTU (23 until an Exchange MTU completes).
    public private(set) var mtu = 23 {
        didSet { mtuMirror.withLock { $0 = mtu } }
    }
    private nonisolated let mtuMirror = Mutex(23)
    /// The MTU, readable without awaiting the actor (for link parameters).
    public nonisolated var currentMTU: Int { mtuMirror.withLock { $0 } }
    /// The MTU this side offers in Exchange MTU.
    public let preferredMTU: Int

    /// The two queues ATT keeps: requests and indications, one outstanding each.
    private enum Lane { case request, indication }
    private var busy: Set<Lane> = []
    private var turns: [Lane: [CheckedContinuation<Void, Never>]] = [:]
    private var pendingRequest: (opcode: ATTOpcode, mailbox: Mailbox<ATTPDU>)?
    private var pendingConfirmation: Mailbox<Void>?
    private var closedReason: String?
    private var server: (any ATTServerHandler)?
    /// Notifications and indications from the peer, as they arrive.
    public nonisolated let incoming = Mailbox<ATTPDU>()

    /// The connection's security, raised when the peer refuses a request for want of it; nil where it cannot be raised.
    public nonisolated let securityControl: (any LinkSecurityControl)?

    public init(
        link: any Link, clock: any BleotaClock, preferredMTU: Int = 517, transactionTimeout: Duration = .seconds(30),
        securityControl: (any LinkSecurityControl)? = nil
    ) {
        self.link = link
        self.securityControl = securityControl
        self.clock = clock
        self.preferredMTU = max(23, min(517, preferredMTU))
        self.transactionTimeout = transactionTimeout
    }

    public func setServer(_ handler: any ATTServerHandler) { server = handler }
    public var isClosed: Bool { closedReason != nil }
    public var closeReason: String? { closedReason }

    /// Sets the MTU after an exchange: the smaller of both sides' offers.
    public func negotiated(peerMTU: Int) {
        mtu = max(23, min(preferredMTU, peerMTU))
    }

    // MARK: Sending

    /// Sends a request and waits for its response. Requests queue: only one is
    /// on the air at a time. An Error Response throws ``ATTBearerError/peer(_:request:handle:)``.
    ///
    /// An Error Response of Insufficient Authentication, Insufficient
    /// Encryption or Insufficient Encryption Key Size raises the link's
    /// security (``securityControl``) and sends the request again, as BlueZ's
    /// `att.c` does; if the link cannot reach the level,
    /// ``ATTBearerError/security(_:)`` says why.
    ///
    /// `whenSent` is called once the request has gone to the link, before its response comes:
    /// a caller that lets commands pass a waiting request, as ATT allows, goes on from there.
    public func request(_ pdu: ATTPDU, whenSent: (@Sendable () -> Void)? = nil) async throws(ATTBearerError) -> ATTPDU {
        guard let securityControl else { return try await requestOnce(pdu, whenSent: whenSent) }
        do {
            return try await withSecurityOnDemand(control: securityControl, shortfall: { (error: ATTBearerError) in error.securityShortfall }) {
                () async throws(ATTBearerError) -> ATTPDU in
                try await requestOnce(pdu, whenSent: whenSent)
            }
        } catch let error as ATTBearerError {
            throw error
        } catch let error as PairingError {
            throw .security(error)
        } catch {
            throw .closed("\(error)")
        }
    }

    private func requestOnce(_ pdu: ATTPDU, whenSent: (@Sendable () -> Void)?) async throws(ATTBearerError) -> ATTPDU {
        guard let expected = pdu.opcode.response else { throw .closed("\(pdu.opcode) is not a request") }
        if let closedReason { throw .closed(closedReason) }
        await takeTurn(.request)
        defer { passTurn(.request) }
        if let closedReason { throw .closed(closedReason) }
        let mailbox = Mailbox<ATTPDU>()
        pendingRequest = (pdu.opcode, mailbox)
        defer { pendingRequest = nil }
        do {
            try await link.send(pdu.encode())
        } catch {
            await close("link failed: \(error)")
            throw .closed("link failed: \(error)")
        }
        whenSent?()
        let response: ATTPDU
        do {
            guard let answer = try await withDeadline(transactionTimeout, clock: clock, operation: { try await mailbox.take() }) else {
                throw ATTBearerError.closed(closedReason ?? "closed")
            }
            response = answer
        } catch is DeadlineExceeded {
            await close("no response to \(pdu.opcode) within \(transactionTimeout)")
            throw .timeout
        } catch let error as ATTBearerError {
            throw error
        } catch {
            throw .closed(closedReason ?? "cancelled")
        }
        if case .errorResponse(let request, let handle, let code) = response {
            throw .peer(code, request: request, handle: handle)
        }
        guard response.opcode == expected else { throw .closed("unexpected \(response.opcode)") }
        return response
    }

    /// Sends a command (Write Command) at once: commands are not flow-controlled by ATT.
    public func command(_ pdu: ATTPDU) async throws(ATTBearerError) {
        try await sendNow(pdu)
    }

    /// Sends a notification at once: notifications are not flow-controlled by ATT.
    public func notify(handle: UInt16, value: [UInt8]) async throws(ATTBearerError) {
        try await sendNow(.handleValueNotification(handle: handle, value: value))
    }

    /// Sends an indication and waits for its confirmation; indications queue,
    /// one outstanding at a time.
    public func indicate(handle: UInt16, value: [UInt8]) async throws(ATTBearerError) {
        if let closedReason { throw .closed(closedReason) }
        await takeTurn(.indication)
        defer { passTurn(.indication) }
        let mailbox = Mailbox<Void>()
        pendingConfirmation = mailbox
        defer { pendingConfirmation = nil }
        try await sendNow(.handleValueIndication(handle: handle, value: value))
        do {
            guard try await withDeadline(transactionTimeout, clock: clock, operation: { try await mailbox.take() }) != nil else {
                throw ATTBearerError.closed(closedReason ?? "closed")
            }
        } catch is DeadlineExceeded {
            await close("no confirmation within \(transactionTimeout)")
            throw .timeout
        } catch let error as ATTBearerError {
            throw error
        } catch {
            throw .closed(closedReason ?? "cancelled")
        }
    }

    private func sendNow(_ pdu: ATTPDU) async throws(ATTBearerError) {
        if let closedReason { throw .closed(closedReason) }
        do { try await link.send(pdu.encode()) } catch {
            await close("link failed: \(error)")
            throw .closed("link failed: \(error)")
        }
    }

    private func takeTurn(_ lane: Lane) async {
        if !busy.contains(lane) {
            busy.insert(lane)
            return
        }
        await withCheckedContinuation { turns[lane, default: []].append($0) }
    }

    private func passTurn(_ lane: Lane) {
        if turns[lane, default: []].isEmpty {
            busy.remove(lane)
        } else {
            turns[lane]!.removeFirst().resume()
        }
    }

    /// Ends the bearer: the link is closed, waiting operations fail.
    public func close(_ reason: String) async {
        guard closedReason == nil else { return }
        closedReason = reason
        pendingRequest?.mailbox.close()
        pendingConfirmation?.close()
        incoming.close()
        // Closing the link ends run()'s receive.
        await link.close()
    }

    // MARK: Receiving

    /// The receive loop: dispatches every PDU the peer sends until the link ends.
    public func run() async {
        while closedReason == nil {
            let packet: [UInt8]
            do { packet = try await link.receive() } catch {
                await close("link ended: \(error)")
                return
            }
            await dispatch(packet)
        }
    }

    private func dispatch(_ packet: [UInt8]) async {
        guard let first = packet.first else { return }
        let opcode = ATTOpcode(rawValue: first)
        let pdu: ATTPDU
        do {
            pdu = try ATTPDU(decoding: packet)
        } catch {
            // A malformed or unknown request gets an Error Response; anything else is dropped (§3.4.9).
            if opcode.kind == .request || (opcode.kind == .unknown && !opcode.isCommand) {
                let code: ATTErrorCode = opcode.kind == .unknown ? .requestNotSupported : .invalidPDU
                try? await sendNow(.errorResponse(request: opcode, handle: 0, error: code))
            }
            return
        }
        switch opcode.kind {
        case .response:
            guard let pending = pendingRequest else {
                await close("received \(opcode) with no request outstanding")
                return
            }
            let matches: Bool
            if case .errorResponse(let request, _, _) = pdu { matches = request == pending.opcode } else { matches = opcode == pending.opcode.response }
            guard matches else {
                await close("received \(opcode), which does not answer the outstanding \(pending.opcode)")
                return
            }
            pendingRequest = nil
            pending.mailbox.put(pdu)
        case .request:
            let response: ATTPDU
            if case .exchangeMTURequest(let clientMTU) = pdu {
                negotiated(peerMTU: Int(clientMTU))
                response = .exchangeMTUResponse(serverMTU: UInt16(preferredMTU))
            } else if let server, let answer = await server.respond(to: pdu, bearer: self) {
                response = answer
            } else {
                response = .errorResponse(request: opcode, handle: 0, error: .requestNotSupported)
            }
            try? await sendNow(response)
        case .command:
            await server?.command(pdu, bearer: self)
        case .notification:
            incoming.put(pdu)
        case .indication:
            incoming.put(pdu)
            try? await sendNow(.handleValueConfirmation)
        case .confirmation:
            guard let pending = pendingConfirmation else {
                await close("received a confirmation with no indication outstanding")
                return
            }
            pendingConfirmation = nil
            pending.put(())
        case .unknown:
            break
        }
    }
}
