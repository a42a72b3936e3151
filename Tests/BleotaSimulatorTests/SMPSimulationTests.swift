import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Foundation
import Synchronization
import Testing

@testable import BleotaSimulator

let repositoryRootForSMP = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

func imgtoolSample(_ name: String) throws -> [UInt8] {
    try [UInt8](Data(contentsOf: repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0/\(name)")))
}

struct SMPRun: Sendable {
    var outcome: Result<UpdateReport, TransferError>
    /// The error the run ended with; nil when it succeeded (`try #require(run.failure, "why it must fail")`).
    var failure: TransferError? {
        if case .failure(let error) = outcome { return error }
        return nil
    }
    var device: SMPDeviceStorage.State
    var slots: [SMPImageSlot]
    var steps: [UpdateStep]
    var notes: [String]
}

/// Runs one SMP upgrade against a simulated MCUboot device at `address`; `after` runs on the same device afterwards.
func simulateSMPUpgrade(
    _ address: String, image: [UInt8] = [], prepared: PreparedImage? = nil, mode: SMPUpgradeMode = .testAndConfirm, window: Int? = nil,
    prepare: (@Sendable (SMPDeviceStorage) -> Void)? = nil,
    after: (@Sendable (SMPDeviceStorage) -> Void)? = nil
) async throws -> SMPRun {
    let parsed = try SimulatorAddress(parsing: address)
    return try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        let device = try SMPProtocol().makeDevice(Simulation.configuration(parsed, for: SMPProtocol())) as! SMPDevice
        let storage = device.storage
        prepare?(storage)
        await world.add(SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model, whenQueueFull: parsed.whenQueueFull))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        let steps = SharedSteps(), notes = SharedLog()
        let updater = SMPUpdater(connector: connector, clock: world.clock, window: window) { event in
            if case .step(let step) = event { steps.append(step) }
            if case .note(let note) = event { notes.append(note) }
        }
        let outcome: Result<UpdateReport, TransferError>
        do throws(TransferError) {
            if let prepared {
                outcome = .success(try await updater.flash(prepared, mode: mode))
            } else {
                outcome = .success(try await updater.upgrade(imageBytes: image, mode: mode))
            }
        } catch { outcome = .failure(error) }
        after?(storage)
        return SMPRun(outcome: outcome, device: storage.snapshot, slots: storage.slots, steps: steps.all, notes: notes.all)
    }
}

/// Byte-for-byte equality that keeps megabytes out of failure messages.
func same(_ a: [UInt8]?, _ b: [UInt8]?) -> Bool { a == b }

