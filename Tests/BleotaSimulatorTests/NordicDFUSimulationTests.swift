import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Crypto
import Foundation
import Synchronization
import Testing

@testable import BleotaProtocols
@testable import BleotaSimulator

struct NordicRun: Sendable {
    var outcome: Result<UpdateReport, TransferError>
    var flash: NordicBootloader.Flash
    var mode: DeviceMode
    var steps: [UpdateStep]
    var notes: [String]
}

/// A Nordic application image of `count` bytes from `seed`, and its init packet.
func nordicApplication(_ count: Int, version: UInt32 = 2, seed: UInt64 = 1, key: P256.Signing.PrivateKey? = nil) throws -> PreparedImage.Part {
    var random = SeededRandom(seed: seed)
    let image = (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    var packet = NordicInitPacket(
        firmwareVersion: version, hardwareVersion: 52, softDeviceRequirements: [0x0101], type: .application,
        applicationSize: UInt32(count), hash: SHA256Digest.hash(image))
    if let key { try packet.sign(with: key) }
    return PreparedImage.Part(name: "application", data: image, metadata: packet.encode())
}

/// Runs one Nordic Secure DFU update against a simulated nRF5 device at `address`.
func simulateNordicUpdate(
    _ address: String, parts: [PreparedImage.Part], version: String = "2",
    buttonless: NordicSecureDFUDevice.Buttonless = .unbonded, startInBootloader: Bool = false,
    flash adjust: @escaping @Sendable (inout NordicBootloader.Flash) -> Void = { _ in },
    tuning: TransferTuning = TransferTuning(), knobs: Set<TuningKnob> = [.delay],
    bootloaderName: String? = nil
) async throws -> NordicRun {
    let parsed = try SimulatorAddress(parsing: address)
    return try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        var flash = NordicBootloader.Flash()
        flash.application = Array("factory application".utf8)
        adjust(&flash)
        let device = NordicSecureDFUDevice(flash: flash, buttonless: buttonless, startInBootloader: startInBootloader)
        await world.add(SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model, speaking: NordicSecureDFUProtocol(), whenQueueFull: parsed.whenQueueFull))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        let events = SharedEvents()
        let context = HostContext(
            protocolName: NordicSecureDFUProtocol.name, connector: connector, clock: world.clock, tuning: tuning,
            explicitKnobs: knobs
        ) { events.append($0) }
        let updater = NordicSecureDFUUpdater(context: context, bootloaderName: bootloaderName)
        let outcome: Result<UpdateReport, TransferError>
        do throws(TransferError) {
            outcome = .success(try await updater.flash(PreparedImage(parts: parts, version: version, summary: "test"), mode: .confirm))
        } catch { outcome = .failure(error) }
        // Let a reset in progress finish before looking at the device.
        try? await world.clock.sleep(for: .seconds(2))
        let result = NordicRun(
            outcome: outcome, flash: await device.flash, mode: await device.mode,
            steps: events.steps, notes: events.notes)
        await world.shutDown()
        return result
    }
}

final class SharedEvents: Sendable {
    private let events = Mutex<[UpdateEvent]>([])
    func append(_ event: UpdateEvent) { events.withLock { $0.append(event) } }
    var steps: [UpdateStep] {
        events.withLock { all in
            var steps: [UpdateStep] = []
            for case .step(let step) in all where steps.last != step { steps.append(step) }
            return steps
        }
    }
    var notes: [String] { events.withLock { all in all.compactMap { if case .note(let text) = $0 { text } else { nil } } } }
}

@Suite struct NordicDFUSimulationTests {
    @Test(arguments: ["sim://2m-dle?protocol=nordic-dfu", "sim://1m-no-dle-30ms?protocol=nordic-dfu", "sim://linux-bluez?protocol=nordic-dfu"])
    func theButtonlessJumpAndAnUpdateLeaveTheExactApplicationRunning(_ address: String) async throws {
        let part = try nordicApplication(20_000)
        let run = try await simulateNordicUpdate(address, parts: [part])
        let report = try run.outcome.get()
        #expect(same(run.flash.application, part.data), "bank 0 holds exactly the image")
        #expect(run.flash.applicationVersion == 2)
        #expect(run.mode == .application)
        #expect(report.versionAfter == "2")
        #expect(run.steps == [.connect, .enterBootloader, .reconnect, .transfer, .confirm])
    }

