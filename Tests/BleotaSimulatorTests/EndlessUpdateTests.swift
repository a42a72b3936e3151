import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Testing

@testable import BleotaSimulator

/// A wire for a receiver written in the test: `D0 seq payload`, acknowledgements `A0 next bitmap`, probes `A2`.
private struct BareWire: TransferWire {
    var dataOverhead: Int { 3 }
    func encodeData(sequence: UInt16, payload: ArraySlice<UInt8>) -> [UInt8] {
        [0xD0, UInt8(truncatingIfNeeded: sequence), UInt8(sequence >> 8)] + payload
    }
    func encodeAckRequest() -> [UInt8] { [0xA2] }
    func encodeAcknowledgement(nextExpected: UInt16, bitmap: [UInt8]) -> [UInt8] {
        [0xA0, UInt8(truncatingIfNeeded: nextExpected), UInt8(nextExpected >> 8)] + bitmap
    }
    func encodeNegativeAcknowledgement(first: UInt16, count: UInt16, corrupt: Bool) -> [UInt8] { [0xA1] }
    func decodeTransferPacket(_ packet: [UInt8]) -> TransferPacket {
        switch packet.first {
        case 0xA0 where packet.count >= 3:
            .acknowledgement(nextExpected: UInt16(packet[1]) | UInt16(packet[2]) << 8, bitmap: Array(packet[3...]))
        case 0xA2: .ackRequest
        default: .other(packet)
        }
    }
}

/// Issue 48, item 6: updates that never end, and small packets that overflow a device's buffer.
@Suite struct EndlessUpdateTests {
    /// A device that answers every acknowledgement request but keeps nothing it is sent (its queue
    /// always full): each answer shows the flight lost, which reset the timeout count, so the
    /// transfer resent for ever (the runtime's limit ended it). It now ends once nothing new was
    /// acknowledged for as many acknowledgement timeouts as a silent device gets.
    @Test func aDeviceThatAnswersButTakesNothingEndsWithinTheProgressFloor() async throws {
        let tuning = TransferTuning(ackTimeout: .milliseconds(750), maxRetries: 8)
        let (error, elapsed) = try await SimulationRuntime.run(maximumVirtualTime: .seconds(3600)) { runtime in
            let (host, device) = LoopbackLink.pair(maximumPayload: 103)
            let wire = BareWire()
            let answering = Task(executorPreference: runtime) {
                while let packet = try? await device.receive() {
                    if packet.first == 0xA2 { try? await device.send(wire.encodeAcknowledgement(nextExpected: 0, bitmap: [])) }
                }
            }
            let engine = TransferEngine(
                stream: [UInt8](repeating: 0x5A, count: 4000), packetSize: 100, wire: wire, tuning: tuning, clock: runtime.clock)
            var failure: (any Error)?
            do { try await engine.run(over: host) } catch { failure = error }
            await host.close()
            await device.close()
            await answering.value
            return (failure, runtime.clock.now)
        }
        let failure = try #require(error as? TransferError)
        #expect(failure.code == .timeout)
        #expect(failure.message.hasPrefix("no new data acknowledged for 6.8 s (9 acknowledgement timeouts of 750 ms)"))
        #expect(failure.message.contains("--packet-size"))
        #expect(elapsed < .seconds(10))
    }
}