@Suite struct SMPSimulationTests {
    @Test(arguments: ["sim://2m-dle?protocol=smp", "sim://1m-no-dle-30ms?protocol=smp&seed=3", "sim://linux-bluez?protocol=smp&notify-loss=0.05&seed=5"])
    func testAndConfirmLeavesTheNewImageRunningAndConfirmed(_ address: String) async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade(address, image: image)
        let report = try run.outcome.get()
        #expect(same(run.device.primary, image), "the primary slot holds exactly the uploaded bytes")
        #expect(run.device.primaryConfirmed)
        #expect(run.slots.first?.version == "1.1.0")
        #expect(report.versionBefore == "1.0.0")
        #expect(report.versionAfter == "1.1.0")
        #expect(run.steps == [.connect, .transfer, .verify, .activate, .reconnect, .confirm])
        #expect(report.tuning.window == 3, "buffer count 4 − 1 requests in flight")
    }

    @Test func aTestImageThatIsNotConfirmedIsRevertedAtTheNextReset() async throws {
        let image = try imgtoolSample("app-1.2.0+7-ed25519.bin")
        let run = try await simulateSMPUpgrade(
            "sim://2m-dle?protocol=smp", image: image, mode: .test,
            after: { storage in
                #expect(same(storage.snapshot.primary, image))
                #expect(!storage.snapshot.primaryConfirmed)
                #expect(storage.boot() == "the test image was not confirmed: reverted to the previous image")
            })
        #expect(try run.outcome.get().versionAfter == "1.2.0.7")
        #expect(run.slots.first?.version == "1.0.0")
        #expect(run.slots.last?.version == "1.2.0.7")
    }

    @Test(arguments: [
        ("linux-bluez", 0.01, UInt64(1)), ("linux-bluez", 0.05, 3), ("2m-dle", 0.05, 4), ("1m-dle-7.5ms", 0.05, 5),
        ("1m-no-dle-30ms", 0.05, 6),
    ])
    func lossyLinksStillDeliverTheExactImage(preset: String, loss: Double, seed: UInt64) async throws {
        // SMP has no per-packet check, and requests span several writes: a lost write leaves the
        // device half a request, to which it appends whatever comes next. Pipelined requests keep
        // flowing through loss all the same: `off` last makes a glued request undecodable, and the
        // writes are cut where the device cannot take the middle of a request for a start. Nothing
        // wrong is ever written, so the device's SHA-256 of the upload never disagrees.
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade("sim://\(preset)?protocol=smp&loss=\(loss)&seed=\(seed)", image: image)
        let report = try run.outcome.get()
        #expect(same(run.device.primary, image))
        #expect(report.versionAfter == "1.1.0")
        if loss >= 0.05 { #expect(run.notes.contains { $0.hasPrefix("packets are being lost") }, "\(run.notes)") }
        #expect(!run.notes.contains { $0.contains("did not match") }, "a glued request was written: \(run.notes)")
    }

    /// Zephyr answers a reset and resets `CONFIG_MCUMGR_GRP_OS_RESET_MS` later, the old image
    /// answering until then. A reading taken in that window is the old state: bleota reads only
    /// after the link has dropped (or the device went quiet), so one reset is sent, the device boots
    /// once, and the update that took is reported as taken — where reading at once saw "still
    /// pending" four times within 25 ms and called it a failure.
    @Test(arguments: [250, 1000, 2500])
    func aResetThatComesAfterItsAnswerIsWaitedForBeforeTheSlotsAreRead(delay: Int) async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&reset-delay=\(delay)", image: image)
        let report = try run.outcome.get()
        #expect(report.versionAfter == "1.1.0")
        #expect(same(run.device.primary, image) && run.device.primaryConfirmed)
        #expect(run.device.boots == 1, "one reset, at its own time")
        #expect(!run.notes.contains { $0.contains("resetting again") || $0.contains("marking it again") }, "\(run.notes)")
        #expect(run.steps == [.connect, .transfer, .verify, .activate, .reconnect, .confirm])
    }

    /// Zephyr's smp_svr stopped for 5 s mid-upload: what arrived meanwhile filled its buffers and
    /// the rest was dropped; the requests it kept were answered "out of memory" (rc 2), their data not
    /// written. That is back-pressure, not a verdict (bleota ended "the device answered out of memory",
    /// exit 4): the image arrives exact. After 5 s the requests it kept were given up on long before;
    /// after 60 ms (less than an answer's timeout) they are still awaited, and the answer halves the
    /// window and sends the same offset again.
    @Test(arguments: [("2m-dle", 5000), ("linux-bluez", 5000), ("2m-dle", 60), ("linux-bluez", 60)])
    func outOfMemoryAfterAStallIsBackPressureAndTheUploadGoesOn(preset: String, stall: Int) async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade(
            "sim://\(preset)?protocol=smp&stall-at=20000&stall-time=\(stall)", image: image)
        let report = try run.outcome.get()
        #expect(report.versionAfter == "1.1.0")
        #expect(same(run.device.primary, image))
        if stall < 100 {
            #expect(run.notes.contains { $0.hasPrefix("the device has no buffer for more (out of memory): 1 request in flight") }, "\(run.notes)")
        }
    }

    /// nRF Connect SDK's MCUboot decompresses an LZMA2 image as it installs it and writes the
    /// decompressed SHA as the slot's hash, so once it runs the slot list names it by that, not by
    /// the file's hash. A host comparing with the file's hash alone called the update a failure.
    @Test func aCompressedImageIsKnownByItsDecompressedHashOnceItRuns() async throws {
        let image = try [UInt8](
            Data(contentsOf: repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs/blinky-1.1.0-lzma2armthumb-ecdsa-p256.bin")))
        let parsed = try MCUbootImage(decoding: image)
        let decompressed = try #require(parsed.decompressedHash)
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&decompress=1", image: image)
        let report = try run.outcome.get()
        #expect(report.versionAfter == "1.1.0")
        let active = try #require(run.slots.first { $0.active })
        #expect(active.hash == decompressed && active.hash != parsed.hashTLV, "the slot reports the decompressed SHA")
        #expect(active.confirmed)
        #expect(run.steps == [.connect, .transfer, .verify, .activate, .reconnect, .confirm])
    }

    /// Slot info (image group, command 6) says how large an upload the slot takes: an image that
    /// does not fit is refused before a byte is sent, where the upload's first request was refused
    /// "image too large" (rc 30). A device without the command still refuses it there.
    @Test func anImageTooLargeForTheSlotIsRefusedBeforeAnythingIsSent() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&slot=20000", image: image)
        guard case .failure(let error) = run.outcome else {
            Issue.record("an image larger than the slot was flashed")
            return
        }
        #expect(error.code == .deviceRefused && error.step == .connect)
        #expect(
            error.message
                == "the image is \(image.count) bytes but the device's slot for it holds 20000 (its slot info): nothing was sent; build a smaller image (or one compressed) or give the device larger slots"
        )
        #expect(error.outcome == .oldImage("1.0.0"))
        #expect(run.device.secondary == nil)
        #expect(run.steps == [.connect])
        let without = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&slot=20000&slot-info=0", image: image)
        guard case .failure(let late) = without.outcome else {
            Issue.record("an image larger than the slot was flashed")
            return
        }
        #expect(late.step == .transfer && late.message.contains("image too large"), "\(late)")
    }

    @Test func uploadOnlyLeavesTheImageWaitingAndTheActiveOneUntouched() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp", image: image, mode: .upload)
        let factory = SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))
        #expect(same(run.device.primary, factory))
        #expect(same(run.device.secondary, image))
        #expect(run.device.pendingSwap == nil)
        #expect(run.steps == [.connect, .transfer, .verify])
    }

    @Test func aDisconnectMidUploadResumesFromTheDevicesOffset() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&disconnect-at=20000", image: image)
        let report = try run.outcome.get()
        #expect(report.statistics.reconnects == 1)
        #expect(same(run.device.primary, image))
        // Resumed, not restarted: far less than the whole image went again.
        #expect(report.statistics.bytesOnWire < image.count + image.count / 4)
    }

    /// A device that goes dark mid-upload over a link that says nothing of it (UDP, serial; over
    /// BLE the supervision timeout would drop the link): the upload gives up 20 s after its last
    /// answer, saying so, instead of after thirty growing timeouts, about a minute. Virtual time.
    @Test func aDeviceThatGoesQuietMidUploadIsGivenUpOnAfterTheSilenceLimit() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let parsed = try SimulatorAddress(parsing: "sim://2m-dle?protocol=smp")
        let (failure, silent) = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            let device = try SMPProtocol().makeDevice(Simulation.configuration(parsed, for: SMPProtocol())) as! SMPDevice
            await world.add(SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model, whenQueueFull: parsed.whenQueueFull))
            let quiet = QuietAfterBytes(limit: 20_000, clock: world.clock)
            let connector = QuietConnector(inner: SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: "sim"), quiet: quiet)
            let updater = SMPUpdater(connector: connector, clock: world.clock) { _ in }
            do throws(TransferError) {
                _ = try await updater.upgrade(imageBytes: image, mode: .testAndConfirm)
                return (TransferError?.none, Duration.zero)
            } catch {
                return (error, world.clock.now - (quiet.wentQuietAt ?? world.clock.now))
            }
        }
        let error = try #require(failure, "a device that answers nothing cannot be updated")
        #expect(error.code == .timeout && error.step == .transfer, "\(error)")
        #expect(error.message.contains("for 20 s: the device answers nothing (gone, or out of range)"), "\(error.message)")
        #expect(silent >= .seconds(20) && silent < .seconds(25), "given up \(silent) after the device went quiet")
    }

    @Test func windowOneAndThePipelineBothDeliverTheSameBytes() async throws {
        let image = try imgtoolSample("blinky-1.0.1-unsigned.bin")
        let single = try await simulateSMPUpgrade("sim://linux-bluez?protocol=smp", image: image, window: 1)
        let pipelined = try await simulateSMPUpgrade("sim://linux-bluez?protocol=smp", image: image)
        #expect(same(single.device.primary, image) && same(pipelined.device.primary, image))
        #expect(try single.outcome.get().tuning.window == 1)
        #expect(try pipelined.outcome.get().tuning.window == 3)
    }

    @Test func anImageWhoseHashTLVIsWrongIsRefusedBeforeConnecting() async throws {
        var image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        image[0x200 + 7] ^= 0x40
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp", image: image)
        guard case .failure(let error) = run.outcome else {
            Issue.record("a corrupt image was flashed")
            return
        }
        #expect(error.step == .load)
        #expect(error.message.contains("does not match its contents"))
        #expect(run.steps == [])
        #expect(run.device.secondary == nil ? true : false)
        #expect(run.slots.first?.version == "1.0.0")
    }

    @Test func aDeviceErrorIsNamedWithItsStepAndTheActiveImageStays() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let other = try imgtoolSample("blinky-1.0.1-unsigned.bin")
        // Another image is already pending a swap: the secondary slot is in use, and Zephyr
        // refuses a new upload with "no free slot" (img_mgmt_slot_in_use; see protocols/smp.md).
        let run = try await simulateSMPUpgrade(
            "sim://2m-dle?protocol=smp", image: image,
            prepare: { storage in
                storage.withState {
                    $0.secondary = other
                    $0.pendingSwap = .test
                }
            })
        guard case .failure(let error) = run.outcome else {
            Issue.record("upload over a pending image succeeded")
            return
        }
        #expect(error.step == .transfer)
        #expect(error.message == "the device's image group answered no free slot (rc 9)")
        #expect(run.slots.first?.version == "1.0.0")
    }
}