    @Test func aBondedJumpFindsTheBootloaderAtTheSameAddressAndTheExperimentalOneAtAddressPlusOne() async throws {
        for kind in [NordicSecureDFUDevice.Buttonless.bonded, .experimental] {
            let part = try nordicApplication(9000, seed: 2)
            let run = try await simulateNordicUpdate("sim://2m-dle?protocol=nordic-dfu", parts: [part], buttonless: kind)
            _ = try run.outcome.get()
            #expect(same(run.flash.application, part.data), "\(kind)")
        }
    }

    @Test func aDeviceAlreadyInItsBootloaderIsUpdatedWithoutAJump() async throws {
        let part = try nordicApplication(5000, seed: 3)
        let run = try await simulateNordicUpdate("sim://2m-dle?protocol=nordic-dfu", parts: [part], buttonless: .none, startInBootloader: true)
        _ = try run.outcome.get()
        #expect(run.steps == [.connect, .transfer, .confirm])
        #expect(same(run.flash.application, part.data))
    }

    @Test func anApplicationWithoutAnyDFUServiceIsRefusedWithWhatToDo() async throws {
        let run = try await simulateNordicUpdate("sim://2m-dle?protocol=nordic-dfu", parts: [try nordicApplication(100)], buttonless: .none)
        guard case .failure(let error) = run.outcome else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.message.contains("offers neither a DFU bootloader nor a buttonless DFU service: put it in DFU mode"))
        #expect(run.flash.application == Array("factory application".utf8))
    }

    @Test func aSignedPackageIsTakenByABootloaderWithItsKeyAndAnUnsignedOneRefused() async throws {
        let key = P256.Signing.PrivateKey()
        let publicDER = Array(key.publicKey.derRepresentation)
        let signed = try nordicApplication(6000, key: key)
        let run = try await simulateNordicUpdate(
            "sim://2m-dle?protocol=nordic-dfu", parts: [signed],
            flash: { $0.publicKey = try? P256.Signing.PublicKey(derRepresentation: publicDER) })
        _ = try run.outcome.get()
        #expect(same(run.flash.application, signed.data))

        let unsigned = try nordicApplication(6000)
        let refused = try await simulateNordicUpdate(
            "sim://2m-dle?protocol=nordic-dfu", parts: [unsigned],
            flash: { $0.publicKey = try? P256.Signing.PublicKey(derRepresentation: publicDER) })
        guard case .failure(let error) = refused.outcome else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.step == .verify)
        #expect(error.message == "the bootloader refused the init packet: the bootloader requires a signed package: sign it with the key the bootloader was built with")
        #expect(refused.flash.application == Array("factory application".utf8), "the old application stays")
    }

    @Test func aSoftDeviceAndBootloaderThenTheApplicationGoInTwoConnections() async throws {
        var random = SeededRandom(seed: 9)
        let sdbl = (0..<12_000).map { _ in UInt8.random(in: 0...255, using: &random) }
        var packet = NordicInitPacket(
            firmwareVersion: 2, hardwareVersion: 52, softDeviceRequirements: [0x0101], type: .softDeviceAndBootloader,
            softDeviceSize: 8000, bootloaderSize: 4000, hash: SHA256Digest.hash(sdbl))
        packet.hashType = .sha256
        let application = try nordicApplication(7000, version: 5, seed: 10)
        let run = try await simulateNordicUpdate(
            "sim://2m-dle?protocol=nordic-dfu",
            parts: [PreparedImage.Part(name: "SoftDevice and bootloader", data: sdbl, metadata: packet.encode()), application],
            version: "5")
        _ = try run.outcome.get()
        #expect(run.flash.softDevice == Array(sdbl[..<8000]) && run.flash.bootloader == Array(sdbl[8000...]))
        #expect(run.flash.bootloaderVersion == 2)
        #expect(same(run.flash.application, application.data) && run.flash.applicationVersion == 5)
        #expect(run.mode == .application)
    }

    /// The fault sweep: every run ends with the exact new image or a clean
    /// failure with the old one, and a damaged object is never executed.
    @Test(arguments: [
        "loss=0.02&seed=1", "loss=0.05&seed=2", "notify-loss=0.05&seed=3", "corrupt=0.02&seed=4", "duplicate=0.05&seed=5",
        "disconnect-at=9000&seed=6", "disconnect-at=15000&seed=7", "power-loss-at=12000&seed=8", "reboot-at=5000&seed=9",
    ])
    func faultsEndWithTheExactImageOrACleanFailureWithTheOldOne(_ faults: String) async throws {
        let part = try nordicApplication(20_000, seed: 11)
        let old = Array("factory application".utf8)
        let run = try await simulateNordicUpdate(
            "sim://2m-dle?protocol=nordic-dfu&\(faults)", parts: [part],
            flash: { $0.savesDataProgress = faults.contains("seed=7") })
        print(
            "nordic fault sweep \(faults): \(run.outcome.map { "ok, \($0.statistics.reconnects) reconnects, \($0.totalSeconds) s, transfer \($0.transferSeconds) s, \(Int($0.goodput)) B/s \($0.stepSeconds)" }), notes: \(run.notes.suffix(3))"
        )
        switch run.outcome {
        case .success:
            #expect(same(run.flash.application, part.data), "\(faults): success means the exact image")
            #expect(run.flash.applicationVersion == 2)
        case .failure(let error):
            #expect(run.flash.application == old || same(run.flash.application, part.data), "\(faults): \(error)")
            #expect(!error.message.contains("\n"))
        }
    }

    /// With a receipt after every packet (`--window 1`) a lost packet leaves the bootloader a
    /// true prefix of the object: the host goes on from its offset instead of creating the
    /// object again, so a link that loses 5 % of its packets still delivers every object,
    /// where three tries of 17-packet objects would fail one in six.
    @Test func aReceiptAfterEveryPacketLetsALostOneBeSentAgainInsideItsObject() async throws {
        let part = try nordicApplication(40_000, seed: 21)
        var tuning = TransferTuning()
        tuning.window = 1
        let run = try await simulateNordicUpdate(
            "sim://2m-dle?protocol=nordic-dfu&loss=0.05&seed=12", parts: [part], tuning: tuning, knobs: [.delay, .window])
        let report = try run.outcome.get()
        #expect(same(run.flash.application, part.data), "the exact image")
        #expect(report.statistics.packetsResent > 0, "packets were lost and sent again")
        #expect(report.statistics.packetsResent < report.statistics.packetsSent / 5, "only the lost ones: \(report.statistics)")
    }

    /// A bootloader that drops what overflows a 4-packet queue (`slow-flash`) loses packets of a whole
    /// object sent back to back: the receipt at its end never comes, and Calculate Checksum asks a few
    /// round trips later (not after the 2 s response timeout). The object goes again as it was (one
    /// loss could be the air's), loses again, and receipts then come every 9 packets and each object
    /// goes as 18 packets, so that the second receipt is the object's checksum.
    @Test func aBootloaderThatDropsPacketsGetsHalfObjectReceiptsThatEndOnTheObject() async throws {
        let part = try nordicApplication(40_960, seed: 22)
        let run = try await simulateNordicUpdate("sim://slow-flash?protocol=nordic-dfu", parts: [part])
        let report = try run.outcome.get()
        #expect(same(run.flash.application, part.data), "the exact image")
        // The first object's 17 packets twice (some dropped), then 18 for each of the 10 (17 with the old halving to 8).
        #expect(
            report.statistics.packetsSent >= 2 * 17 + 10 * 18 - 1 && report.statistics.packetsSent <= 2 * 17 + 10 * 18 + 1,
            "18 packets an object: \(report.statistics)")
        #expect(report.statistics.acknowledgements >= 20, "two receipts an object")
        #expect(report.transferSeconds < 3.5, "the lost receipt noticed within a few round trips: \(report.transferSeconds) s")
    }

    @Test func cleanLossySweepsMostlySucceed() async throws {
        var successes = 0
        for seed in 1...8 {
            let part = try nordicApplication(12_000, seed: UInt64(seed))
            let run = try await simulateNordicUpdate("sim://2m-dle?protocol=nordic-dfu&loss=0.01&seed=\(seed)", parts: [part])
            if case .success = run.outcome {
                successes += 1
                #expect(same(run.flash.application, part.data))
            }
        }
        #expect(successes >= 7, "1 % loss: \(successes) of 8 updates succeeded")
    }
}

