import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Testing

@testable import BleotaSimulator

/// ACK_INTERVAL: once closed-loop pacing knows the link, not the device, sets
/// the pace, the host asks a device that can change it for acknowledgements
/// every ``TransferEngine/linkBoundAckInterval`` packets instead of START's.
@Suite struct AckIntervalChangeTests {
    /// Host → device packets with opcode ACK_INTERVAL, and device → host ACKs, from the simulator's trace.
    static func count(_ run: SimulatedRun, direction: String, opcode: NativeMessage.Opcode) -> Int {
        run.trace.filter { $0.contains(" \(direction) op=\(String(opcode.rawValue, radix: 16)) ") && $0.hasSuffix(" ok") }.count
    }

    static let everyCapability: NativeMessage.Capabilities = [.deflate, .testTransfer, .files, .resume, .compactData, .ackIntervalChange]

    @Test func aLinkBoundTransferAsksOnceForFewerAcknowledgements() async throws {
        let firmware = image(200 * 1024, seed: 41)
        let changed = try await simulateFlash("sim://1m-dle-7.5ms?seed=1", firmware: firmware)
        let kept = try await simulateFlash(
            "sim://1m-dle-7.5ms?seed=1", firmware: firmware,
            capabilities: Self.everyCapability.subtracting(.ackIntervalChange))
        expectSafe(changed, firmware: firmware)
        expectSafe(kept, firmware: firmware)
        #expect(Self.count(changed, direction: ">", opcode: .ackInterval) == 1)
        #expect(Self.count(kept, direction: ">", opcode: .ackInterval) == 0)
        // 200 KiB in 239-byte packets is 857 packets: every 16 is about 54 ACKs, every 48 about 18 after the start.
        let acksChanged = Self.count(changed, direction: "<", opcode: .ack)
        let acksKept = Self.count(kept, direction: "<", opcode: .ack)
        #expect(acksKept >= 53)
        #expect(acksChanged * 2 < acksKept, "\(acksChanged) ACKs with the change, \(acksKept) without")
        let seconds = try #require(try? changed.outcome.get().transferSeconds)
        let keptSeconds = try #require(try? kept.outcome.get().transferSeconds)
        #expect(seconds < keptSeconds, "\(seconds) s with the change, \(keptSeconds) s without")
    }

    /// A device that stalls to erase flash has shown it sets the pace before
    /// startup ends: it keeps the interval START asked for.
    @Test func aDeviceBoundTransferKeepsTheRequestedInterval() async throws {
        let firmware = image(64 * 1024, seed: 42)
        let run = try await simulateFlash("sim://slow-flash?seed=1", firmware: firmware)
        expectSafe(run, firmware: firmware)
        #expect(Self.count(run, direction: ">", opcode: .ackInterval) == 0)
    }

    /// Lost notifications: with one acknowledgement every 48 packets a lost one
    /// stalls the flight, so the first wait that runs out sends the host back to
    /// START's interval (a second ACK_INTERVAL), for the rest of the transfer.
    @Test func lostAcknowledgementsSendTheIntervalBack() async throws {
        let firmware = image(256 * 1024, seed: 43)
        let run = try await simulateFlash("sim://1m-dle-7.5ms?notify-loss=0.05&seed=2", firmware: firmware)
        expectSafe(run, firmware: firmware)
        let changes = run.trace.filter { $0.contains(" > op=15 ") }
        #expect(changes.count == 2, "\(changes)")
    }

    /// Under loss and with a reconnection in the middle the change is asked
    /// for again after the new START, and the image still arrives whole.
    @Test(arguments: [1, 2, 3])
    func lossAndADisconnectLeaveTheImageWhole(seed: Int) async throws {
        let firmware = image(160 * 1024, seed: UInt64(50 + seed))
        let run = try await simulateFlash("sim://2m-dle?loss=0.02&disconnect-at=90000&seed=\(seed)", firmware: firmware)
        expectSafe(run, firmware: firmware)
        #expect(try run.outcome.get().statistics.reconnects >= 1)
        // 90 000 bytes is past startup: asked before the disconnect and again after the new START.
        #expect(Self.count(run, direction: ">", opcode: .ackInterval) >= 2)
    }
}
