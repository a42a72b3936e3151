import BleotaLink
import Synchronization
import Testing

@testable import BleotaATT

/// How a channel link writes a control point (an ATT Write Request) beside a data stream
/// (Write Commands): the bytes the device's side of the link receives, in order.
@Suite struct GATTChannelLinkRequestTests {
    static let control = GATTChannel(number: 0, service: .bit16(0xFE59), characteristic: .bit16(0x2001), write: .request, update: .none)
    static let data = GATTChannel(number: 1, service: .bit16(0xFE59), characteristic: .bit16(0x2002), write: .command, update: .none)

    /// A channel link on a client bearer whose peer is the raw `device` end, which the test plays
    /// byte by byte, on the virtual clock; `body` may add tasks to the bearer's group.
    static func withRawDevice<T: Sendable>(
        _ found: [(GATTChannel, UInt16)],
        _ body: @escaping @Sendable (GATTChannelLink, LoopbackLink, SimulationClock, inout ThrowingTaskGroup<Void, any Error>) async throws -> T
    ) async throws -> T {
        try await SimulationRuntime.run { runtime in
            let (central, device) = LoopbackLink.pair(maximumPayload: 517)
            let clock = runtime.clock
            let bearer = ATTBearer(link: central, clock: clock, preferredMTU: 23)
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await bearer.run() }
                let link = GATTChannelLink(client: GATTClient(bearer: bearer), found: found, mtu: 23, description: "test")
                let result = try await body(link, device, clock, &group)
                group.cancelAll()
                return result
            }
        }
    }

    /// ATT lets Write Commands pass a request that waits for its response (Core v5.4, Vol 3,
    /// Part F, §3.3.2), and BlueZ sends them so: a Create and the packets after it share a
    /// connection event. A second request still waits for the first's response, and a request
    /// the device refuses ends the link with the reason, at the next receive.
    @Test func commandsPassAWaitingRequestAndRequestsKeepTheirTurn() async throws {
        let seen = try await Self.withRawDevice([(Self.control, 0x10), (Self.data, 0x12)]) { link, device, clock, group in
            func next() async throws -> ATTPDU? {
                guard let bytes = try await device.receive(within: .seconds(1), clock: clock) else { return nil }
                return try ATTPDU(decoding: bytes)
            }
            var seen: [String] = []
            // The request is answered by nobody yet, and the command still goes.
            try await link.send(channel: 0, [0x01])
            try await link.send(channel: 1, [0xAA, 0xBB])
            seen.append("\(try await next().map { "\($0)" } ?? "nothing")")
            seen.append("\(try await next().map { "\($0)" } ?? "nothing")")
            // A second request waits in the bearer until the first is answered.
            group.addTask { try await link.send(channel: 0, [0x02]) }
            seen.append("\(try await next().map { "\($0)" } ?? "nothing")")
            try await device.send(ATTPDU.writeResponse.encode())
            seen.append("\(try await next().map { "\($0)" } ?? "nothing")")
            // The device refuses the second request: the link ends, naming the channel.
            try await device.send(ATTPDU.errorResponse(request: .writeRequest, handle: 0x10, error: .writeNotPermitted).encode())
            do throws(LinkError) {
                _ = try await link.receiveMessage()
                seen.append("a message")
            } catch {
                seen.append("\(error)")
            }
            do throws(LinkError) {
                try await link.send(channel: 1, [0xCC])
                seen.append("sent after the refusal")
            } catch {
                seen.append("\(error)")
            }
            await link.close()
            return seen
        }
        #expect(seen.count == 6)
        #expect(seen[0] == "\(ATTPDU.writeRequest(handle: 0x10, value: [0x01]))")
        #expect(seen[1] == "\(ATTPDU.writeCommand(handle: 0x12, value: [0xAA, 0xBB]))")
        #expect(seen[2] == "nothing")
        #expect(seen[3] == "\(ATTPDU.writeRequest(handle: 0x10, value: [0x02]))")
        let refusal = "link disconnected: the device did not take a write on channel 0: ATT write not permitted (request 0x12, handle 0x10)"
        #expect(seen[4] == refusal)
        #expect(seen[5] == refusal)
    }

    /// Closing the link waits for the last request's Write Response, so a last control-point
    /// write (an activation) is on the device before the bearer goes.
    @Test func closingWaitsForTheLastRequestsResponse() async throws {
        let closedAfterResponse = try await Self.withRawDevice([(Self.control, 0x10)]) { link, device, clock, group in
            try await link.send(channel: 0, [0x05])
            let answeredAt = clock.now + .milliseconds(300)
            group.addTask {
                _ = try await device.receive()
                try await clock.sleep(until: answeredAt)
                try await device.send(ATTPDU.writeResponse.encode())
            }
            await link.close()
            let closedAt = clock.now
            return closedAt >= answeredAt && closedAt < answeredAt + .seconds(1)
        }
        #expect(closedAfterResponse)
    }
}

/// A credit-based channel carries a byte stream (SUOTA's image data): a payload longer than the
/// device's receive MTU, which the host learns only when the channel opens, goes as several SDUs
/// of at most that MTU, in order.
@Suite struct GATTChannelLinkCreditChannelTests {
    @Test func aPayloadLongerThanTheChannelsMTUGoesAsSeveralSDUs() async throws {
        let psmChannel = GATTChannel(number: 3, service: .bit16(0xFE59), characteristic: .bit16(0x2003), write: .none, update: .none, readable: true)
        let (coc, cocDevice) = LoopbackLink.pair(maximumPayload: 100, description: "coc")
        let payload = (0..<250).map { UInt8($0) }
        let (psm, sdus) = try await SimulationRuntime.run { runtime in
            let (central, device) = LoopbackLink.pair(maximumPayload: 517)
            let clock = runtime.clock
            let bearer = ATTBearer(link: central, clock: clock, preferredMTU: 23)
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await bearer.run() }
                let opened = Mutex<[UInt16]>([])
                let link = GATTChannelLink(
                    client: GATTClient(bearer: bearer), found: [(psmChannel, 0x20)], mtu: 517, description: "test",
                    creditRoute: CreditChannelRoute(channel: 10, psmChannel: 3),
                    openCreditChannel: { psm throws(LinkError) in
                        opened.withLock { $0.append(psm) }
                        return coc
                    })
                // The device answers the read of its PSM (0x0081).
                group.addTask {
                    guard let bytes = try await device.receive(within: .seconds(1), clock: clock) else { return }
                    #expect(try ATTPDU(decoding: bytes) == .readRequest(handle: 0x20))
                    try await device.send(ATTPDU.readResponse(value: [0x81, 0x00]).encode())
                }
                try await link.send(channel: 10, payload)
                var sdus: [[UInt8]] = []
                while let sdu = try await cocDevice.receive(within: .milliseconds(100), clock: clock) { sdus.append(sdu) }
                group.cancelAll()
                return (opened.withLock { $0 }, sdus)
            }
        }
        #expect(psm == [0x0081])
        #expect(sdus.map(\.count) == [100, 100, 50])
        #expect(sdus.flatMap { $0 } == payload)
    }
}