/// Packages nrfutil 6.1.7 made (Tests/BleotaProtocolsTests/Fixtures/nordic),
/// read by bleota's host half and flashed on the simulated bootloader: the
/// device ends with each part's exact bytes.
@Suite struct NordicFixtureFlashTests {
    static let fixtures = repositoryRootForSMP.appendingPathComponent("Tests/BleotaProtocolsTests/Fixtures/nordic")

    static func member(_ package: String, _ name: String) throws -> [UInt8] {
        let archive = try ZipArchive(Array(Data(contentsOf: fixtures.appendingPathComponent(package))))
        let entry = try #require(archive.members.first { $0.name == name })
        return try archive.contents(of: entry, limit: 1 << 20)
    }

    @Test(arguments: [
        "nrfutil-6.1.7-app-unsigned.zip", "nrfutil-6.1.7-app-signed.zip", "nrfutil-6.1.7-sd-bl-app-signed.zip",
        "nrfutil-6.1.7-bootloader-signed.zip",
    ])
    func eachNrfutilPackageEndsOnTheDeviceByteForByte(_ package: String) async throws {
        let path = Self.fixtures.appendingPathComponent(package).path
        let keyPath = Self.fixtures.appendingPathComponent("nrfutil-6.1.7-test-key-public.pem").path
        let signed = !package.contains("unsigned")
        let prepared = try NordicSecureDFUProtocol().prepareImage(ImageRequest(path: path, keyPath: signed ? keyPath : nil))
        let publicDER = try Array(NordicSecureDFUProtocol.publicKey(at: keyPath).derRepresentation)
        let run = try await simulateNordicUpdate(
            "sim://2m-dle?protocol=nordic-dfu", parts: prepared.parts, version: prepared.version,
            flash: { if signed { $0.publicKey = try? P256.Signing.PublicKey(derRepresentation: publicDER) } })
        let report = try run.outcome.get()
        #expect(report.versionAfter == "2")
        if package.contains("app") {
            #expect(same(run.flash.application, try Self.member(package, "nordic-app.bin")))
            #expect(run.flash.applicationVersion == 2)
        }
        if package.contains("sd-bl") {
            let sdbl = try Self.member(package, "sd_bl.bin")
            #expect(run.flash.softDevice + run.flash.bootloader == sdbl)
            #expect(run.flash.softDeviceID == 0x0124, "the new SoftDevice's FWID, read from its info structure")
        }
        if package.contains("bootloader-signed") {
            #expect(run.flash.bootloader == (try Self.member(package, "nordic-bootloader.bin")))
            #expect(run.flash.bootloaderVersion == 2)
        }
    }

