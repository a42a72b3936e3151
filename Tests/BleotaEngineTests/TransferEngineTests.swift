import BleotaCodec
import BleotaLink
import Synchronization
import Testing

@testable import BleotaEngine

/// A minimal wire for testing the engine on its own: `D0 seq payload`,
/// acknowledgements `A0 next bitmap`, gaps `A1 first count`, probes `A2`.
struct TestWire: TransferWire {
    var dataOverhead: Int { 3 }
    func encodeData(sequence: UInt16, payload: ArraySlice<UInt8>) -> [UInt8] {
        [0xD0, UInt8(truncatingIfNeeded: sequence), UInt8(sequence >> 8)] + payload
    }
    func encodeAckRequest() -> [UInt8] { [0xA2] }
    func encodeAcknowledgement(nextExpected: UInt16, bitmap: [UInt8]) -> [UInt8] {
        [0xA0, UInt8(truncatingIfNeeded: nextExpected), UInt8(nextExpected >> 8)] + bitmap
    }
    func encodeNegativeAcknowledgement(first: UInt16, count: UInt16, corrupt: Bool) -> [UInt8] {
        [0xA1, UInt8(truncatingIfNeeded: first), UInt8(first >> 8), UInt8(truncatingIfNeeded: count), UInt8(count >> 8)]
    }
    func decodeTransferPacket(_ packet: [UInt8]) -> TransferPacket {
        guard let kind = packet.first else { return .other(packet) }
        func u16(_ at: Int) -> UInt16 { UInt16(packet[at]) | UInt16(packet[at + 1]) << 8 }
        switch kind {
        case 0xD0 where packet.count >= 3: return .data(sequence: u16(1), payload: packet[3...], intact: true)
        case 0xA0 where packet.count >= 3: return .acknowledgement(nextExpected: u16(1), bitmap: Array(packet[3...]))
        case 0xA1 where packet.count == 5: return .negativeAcknowledgement(first: u16(1), count: u16(3))
        case 0xA2: return .ackRequest
        default: return .other(packet)
        }
    }
}

/// The receiving end: stores payloads by index, acknowledges every `every` packets and reports gaps.
func receive(_ link: LoopbackLink, total: Int, packetSize: Int, every: Int, silent: Bool = false) async -> [UInt8] {
    let wire = TestWire()
    var buffer = [UInt8](repeating: 0, count: total)
    var window = ReceiverWindow(packetCount: (total + packetSize - 1) / packetSize)
    while !window.isComplete, let packet = try? await link.receive() {
        guard !silent else { continue }
        switch wire.decodeTransferPacket(packet) {
        case .data(let sequence, let payload, _):
            if case .new(let index, let gap) = window.receive(sequence: sequence) {
                buffer.replaceSubrange(index * packetSize..<index * packetSize + payload.count, with: payload)
                if let gap { try? await link.send(wire.encodeNegativeAcknowledgement(first: SequenceNumber.wrap(gap.lowerBound), count: UInt16(gap.count), corrupt: false)) }
            }
            if window.sinceAcknowledgement >= every || window.isComplete {
                let ack = window.acknowledgement()
                try? await link.send(wire.encodeAcknowledgement(nextExpected: ack.nextExpected, bitmap: ack.bitmap))
            }
        case .ackRequest:
            let ack = window.acknowledgement()
            try? await link.send(wire.encodeAcknowledgement(nextExpected: ack.nextExpected, bitmap: ack.bitmap))
        default: continue
        }
    }
    return buffer
}

/// Drops the first transmission of every data packet whose index is in `dropped`.
final class DropFilter: Sendable {
    private let seen = Mutex<Set<UInt16>>([])
    let dropped: Set<UInt16>
    init(_ dropped: Set<UInt16>) { self.dropped = dropped }
    func pass(_ packet: [UInt8]) -> [UInt8]? {
        guard packet.first == 0xD0 else { return packet }
        let sequence = UInt16(packet[1]) | UInt16(packet[2]) << 8
        let first = seen.withLock { $0.insert(sequence).inserted }
        return first && dropped.contains(sequence) ? nil : packet
    }
}

