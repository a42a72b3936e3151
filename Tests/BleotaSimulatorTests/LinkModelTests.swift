import BleotaLink
import Synchronization
import Testing

import enum BleotaEngine.FullQueueHandling

@testable import BleotaSimulator

@Suite struct LinkModelTests {
    let oneM = LinkPreset.named("1m-no-dle-30ms")!.model
    let twoM = LinkPreset.named("2m-dle")!.model

    /// `-v` logs the model as the address keys say it, not as Swift renders the struct
    /// (`LinkModel(phy: BleotaSimulator.LinkModel.PHY.le2M, …)`, issue 48, item 17).
    @Test func aModelDescribesItselfInTheAddressKeysUnits() throws {
        let slow = try #require(LinkPreset.named("slow-flash")).model
        #expect(
            slow.description
                == "LE 2M, link-layer payload 251, MTU 247, 15 ms interval, 8 packets per event, device buffer 4, 2 ms per packet, 4096-byte pages erased in 85 ms, reboot 500 ms"
        )
        let fast = try #require(LinkPreset.named("1m-dle-7.5ms")).model
        #expect(fast.description.contains("7.5 ms interval"))
        #expect(!fast.description.contains("erased"))
        #expect(!"\(fast)".contains("BleotaSimulator."))
    }

    @Test func airTimeFollowsTheCoreSpecPacketFormat() {
        // LE 1M: (1 preamble + 4 access address + 2 header + 27 payload + 3 CRC) bytes × 8 µs.
        #expect(oneM.airTime(payload: 27) == .microseconds(296))
        #expect(oneM.airTime(payload: 0) == .microseconds(80))
        // LE 2M: (2 + 4 + 2 + 251 + 3) × 4 µs.
        #expect(twoM.airTime(payload: 251) == .microseconds(1048))
    }

    @Test func fragmentationAddsATTAndL2CAPHeaders() {
        #expect(oneM.fragments(bytes: 20) == [27])
        #expect(oneM.fragments(bytes: 21) == [27, 1])
        #expect(twoM.fragments(bytes: 244) == [251])
        #expect(twoM.fragments(bytes: 300) == [251, 56])
    }

    @Test func capacityMatchesAHandComputation() {
        // 2M DLE: a 244-byte write is one 251-byte PDU; a pair takes 1048 + 150 + 44 + 150 = 1392 µs;
        // 8 fit in 15 ms (the packet limit binds first): 8 × 244 bytes per 15 ms.
        #expect(abs(twoM.capacity(payload: 244) - 8 * 244 / 0.015) < 0.001)
        // 1M without DLE: 4 × 20 bytes per 30 ms.
        #expect(abs(oneM.capacity(payload: 20) - 4 * 20 / 0.030) < 0.001)
        // Time binds when the packet limit is high: 2 Mbit/s cannot carry more than 250 kB/s.
        var busy = twoM
        busy.packetsPerEvent = 64
        #expect(busy.capacity(payload: 244) < 250_000 * 244 / 251)
        #expect(abs(busy.capacity(payload: 244) - Double(10 * 244) / 0.015) < 0.001)  // 10 × 1392 µs ≤ 15 ms < 11 ×
    }

    @Test func theDeviceCeilingIsLinkModelMdsArithmetic() throws {
        // slow-flash, native DATA packets of 244 bytes (239 payload + 5 header): t = 2 ms + 244 × 0.5 µs,
        // t_e = 85 ms, B = 4, I = 15 ms: 4096 / (4096/239 × t + t_e + (I − 3t)) ≈ 31.5 kB/s.
        let slow = try #require(LinkPreset.named("slow-flash")).model
        let t = 0.002 + 244 * 0.0000005
        let expected = 4096 / (4096 / 239 * t + 0.085 + (0.015 - 3 * t))
        let ceiling = try #require(slow.deviceCeiling(packetBytes: 244, headerBytes: 5))
        #expect(abs(ceiling - expected) < 0.01)
        #expect(abs(ceiling / 1024 - 30.8) < 0.05)
        // 2m-dle's device neither erases nor is slow: the link is the limit, by far.
        #expect(try #require(twoM.deviceCeiling(packetBytes: 244)) > 10 * twoM.capacity(payload: 244))
        var idle = twoM
        idle.deviceProcessingPerPacket = .zero
        idle.deviceProcessingPerByte = .zero
        #expect(idle.deviceCeiling(packetBytes: 244) == nil)
    }

    @Test func validationNamesTheRange() {
        var model = twoM
        model.attMTU = 600
        #expect(throws: SimulatorAddressError("mtu 600 is out of range: use 23…517")) { try model.validate() }
        model = twoM
        model.connectionInterval = .milliseconds(8)
        #expect(throws: SimulatorAddressError("interval 8.0 ms is out of range: use 7.5…4000 ms in steps of 1.25 ms")) { try model.validate() }
    }
}