    @Test func aSignatureFromAnotherKeyIsRefusedBeforeConnectingInOneLine() throws {
        let path = Self.fixtures.appendingPathComponent("nrfutil-6.1.7-app-signed.zip").path
        let other = repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0/other-ecdsa-p256.pub.pem").path
        do {
            _ = try NordicSecureDFUProtocol().prepareImage(ImageRequest(path: path, keyPath: other))
            Issue.record("a signature from another key was accepted")
        } catch {
            #expect(error.step == .load && error.code == .verificationFailed)
            #expect(error.message == "\(path): the application's signature does not verify with \(other): it was signed with another key")
        }
    }
}

struct NordicLegacyRun: Sendable {
    var outcome: Result<UpdateReport, TransferError>
    var flash: NordicLegacyBootloader.Flash
    var mode: DeviceMode
    var notes: [String]
    /// The packets that crossed, when traced (``SimulatedWorld/trace``).
    var trace: [String] = []
}

func simulateNordicLegacyUpdate(
    _ address: String, image: [UInt8], startInBootloader: Bool = false, trace: Bool = false, window: Int? = nil
) async throws -> NordicLegacyRun {
    let parsed = try SimulatorAddress(parsing: address)
    let packet = NordicLegacyInitPacket(applicationVersion: 7, softDeviceRequirements: [0x00B6], imageCRC: NordicLegacyInitPacket.crc(of: image))
    return try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        var flash = NordicLegacyBootloader.Flash()
        flash.application = Array("factory application".utf8)
        let device = NordicLegacyDFUDevice(flash: flash, startInBootloader: startInBootloader)
        if trace { world.startTrace() }
        await world.add(SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model, speaking: NordicLegacyDFUProtocol(), whenQueueFull: parsed.whenQueueFull))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        let events = SharedEvents()
        let updater = NordicLegacyDFUUpdater(
            context: HostContext(
                protocolName: NordicLegacyDFUProtocol.name, connector: connector, clock: world.clock,
                tuning: TransferTuning(window: window ?? TransferTuning().window), explicitKnobs: window == nil ? [] : [.window],
                onEvent: { events.append($0) }))
        let outcome: Result<UpdateReport, TransferError>
        do throws(TransferError) {
            outcome = .success(
                try await updater.flash(
                    PreparedImage(
                        parts: [.init(name: "application", data: image, metadata: packet.encode())],
                        version: "7", summary: "test"), mode: .confirm))
        } catch { outcome = .failure(error) }
        try? await world.clock.sleep(for: .seconds(2))
        let run = NordicLegacyRun(outcome: outcome, flash: await device.flash, mode: await device.mode, notes: events.notes, trace: world.trace)
        await world.shutDown()
        return run
    }
}

