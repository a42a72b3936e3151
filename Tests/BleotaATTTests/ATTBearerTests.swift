import BleotaCodec
import BleotaLink
import Synchronization
import Testing

@testable import BleotaATT

/// A scripted peer: records every PDU the bearer sends, answers as told.
final class ScriptedPeer: Sendable {
    let link: LoopbackLink
    let received = Mutex<[ATTPDU]>([])
    init(link: LoopbackLink) { self.link = link }

    func next() async throws -> ATTPDU {
        let pdu = try ATTPDU(decoding: try await link.receive())
        received.withLock { $0.append(pdu) }
        return pdu
    }

    func send(_ pdu: ATTPDU) async throws { try await link.send(pdu.encode()) }
    func sendRaw(_ bytes: [UInt8]) async throws { try await link.send(bytes) }
}

/// Runs `body` with a bearer on the virtual clock and a scripted peer, the
/// bearer's receive loop running beside it.
func withBearer<T: Sendable>(
    timeout: Duration = .seconds(30), security: (any LinkSecurityControl)? = nil,
    _ body: @escaping @Sendable (ATTBearer, ScriptedPeer, SimulationClock) async throws -> T
) async throws -> T {
    try await SimulationRuntime.run { runtime in
        // A whole ATT PDU at the largest MTU.
        let (local, remote) = LoopbackLink.pair(maximumPayload: 517)
        let bearer = ATTBearer(link: local, clock: runtime.clock, transactionTimeout: timeout, securityControl: security)
        let peer = ScriptedPeer(link: remote)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await bearer.run()
                return nil
            }
            let result = try await body(bearer, peer, runtime.clock)
            await bearer.close("test over")
            for try await _ in group {}
            return result
        }
    }
}