/// A peripheral that records what reaches it and echoes nothing.
final class SinkPeripheral: SimulatedPeripheral {
    let received = Mutex<[[UInt8]]>([])
    let lastArrival = Mutex(Duration.zero)
    let powerCycles = Mutex(0)
    let processing: Duration
    let myAddress: String
    let whenQueueFull: FullQueueHandling
    init(address: String = "AA:00:00:00:00:01", processing: Duration = .zero, whenQueueFull: FullQueueHandling = .drop) {
        myAddress = address
        self.processing = processing
        self.whenQueueFull = whenQueueFull
    }
    var address: String { get async { myAddress } }
    var name: String { get async { "sink" } }
    func serve(_ link: any Link, world: SimulatedWorld) async {
        while let packet = try? await link.receive() {
            received.withLock { $0.append(packet) }
            lastArrival.withLock { $0 = world.clock.now }
            if processing > .zero { try? await world.clock.sleep(for: processing) }
        }
    }
    func powerCycle() async { powerCycles.withLock { $0 += 1 } }
}

/// The `index`-th packet of ``flood(model:faults:seed:count:size:processing:gap:whenQueueFull:)``:
/// `size` bytes of the index's low byte, the first the high byte, so each says where it belongs.
func floodPacket(_ index: Int, size: Int) -> [UInt8] {
    var packet = [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: size)
    packet[0] = UInt8(truncatingIfNeeded: index >> 8)
    return packet
}

/// Floods `count` packets of `size` bytes to a sink and reports what happened.
func flood(
    model: LinkModel, faults: LinkFaults = LinkFaults(), seed: UInt64 = 1, count: Int, size: Int,
    processing: Duration = .zero, gap: Duration = .zero, whenQueueFull: FullQueueHandling = .drop
)
    async throws -> (seconds: Double, received: [[UInt8]], statistics: LinkStatistics, powerCycles: Int, trace: [String])
{
    try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: model, faults: faults, seed: seed)
        world.startTrace()
        let sink = SinkPeripheral(processing: processing, whenQueueFull: whenQueueFull)
        await world.add(sink)
        let link = try await world.connect(to: "AA:00:00:00:00:01", timeout: .seconds(1))
        let start = runtime.clock.now
        for index in 0..<count {
            do { try await link.send(floodPacket(index, size: size)) } catch { break }
            if gap > .zero { try await runtime.clock.sleep(for: gap) }
        }
        // Let the queue drain, then measure up to the last arrival.
        try await runtime.clock.sleep(for: model.connectionInterval * 20)
        let seconds = (sink.lastArrival.withLock { $0 } - start).seconds
        let statistics = world.statistics
        await link.close()
        return (seconds, sink.received.withLock { $0 }, statistics, sink.powerCycles.withLock { $0 }, world.trace)
    }
}

@Suite struct SimulatedLinkTests {
    @Test(arguments: LinkPreset.all.map(\.name))
    func floodNeverBeatsCapacityAndReachesItWithoutFaults(preset: String) async throws {
        var model = LinkPreset.named(preset)!.model
        model.deviceBuffer = 1024
        model.deviceProcessingPerPacket = .zero
        model.deviceProcessingPerByte = .zero
        let size = model.maximumPayload
        let result = try await flood(model: model, count: 400, size: size)
        #expect(result.received.count == 400)
        // Count whole connection intervals: the last event ends before its interval does.
        let interval = model.connectionInterval.seconds
        let rate = Double(400 * size) / ((result.seconds / interval).rounded(.up) * interval)
        let capacity = model.capacity(payload: size)
        #expect(rate <= capacity * 1.001)
        #expect(rate >= capacity * 0.95)
    }

    @Test func slowDeviceDropsWhenFloodedButNotWhenPaced() async throws {
        let model = LinkPreset.named("slow-flash")!.model
        let flooded = try await flood(model: model, count: 200, size: 200, processing: .milliseconds(2))
        #expect(flooded.statistics.droppedByDeviceBuffer > 0)
        #expect(flooded.received.count + flooded.statistics.droppedByDeviceBuffer == 200)
        // Packets arrive in bursts, one burst per 15 ms connection event: pacing must keep a
        // burst within the 4-packet buffer (5 ms apart: 3 per event), not merely the average rate.
        let paced = try await flood(model: model, count: 200, size: 200, processing: .milliseconds(2), gap: .milliseconds(5))
        #expect(paced.statistics.droppedByDeviceBuffer == 0)
        #expect(paced.received.count == 200)
    }