@Suite struct NordicLegacySimulationTests {
    static func image(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(seed: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    @Test(arguments: ["sim://2m-dle?protocol=nordic-legacy", "sim://1m-no-dle-30ms?protocol=nordic-legacy", "sim://slow-flash?protocol=nordic-legacy"])
    func theJumpAndAnUpdateLeaveTheExactApplicationRunning(_ address: String) async throws {
        let image = Self.image(12_000, seed: 1)
        let run = try await simulateNordicLegacyUpdate(address, image: image)
        let report = try run.outcome.get()
        #expect(same(run.flash.application, image) && run.flash.applicationVersion == 7)
        #expect(run.mode == .application && report.versionAfter == "7")
    }

    /// On `2m-dle` eight writes fill an event, so a Report Received Size every 10 writes would wait
    /// for the Write Response of the one before it: the host doubles its groups until the requests
    /// stop waiting (to 40 writes). On `1m-dle-7.5ms` (three writes an event) they never wait, but
    /// the counts are in before the host needs them, and each takes a write's place: the groups
    /// double after four such counts. Either way the host asks for far fewer counts than one per
    /// receipt interval.
    @Test(arguments: ["sim://2m-dle?protocol=nordic-legacy", "sim://1m-dle-7.5ms?protocol=nordic-legacy"])
    func groupsSentAheadGrowWhileCountingCostsMoreThanItTells(_ address: String) async throws {
        let image = Self.image(120_000, seed: 3)
        let run = try await simulateNordicLegacyUpdate(address, image: image, trace: true)
        _ = try run.outcome.get()
        #expect(same(run.flash.application, image))
        let control = String(NordicLegacyChannel.controlPoint.rawValue, radix: 16)
        // Two-byte control-point writes: the counts asked, and a handful of others (Receive
        // Firmware, Validate, Activate).
        let shortControlWrites = run.trace.filter { $0.contains(" > op=\(control) len=2 ") }.count
        let writes = (image.count + 243) / 244
        #expect(shortControlWrites > 5 && shortControlWrites < writes / 20, "\(shortControlWrites) two-byte control writes for \(writes) image writes")
    }

    /// `slow-flash`'s bootloader erases slowly and queues 4 writes: waiting for each receipt of 10
    /// (as `--window 10` does) leaves it idle for every receipt's round trip, and groups of 10 sent
    /// ahead would overflow its queue. The default sends groups of 3 one ahead, loses nothing, and
    /// takes the image in less time.
    @Test func aBootloaderThatErasesSlowlyGetsSmallGroupsSentAhead() async throws {
        let image = Self.image(100_000, seed: 4)
        let paced = try await simulateNordicLegacyUpdate("sim://slow-flash?protocol=nordic-legacy", image: image)
        let waiting = try await simulateNordicLegacyUpdate("sim://slow-flash?protocol=nordic-legacy", image: image, window: 10)
        let report = try paced.outcome.get()
        let waited = try waiting.outcome.get()
        #expect(same(paced.flash.application, image) && same(waiting.flash.application, image))
        #expect(report.tuning.window == 3 && waited.tuning.window == 10)
        #expect(report.statistics.packetsResent == 0)
        #expect(report.transferSeconds < waited.transferSeconds * 0.9, "\(report.transferSeconds) s against \(waited.transferSeconds) s")
    }

    /// At 1 % loss a 100 KiB part (420 writes) loses a write in nearly every try, and legacy DFU
    /// cannot take a write back. Once the tries are down to a receipt after every write, each
    /// awaited before the next, the count is a true prefix: the host goes on from it, and the
    /// part arrives whole within the tries (it failed every try before).
    @Test func aPartAtOneWriteAReceiptGoesOnFromWhatTheBootloaderCounted() async throws {
        let image = Self.image(100_000, seed: 5)
        let run = try await simulateNordicLegacyUpdate("sim://2m-dle?protocol=nordic-legacy&loss=0.01&seed=3", image: image)
        let report = try run.outcome.get()
        #expect(same(run.flash.application, image))
        #expect(report.tuning.window == 1)
        #expect(report.statistics.packetsLost > 0, "writes were lost and the part went on from the count")
    }

    /// Faults: the exact image, or a clean failure with the old application (dual bank).
    @Test(arguments: [
        "loss=0.02&seed=1", "notify-loss=0.05&seed=2", "corrupt=0.01&seed=3", "disconnect-at=5000&seed=4",
        "power-loss-at=8000&seed=5", "duplicate=0.05&seed=6",
    ])
    func faultsEndWithTheExactImageOrTheOldOne(_ faults: String) async throws {
        let image = Self.image(12_000, seed: 2)
        let run = try await simulateNordicLegacyUpdate("sim://2m-dle?protocol=nordic-legacy&\(faults)", image: image)
        print("nordic legacy fault sweep \(faults): \(run.outcome.map { "ok, \($0.totalSeconds) s" }) \(run.notes)")
        switch run.outcome {
        case .success: #expect(same(run.flash.application, image), "\(faults)")
        case .failure(let error):
            #expect(run.flash.application == Array("factory application".utf8) || same(run.flash.application, image), "\(faults): \(error)")
            #expect(!error.message.contains("\n"))
        }
    }
}

/// `tune` on a Nordic device: the real image sent as flash sends it, never activated.
@Suite struct NordicTestTransferTests {
    @Test func aSecureDFUTestTransferSendsTheImageButLeavesTheOldApplicationRunning() async throws {
        let part = try nordicApplication(9000, seed: 21)
        let parsed = try SimulatorAddress(parsing: "sim://slow-flash?protocol=nordic-dfu")
        let (report, flash, mode) = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            var flash = NordicBootloader.Flash()
            flash.application = Array("factory application".utf8)
            let device = NordicSecureDFUDevice(flash: flash)
            await world.add(
                SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model, speaking: NordicSecureDFUProtocol(), whenQueueFull: parsed.whenQueueFull))
            let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: "sim")
            var tuning = TransferTuning()
            tuning.window = 4
            let host = NordicSecureDFUProtocol().makeHost(
                HostContext(
                    protocolName: "nordic-dfu", connector: connector, clock: world.clock,
                    tuning: tuning, explicitKnobs: [.window]))
            let report = try await host.testTransfer(image: PreparedImage(parts: [part], version: "2", summary: "test"))
            try? await world.clock.sleep(for: .seconds(2))
            let result = (report, await device.flash, await device.mode)
            await world.shutDown()
            return result
        }
        #expect(report.bytes == 9000 && report.transferSeconds > 0 && report.tuning.window == 4)
        #expect(flash.application == Array("factory application".utf8), "nothing was activated")
        #expect(mode == .application, "Abort sent the device back to its application")
    }

    @Test func testBytesAreRefusedWithWhatToGive() async throws {
        let host = NordicSecureDFUUpdater(context: HostContext(protocolName: "nordic-dfu", connector: FixedFailingConnector(), clock: SystemClock()))
        do {
            _ = try await host.testTransfer([1, 2, 3])
            Issue.record("test bytes were accepted")
        } catch {
            #expect(error.message.contains("bleota tune --image X.zip"))
        }
    }
}

