import BleotaLink
import Glibc
import Testing

@testable import BleotaSystem

/// Runs `body` with a time limit, so a regression that hangs fails the test
/// instead of hanging the suite; `body` must honour cancellation (link calls
/// do). Not a timing assertion: the limit is generous.
func finishing<T: Sendable>(within limit: Duration = .seconds(60), _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withDeadline(limit, clock: SystemClock(), operation: body)
}

/// The value of `task`, which is cancelled if it has not finished within
/// `limit` (so a hang fails the test with whatever the cancelled task returns).
func value<T: Sendable>(of task: Task<T, any Error>, within limit: Duration = .seconds(60)) async throws -> T {
    let timer = Task {
        try await SystemClock().sleep(for: limit)
        task.cancel()
    }
    defer { timer.cancel() }
    return try await task.value
}

/// ``value(of:within:)`` for a task that cannot fail.
func value<T: Sendable>(of task: Task<T, Never>, within limit: Duration = .seconds(60)) async -> T {
    let timer = Task {
        try await SystemClock().sleep(for: limit)
        task.cancel()
    }
    defer { timer.cancel() }
    return await task.value
}

@Suite struct UDPLinkTests {
    @Test func aLinkAndAServerExchangeDatagramsOverLoopback() async throws {
        let server = try UDPServerSocket(host: "127.0.0.1", port: 0)
        defer { server.close() }
        #expect(server.port != 0)
        let link = try UDPLink(host: "127.0.0.1", port: server.port, maximumPayload: 65_507)
        #expect(link.parameters.description == "udp://127.0.0.1:\(server.port)")
        let large = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let (atServer, atLink) = try await finishing {
            var atServer: [[UInt8]] = []
            var atLink: [[UInt8]] = []
            for packet in [[1, 2, 3], large, [0xFF]] as [[UInt8]] {
                try await link.send(packet)
                let (bytes, peer) = try #require(try await server.receive())
                atServer.append(bytes)
                // Echo it back reversed, so the answer is not just the request.
                server.send(bytes.reversed(), to: peer)
                atLink.append(try await link.receive())
            }
            return (atServer, atLink)
        }
        await link.close()
        #expect(atServer == [[1, 2, 3], large, [0xFF]])
        #expect(atLink == [[3, 2, 1], large.reversed(), [0xFF]])
    }

    @Test func datagramsThatArriveBeforeTheReceiveAreKeptInOrder() async throws {
        let server = try UDPServerSocket(host: "127.0.0.1", port: 0)
        defer { server.close() }
        let link = try UDPLink(host: "127.0.0.1", port: server.port)
        try await link.send([0])
        let (_, peer) = try #require(try await server.receive())
        for value in 1...5 { server.send([UInt8(value)], to: peer) }
        let received = try await finishing { try await (1...5).asyncMap { _ in try await link.receive() } }
        await link.close()
        #expect(received == [[1], [2], [3], [4], [5]])
    }

    @Test func closingEndsAWaitingReceiveWithDisconnected() async throws {
        let server = try UDPServerSocket(host: "127.0.0.1", port: 0)
        defer { server.close() }
        let link = try UDPLink(host: "127.0.0.1", port: server.port)
        let receiver = Task { () -> LinkError? in
            do throws(LinkError) {
                _ = try await link.receive()
                return nil
            } catch { return error }
        }
        try await waitUntilParked(link.fd)
        await link.close()
        let outcome = await value(of: receiver)
        #expect(outcome == .disconnected("the UDP link is closed"))
        #expect(DescriptorReactor.shared.waitingTasks(on: link.fd) == 0)
    }

    @Test func closingTwiceIsHarmlessAndLaterCallsSayTheLinkIsClosed() async throws {
        let link = try UDPLink(host: "127.0.0.1", port: 9)
        await link.close()
        await link.close()
        await #expect(throws: LinkError.disconnected("the UDP link is closed")) { try await link.send([1]) }
        await #expect(throws: LinkError.disconnected("the UDP link is closed")) { try await link.receive() }
    }

    @Test func cancellingAWaitingReceiveThrowsCancelledAndLosesNoDatagram() async throws {
        let server = try UDPServerSocket(host: "127.0.0.1", port: 0)
        defer { server.close() }
        let link = try UDPLink(host: "127.0.0.1", port: server.port)
        try await link.send([7])
        let (_, peer) = try #require(try await server.receive())
        let receiver = Task { () -> LinkError? in
            do throws(LinkError) {
                _ = try await link.receive()
                return nil
            } catch { return error }
        }
        try await waitUntilParked(link.fd)
        receiver.cancel()
        #expect(await value(of: receiver) == .cancelled)
        server.send([42], to: peer)
        #expect(try await finishing { try await link.receive() } == [42])
        await link.close()
    }

    @Test func closingTheServerEndsAWaitingReceiveWithNil() async throws {
        let server = try UDPServerSocket(host: "127.0.0.1", port: 0)
        let receiver = Task { try await server.receive()?.bytes }
        try await waitUntilParked(server.fd)
        server.close()
        server.close()
        let outcome = try await value(of: receiver)
        #expect(outcome == nil)
        #expect(try await server.receive() == nil)
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