    /// Firmware that takes each write to the end before its stack takes the next holds the link
    /// instead (Core v5.4, Vol 6, Part B, §4.5.9): the flood that lost packets above arrives whole
    /// and in order, each event carrying what the queue has room for and what the device frees during it.
    @Test func aDeviceThatHoldsTheLinkLosesNothingToAFlood() async throws {
        let model = LinkPreset.named("slow-flash")!.model
        let held = try await flood(model: model, count: 200, size: 200, processing: .milliseconds(2), whenQueueFull: .hold)
        #expect(held.statistics.droppedByDeviceBuffer == 0)
        #expect(held.received == (0..<200).map { floodPacket($0, size: 200) })
        // 4 places and 2 ms a packet: the 4 the queue has room for when an event starts, and more as
        // the device frees places during it, the refused pairs between costing their air time.
        let events = held.seconds / model.connectionInterval.seconds
        print("held flood: \(held.statistics.connectionEvents) events, \(events) intervals")
        #expect(events < 200 / 4, "\(events) intervals")
    }

    @Test func writeLossMatchesItsProbability() async throws {
        var faults = LinkFaults()
        faults.writeLoss = 0.1
        let result = try await flood(model: LinkPreset.named("2m-dle")!.model, faults: faults, count: 2000, size: 100)
        #expect(result.statistics.lostToDevice > 150 && result.statistics.lostToDevice < 250)
        #expect(result.received.count == 2000 - result.statistics.lostToDevice)
    }

    @Test func corruptionFlipsExactlyOneBit() async throws {
        var faults = LinkFaults()
        faults.corruption = 0.2
        let result = try await flood(model: LinkPreset.named("2m-dle")!.model, faults: faults, count: 300, size: 50)
        // No loss or duplication: the n-th packet received is the n-th sent.
        #expect(result.received.count == 300)
        var flipped = 0
        for (index, packet) in result.received.enumerated() {
            let original = floodPacket(index, size: 50)
            let bits = zip(packet, original).reduce(0) { $0 + ($1.0 ^ $1.1).nonzeroBitCount }
            #expect(bits <= 1)
            flipped += bits
        }
        #expect(flipped == result.statistics.corrupted)
        #expect(flipped > 30)
    }

    @Test func duplicationDeliversTwice() async throws {
        var faults = LinkFaults()
        faults.duplication = 0.1
        let result = try await flood(model: LinkPreset.named("2m-dle")!.model, faults: faults, count: 500, size: 30)
        #expect(result.statistics.duplicated > 20)
        #expect(result.received.count == 500 + result.statistics.duplicated)
    }

    @Test func disconnectAfterBytesFiresOnce() async throws {
        var faults = LinkFaults()
        faults.disconnectAfterBytes = 1000
        let result = try await flood(model: LinkPreset.named("2m-dle")!.model, faults: faults, count: 100, size: 100)
        #expect(result.statistics.disconnects == 1)
        #expect(result.received.count < 11)
    }

    @Test func powerLossCyclesTheDevice() async throws {
        var faults = LinkFaults()
        faults.powerLossAfterBytes = 500
        let result = try await flood(model: LinkPreset.named("2m-dle")!.model, faults: faults, count: 20, size: 100)
        #expect(result.powerCycles == 1)
        #expect(result.statistics.disconnects == 1)
    }

    @Test func sameSeedSameTranscriptDifferentSeedDifferent() async throws {
        var faults = LinkFaults()
        faults.writeLoss = 0.05
        faults.corruption = 0.02
        let model = LinkPreset.named("1m-dle-7.5ms")!.model
        let a = try await flood(model: model, faults: faults, seed: 3, count: 300, size: 100)
        let b = try await flood(model: model, faults: faults, seed: 3, count: 300, size: 100)
        let c = try await flood(model: model, faults: faults, seed: 4, count: 300, size: 100)
        #expect(a.trace == b.trace)
        #expect(a.statistics == b.statistics)
        #expect(a.received == b.received)
        #expect(a.trace != c.trace)
        #expect(a.trace.count >= 300)
    }

    @Test func connectingToAnAbsentDeviceNamesWhatIsAdvertising() async throws {
        let message = try await SimulationRuntime.run { runtime -> String in
            let world = SimulatedWorld(runtime: runtime, model: LinkPreset.named("2m-dle")!.model)
            await world.add(SinkPeripheral())
            do {
                _ = try await world.connect(to: "11:22:33:44:55:66", timeout: .seconds(1))
                return "connected"
            } catch {
                return "\(error)"
            }
        }
        #expect(message == "device unreachable: no device advertising as 11:22:33:44:55:66 (advertising: AA:00:00:00:00:01)")
    }
}