@Suite struct TransferEngineTests {
    static let stream = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }

    func run(
        dropping: Set<UInt16> = [], silent: Bool = false, tuning: TransferTuning = TransferTuning(window: 16, ackInterval: 4),
        held: RangeSet? = nil
    ) async throws -> (received: [UInt8], statistics: TransferStatistics, error: (any Error)?) {
        let filter = DropFilter(dropping)
        return try await SimulationRuntime.run { runtime in
            let (host, device) = LoopbackLink.pair(maximumPayload: 103) { filter.pass($0) }
            let receiver = Task(executorPreference: runtime) { await receive(device, total: Self.stream.count, packetSize: 100, every: 4, silent: silent) }
            let engine = TransferEngine(stream: Self.stream, packetSize: 100, wire: TestWire(), tuning: tuning, clock: runtime.clock)
            if let held { engine.resume(held: held) }
            var failure: (any Error)?
            do { try await engine.run(over: host) } catch { failure = error }
            await host.close()
            return (await receiver.value, engine.statistics, failure)
        }
    }

    /// One task drives an engine: a second run while one is going is refused, and the first is unharmed.
    @Test func aSecondRunWhileOneIsGoingIsRefused() async throws {
        let (received, second) = try await SimulationRuntime.run { runtime in
            let (host, device) = LoopbackLink.pair(maximumPayload: 103)
            let engine = TransferEngine(stream: Self.stream, packetSize: 100, wire: TestWire(), tuning: TransferTuning(), clock: runtime.clock)
            let first = Task(executorPreference: runtime) { try await engine.run(over: host) }
            // The first run is under way once it has sent something (this packet, taken here, is sent again).
            _ = try await device.receive()
            var second: (any Error)?
            do { try await engine.run(over: host) } catch { second = error }
            let receiver = Task(executorPreference: runtime) { await receive(device, total: Self.stream.count, packetSize: 100, every: 4) }
            try await first.value
            await host.close()
            return (await receiver.value, second)
        }
        let refusal = try #require(second as? TransferError)
        #expect(refusal.message.hasPrefix("this transfer is already running"))
        #expect(received == Self.stream, "the first run still delivers every byte")
    }

    @Test func aCleanLinkDeliversEveryByteOnceWithoutResends() async throws {
        let (received, statistics, error) = try await run()
        #expect(error == nil)
        #expect(received == Self.stream)
        #expect(statistics.packetsSent == 100)
        #expect(statistics.packetsResent == 0)
    }

    @Test func onlyTheLostPacketsAreSentAgain() async throws {
        let lost: Set<UInt16> = [0, 7, 8, 41, 99]
        let (received, statistics, error) = try await run(dropping: lost)
        #expect(error == nil)
        #expect(received == Self.stream)
        #expect(statistics.packetsResent == lost.count)
        #expect(statistics.packetsSent == 100 + lost.count)
    }

    @Test func aResumeSendsOnlyWhatTheReceiverLacks() async throws {
        // The receiver here starts empty, so skipped packets never arrive: check the sender's counts only.
        let (_, statistics, _) = try await run(
            tuning: TransferTuning(window: 16, ackTimeout: .milliseconds(50), maxRetries: 1),
            held: RangeSet([0..<5000]))
        #expect(statistics.packetsSent >= 50)
        #expect(statistics.packetsSent < 100)
    }

    @Test func aReceiverThatNeverAnswersEndsInATimeoutNamingTheFix() async throws {
        let (_, statistics, error) = try await run(silent: true, tuning: TransferTuning(window: 8, ackTimeout: .milliseconds(100), maxRetries: 3))
        let failure = try #require(error as? TransferError)
        #expect(failure.code == .timeout)
        #expect(failure.step == .transfer)
        #expect(failure.message.contains("raise --ack-timeout"))
        #expect(statistics.ackTimeouts == 4)
    }
}