struct FixedFailingConnector: DeviceConnector {
    var description: String { "none" }
    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link { throw .unreachable("none") }
}

@Suite struct NordicBootloaderNameTests {
    /// The unbonded buttonless service renames the bootloader; bleota then finds it by that name.
    @Test func aRenamedBootloaderIsFoundByItsName() async throws {
        let part = try nordicApplication(6000, seed: 31)
        let run = try await simulateNordicUpdate("sim://2m-dle?protocol=nordic-dfu", parts: [part], bootloaderName: "DfuBleota42")
        _ = try run.outcome.get()
        #expect(same(run.flash.application, part.data))
        let refused = try await simulateNordicUpdate("sim://2m-dle?protocol=nordic-dfu", parts: [part], buttonless: .bonded, bootloaderName: "DfuX")
        guard case .failure(let error) = refused.outcome else {
            Issue.record("a bonded device was renamed")
            return
        }
        #expect(error.message.contains("only the unbonded buttonless service can rename the bootloader"))
    }
}

@Suite struct SimulatedConnectorNameTests {
    @Test func theConnectorFindsADeviceByTheNameItAdvertisesAndOnlyThen() async throws {
        let parsed = try SimulatorAddress(parsing: "sim://2m-dle?protocol=nordic-dfu")
        let (found, missing) = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            let device = NordicSecureDFUDevice(flash: NordicBootloader.Flash(), startInBootloader: true)
            await world.add(
                SimulatedDevice(address: "C0:FF:EE:00:00:09", half: device, model: parsed.model, speaking: NordicSecureDFUProtocol(), whenQueueFull: parsed.whenQueueFull))
            let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: "sim")
            let link = try await connector.connect(for: .bootloader, timeout: .seconds(1), advertisedName: NordicSecureDFUDevice.defaultBootloaderName)
            let found = link.parameters.description
            await link.close()
            var missing = ""
            do { _ = try await connector.connect(for: .bootloader, timeout: .seconds(1), advertisedName: "Nobody") } catch { missing = "\(error)" }
            await world.shutDown()
            return (found, missing)
        }
        #expect(found == "sim:C0:FF:EE:00:00:0A", "the bootloader at address + 1 of another address, found by its name alone")
        #expect(missing.contains("no device advertising the name 'Nobody'"))
    }
}
