import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Testing

@testable import BleotaSimulator

/// What a simulated update left behind.
struct SimulatedRun: Sendable {
    var outcome: Result<UpdateReport, TransferError>
    var device: DeviceStorage.State
    var statistics: LinkStatistics
    var trace: [String]
    var steps: [UpdateStep]
    var notes: [String] = []
}

func image(_ size: Int, seed: UInt64) -> [UInt8] {
    var random = SeededRandom(seed: seed)
    return (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
}

/// Runs one `flash` of `firmware` against a simulated device at `address`.
func simulateFlash(
    _ address: String, firmware: [UInt8], version: String = "2.0.0",
    tuning: TransferTuning = TransferTuning(), slot: Int? = nil,
    capabilities: NativeMessage.Capabilities? = nil
) async throws -> SimulatedRun {
    let parsed = try SimulatorAddress(parsing: address)
    return try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        world.startTrace()
        let storage = DeviceStorage(activeImage: Array("old firmware".utf8), activeVersion: "1.0.0", slotSize: slot ?? parsed.slotSize)
        await world.add(
            SimulatedDevice(
                address: "C0:FF:EE:00:00:01",
                half: capabilities.map {
                    NativeDevice(
                        name: "bleota-sim", storage: storage, bufferCount: parsed.model.deviceBuffer,
                        maximumPacket: parsed.model.maximumPayload, capabilities: $0)
                }
                    ?? NativeDevice(
                        name: "bleota-sim", storage: storage, bufferCount: parsed.model.deviceBuffer,
                        maximumPacket: parsed.model.maximumPayload),
                model: parsed.model))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        let steps = SharedSteps()
        let notes = SharedLog()
        let updater = NativeUpdater(connector: connector, clock: world.clock, tuning: tuning) { event in
            if case .step(let step) = event { steps.append(step) }
            if case .note(let note) = event { notes.append(note) }
        }
        let outcome: Result<UpdateReport, TransferError>
        do throws(TransferError) { outcome = .success(try await updater.flash(image: firmware, version: version)) } catch { outcome = .failure(error) }
        return SimulatedRun(
            outcome: outcome, device: storage.snapshot, statistics: world.statistics, trace: world.trace, steps: steps.all,
            notes: notes.all)
    }
}

final class SharedSteps: Sendable {
    private let log = SharedLog()
    func append(_ step: UpdateStep) { log.append(step.rawValue) }
    var all: [UpdateStep] { log.all.compactMap(UpdateStep.init(rawValue:)) }
}

/// Either the new image is active and byte-identical, or the update failed
/// cleanly and the old image still runs. Never anything else.
func expectSafe(_ run: SimulatedRun, firmware: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    switch run.outcome {
    case .success:
        #expect(run.device.activeImage == firmware, sourceLocation: sourceLocation)
        #expect(run.device.activeVersion == "2.0.0", sourceLocation: sourceLocation)
        #expect(run.device.activations == 1, sourceLocation: sourceLocation)
    case .failure:
        #expect(run.device.activeImage == Array("old firmware".utf8), sourceLocation: sourceLocation)
        #expect(run.device.activeVersion == "1.0.0", sourceLocation: sourceLocation)
        #expect(run.device.activations == 0, sourceLocation: sourceLocation)
    }
}

@Suite struct NativeUpdateSweepTests {
    static let firmware = image(60_000, seed: 11)