@Suite struct ATTBearerRuleTests {
    @Test func oneOutstandingRequestAtATime() async throws {
        let order = try await withBearer { bearer, peer, clock in
            async let first = bearer.request(.readRequest(handle: 1))
            async let second = bearer.request(.readRequest(handle: 2))
            let a = try await peer.next()
            // The second request must not be on the air before the first is answered:
            // nothing more arrives in 5 s of (virtual) waiting.
            await #expect(throws: DeadlineExceeded.self) {
                _ = try await withDeadline(.seconds(5), clock: clock) { try await peer.next() }
            }
            #expect(peer.received.withLock { $0.count } == 1)
            guard case .readRequest(let firstHandle) = a else { throw ATTBearerError.closed("not a read") }
            try await peer.send(.readResponse(value: [UInt8(firstHandle)]))
            let b = try await peer.next()
            guard case .readRequest(let secondHandle) = b else { throw ATTBearerError.closed("not a read") }
            try await peer.send(.readResponse(value: [UInt8(secondHandle)]))
            let results = try await [first, second]
            return (results, [firstHandle, secondHandle])
        }
        #expect(order.0 == [.readResponse(value: [1]), .readResponse(value: [2])])
        #expect(order.1 == [1, 2])
    }

    @Test func commandsAndNotificationsAreNotThrottled() async throws {
        let seen = try await withBearer { bearer, peer, _ in
            async let pending = bearer.request(.readRequest(handle: 1))
            _ = try await peer.next()
            // A request is outstanding, yet commands and notifications go out at once.
            try await bearer.command(.writeCommand(handle: 5, value: [1]))
            try await bearer.notify(handle: 6, value: [2])
            _ = try await peer.next()
            _ = try await peer.next()
            try await peer.send(.readResponse(value: []))
            _ = try await pending
            return peer.received.withLock { $0 }
        }
        #expect(seen == [.readRequest(handle: 1), .writeCommand(handle: 5, value: [1]), .handleValueNotification(handle: 6, value: [2])])
    }

    @Test func oneOutstandingIndicationAtATime() async throws {
        let result = try await withBearer { bearer, peer, clock in
            async let first: Void = bearer.indicate(handle: 1, value: [1])
            async let second: Void = bearer.indicate(handle: 2, value: [2])
            _ = try await peer.next()
            await #expect(throws: DeadlineExceeded.self) {
                _ = try await withDeadline(.seconds(5), clock: clock) { try await peer.next() }
            }
            #expect(peer.received.withLock { $0.count } == 1)
            try await peer.send(.handleValueConfirmation)
            _ = try await peer.next()
            try await peer.send(.handleValueConfirmation)
            _ = try await (first, second)
            return peer.received.withLock { $0.count }
        }
        #expect(result == 2)
    }

    @Test func transactionTimeoutClosesTheBearer() async throws {
        let (error, closed, elapsed) = try await withBearer { bearer, peer, clock in
            let started = clock.now
            var caught: ATTBearerError?
            do { _ = try await bearer.request(.readRequest(handle: 1)) } catch { caught = error as? ATTBearerError }
            _ = try await peer.next()
            return (caught, await bearer.isClosed, clock.now - started)
        }
        #expect(error == .timeout)
        #expect(closed)
        #expect(elapsed == .seconds(30))
    }

    @Test func strayResponseDisconnects() async throws {
        let reason = try await withBearer { bearer, peer, _ in
            try await peer.send(.readResponse(value: [1]))
            // Give the receive loop a turn.
            while !(await bearer.isClosed) { await Task.yield() }
            return await bearer.closeReason
        }
        #expect(reason == "received 0x0b with no request outstanding")
    }

    @Test func mismatchedResponseDisconnects() async throws {
        let (reason, error) = try await withBearer { bearer, peer, _ in
            async let pending = bearer.request(.readRequest(handle: 1))
            _ = try await peer.next()
            try await peer.send(.writeResponse)
            var caught: ATTBearerError?
            do { _ = try await pending } catch { caught = error as? ATTBearerError }
            return (await bearer.closeReason, caught)
        }
        #expect(reason == "received 0x13, which does not answer the outstanding 0x0a")
        #expect(error == .closed("received 0x13, which does not answer the outstanding 0x0a"))
    }

    @Test func indicationsAreConfirmed() async throws {
        let (confirmation, delivered) = try await withBearer { bearer, peer, _ in
            try await peer.send(.handleValueIndication(handle: 9, value: [7]))
            let answer = try await peer.next()
            return (answer, try await bearer.incoming.take())
        }
        #expect(confirmation == .handleValueConfirmation)
        #expect(delivered == .handleValueIndication(handle: 9, value: [7]))
    }

    @Test func unexpectedConfirmationDisconnects() async throws {
        let reason = try await withBearer { bearer, peer, _ in
            try await peer.send(.handleValueConfirmation)
            while !(await bearer.isClosed) { await Task.yield() }
            return await bearer.closeReason
        }
        #expect(reason == "received a confirmation with no indication outstanding")
    }

    @Test func unknownAndMalformedRequestsGetErrorResponses() async throws {
        let answers = try await withBearer { bearer, peer, _ in
            try await peer.sendRaw([0x3F, 1, 2])  // unknown request opcode
            let first = try await peer.next()
            try await peer.sendRaw([0x0A, 0x01])  // read request cut short
            let second = try await peer.next()
            try await peer.sendRaw([0x7F, 1])  // unknown command: ignored
            try await peer.send(.readRequest(handle: 1))  // no server: not supported
            let third = try await peer.next()
            return [first, second, third]
        }
        #expect(
            answers == [
                .errorResponse(request: ATTOpcode(rawValue: 0x3F), handle: 0, error: .requestNotSupported),
                .errorResponse(request: .readRequest, handle: 0, error: .invalidPDU),
                .errorResponse(request: .readRequest, handle: 0, error: .requestNotSupported),
            ])
    }

    @Test func errorResponseBecomesATypedError() async throws {
        let error = try await withBearer { bearer, peer, _ in
            async let pending = bearer.request(.readRequest(handle: 4))
            _ = try await peer.next()
            try await peer.send(.errorResponse(request: .readRequest, handle: 4, error: .readNotPermitted))
            do {
                _ = try await pending
                return nil as ATTBearerError?
            } catch { return error as? ATTBearerError }
        }
        #expect(error == .peer(.readNotPermitted, request: .readRequest, handle: 4))
        #expect(error?.description == "ATT read not permitted (request 0x0a, handle 0x4)")
    }
}