/// Where a device goes quiet for good: after `limit` bytes written to it, over every link.
final class QuietAfterBytes: Sendable {
    let limit: Int
    let clock: any BleotaClock
    private let state = Mutex<(written: Int, quietAt: Duration?)>((0, nil))
    init(limit: Int, clock: any BleotaClock) {
        self.limit = limit
        self.clock = clock
    }
    var wentQuietAt: Duration? { state.withLock { $0.quietAt } }
    /// Whether a write of `count` bytes still reaches the device.
    func passes(_ count: Int) -> Bool {
        let now = clock.now
        return state.withLock { state in
            guard state.quietAt == nil else { return false }
            state.written += count
            if state.written >= limit { state.quietAt = now }
            return state.quietAt == nil
        }
    }
}

/// A link whose writes stop reaching the device once it has gone quiet; it stays open, as a UDP
/// socket does, so only the silence tells.
final class QuietLink: Link {
    let inner: any Link
    let quiet: QuietAfterBytes
    init(inner: any Link, quiet: QuietAfterBytes) {
        self.inner = inner
        self.quiet = quiet
    }
    var parameters: LinkParameters { inner.parameters }
    func send(_ packet: [UInt8]) async throws(LinkError) {
        if quiet.passes(packet.count) { try await inner.send(packet) }
    }
    func receive() async throws(LinkError) -> [UInt8] { try await inner.receive() }
    func close() async { await inner.close() }
}

struct QuietConnector: DeviceConnector {
    let inner: SimulatedConnector
    let quiet: QuietAfterBytes
    var description: String { inner.description }
    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        QuietLink(inner: try await inner.connect(for: purpose, timeout: timeout), quiet: quiet)
    }
}