    @Test(arguments: [0.0, 0.01, 0.05, 0.2])
    func randomLossEndsWithTheExactImageActivated(loss: Double) async throws {
        for seed in 1...3 {
            let run = try await simulateFlash("sim://2m-dle?loss=\(loss)&notify-loss=\(loss / 2)&seed=\(seed)", firmware: Self.firmware)
            expectSafe(run, firmware: Self.firmware)
            let report = try run.outcome.get()
            #expect(run.device.activeImage == Self.firmware)
            if loss == 0 { #expect(report.statistics.packetsResent == 0) } else { #expect(report.statistics.packetsResent > 0) }
        }
    }

    @Test(arguments: ["corrupt=0.02", "duplicate=0.05", "corrupt=0.05&duplicate=0.05&loss=0.05"])
    func corruptionAndDuplicationNeverReachFlash(faults: String) async throws {
        for seed in 1...3 {
            let run = try await simulateFlash("sim://1m-dle-7.5ms?\(faults)&seed=\(seed)", firmware: Self.firmware)
            expectSafe(run, firmware: Self.firmware)
            #expect(throws: Never.self) { try run.outcome.get() }
        }
    }

    @Test func disconnectsAtRandomOffsetsResume() async throws {
        var random = SeededRandom(seed: 99)
        for _ in 0..<6 {
            let offset = Int(random.next() % UInt64(Self.firmware.count))
            let run = try await simulateFlash("sim://2m-dle?disconnect-at=\(offset)", firmware: Self.firmware)
            expectSafe(run, firmware: Self.firmware)
            let report = try run.outcome.get()
            #expect(report.statistics.reconnects <= 1)
            // At most one window of packets the device already had is sent again.
            let packets = (Self.firmware.count + 238) / 239
            #expect(report.statistics.packetsSent - packets <= TransferTuning().window + 2)
        }
    }

    @Test(arguments: ["power-loss-at", "reboot-at"])
    func powerLossAndRebootMidTransferResumeFromFlash(fault: String) async throws {
        let run = try await simulateFlash("sim://2m-dle?\(fault)=30000", firmware: Self.firmware)
        expectSafe(run, firmware: Self.firmware)
        let report = try run.outcome.get()
        #expect(report.statistics.reconnects == 1)
        #expect(report.statistics.packetsSent < 2 * ((Self.firmware.count + 238) / 239))
    }

    @Test func linkThatNeverStaysUpFailsCleanlyWithTheOldImage() async throws {
        var tuning = TransferTuning()
        tuning.maxReconnects = 2
        let run = try await simulateFlash("sim://2m-dle?disconnect-prob=0.05&seed=3", firmware: Self.firmware, tuning: tuning)
        expectSafe(run, firmware: Self.firmware)
        guard case .failure(let error) = run.outcome else {
            Issue.record("expected failure")
            return
        }
        #expect(error.code == .linkLost)
        #expect(error.step == .transfer || error.step == .connect || error.step == .reconnect)
    }

    @Test func updateWalksEveryStepAndTheDeviceReportsTheNewVersion() async throws {
        let run = try await simulateFlash("sim://1m-no-dle-30ms", firmware: Array(Self.firmware.prefix(3000)))
        let report = try run.outcome.get()
        #expect(run.steps == [.connect, .enterBootloader, .reconnect, .transfer, .verify, .activate, .confirm])
        #expect(report.versionBefore == "1.0.0")
        #expect(report.versionAfter == "2.0.0")
        #expect(run.device.activeImage == Array(Self.firmware.prefix(3000)))
    }

    @Test func imageLargerThanTheSlotIsRefusedBeforeAnyDataIsSent() async throws {
        let run = try await simulateFlash("sim://2m-dle", firmware: Self.firmware, slot: 10_000)
        guard case .failure(let error) = run.outcome else {
            Issue.record("expected failure")
            return
        }
        #expect(error.step == .connect)
        #expect(error.message == "the image is 60000 bytes but the device's slot holds 10000: nothing was sent; build a smaller image")
        #expect(!run.trace.isEmpty)
        #expect(!run.trace.contains { $0.contains(" > op=10 ") })  // no DATA packet ever went out
        expectSafe(run, firmware: Self.firmware)
    }

    @Test func packetSizeAboveTheLinkIsAUsageErrorNamingTheRange() async throws {
        var tuning = TransferTuning()
        tuning.packetSize = 500
        let run = try await simulateFlash("sim://2m-dle", firmware: Self.firmware, tuning: tuning)
        guard case .failure(let error) = run.outcome else {
            Issue.record("expected failure")
            return
        }
        #expect(error.code == .invalidTuning)
        #expect(error.message == "packet size 500 is out of range for this link and device: use 1…239")
        expectSafe(run, firmware: Self.firmware)
    }

    @Test func sameSeedSameTranscript() async throws {
        let address = "sim://slow-flash?loss=0.03&corrupt=0.01&seed=5"
        let small = Array(Self.firmware.prefix(20_000))
        let first = try await simulateFlash(address, firmware: small)
        let second = try await simulateFlash(address, firmware: small)
        #expect(first.trace == second.trace)
        #expect(first.statistics == second.statistics)
        #expect(try first.outcome.get() == second.outcome.get())
        let other = try await simulateFlash("sim://slow-flash?loss=0.03&corrupt=0.01&seed=6", firmware: small)
        #expect(other.trace != first.trace)
    }

    @Test func closedLoopPacingCutsLossOnASlowDevice() async throws {
        let small = Array(Self.firmware.prefix(40_000))
        var fixedTuning = TransferTuning()
        fixedTuning.adaptive = false
        let fixed = try await simulateFlash("sim://slow-flash", firmware: small, tuning: fixedTuning)
        let paced = try await simulateFlash("sim://slow-flash", firmware: small)
        expectSafe(paced, firmware: small)
        // The default window of 32 floods a 4-packet buffer; the closed loop keeps the
        // flight near what the device drains and holds back across its page erases.
        #expect(paced.statistics.droppedByDeviceBuffer * 4 < fixed.statistics.droppedByDeviceBuffer)
        #expect(paced.statistics.packetsToDevice < fixed.statistics.packetsToDevice)
    }
}
