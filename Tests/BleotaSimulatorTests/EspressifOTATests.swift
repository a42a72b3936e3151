import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaProtocols
@testable import BleotaSimulator

/// Espressif's BLE OTA: messages byte for byte as the device and Espressif's apps
/// build them, updates on the simulator, and a fault sweep where every run ends
/// with the exact image or a named failure and the old image.
@Suite struct EspressifOTATests {
    @Test func messagesCarryTheXmodemCRCLittleEndian() throws {
        #expect(EspressifCRC.of(Array("123456789".utf8)) == 0x31C3)
        let start = EspressifCommand.start(length: 0x0001_2345).encode()
        #expect(start.count == 20)
        #expect(Array(start.prefix(6)) == [0x01, 0x00, 0x45, 0x23, 0x01, 0x00])
        let crc = EspressifCRC.of(start.prefix(18))
        #expect(start[18] == UInt8(crc & 0xFF) && start[19] == UInt8(crc >> 8))
        #expect(try EspressifCommand(decoding: start[...]) == .start(length: 0x12345))
        var damaged = start
        damaged[3] ^= 1
        #expect(throws: EspressifOTAError.self) { try EspressifCommand(decoding: damaged[...]) }
        let ack = EspressifSectorAck(sector: 7, status: .sectorIndexError, expected: 5)
        #expect(try EspressifSectorAck(decoding: ack.encode()[...]) == ack)
        let packet = EspressifFirmwarePacket(sector: 2, sequence: 0xFF, data: [1, 2, 3], sectorCRC: 0xBEEF)
        #expect(packet.encode() == [0x02, 0x00, 0xFF, 1, 2, 3, 0xEF, 0xBE])
        #expect(try EspressifFirmwarePacket(decoding: packet.encode()[...]) == packet)
    }

    @Test func decodersNeverTrapOnAnyInput() {
        var random = seededGenerator("espressif-decoders")
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            _ = try? EspressifCommand(decoding: bytes[...])
            _ = try? EspressifCommandAck(decoding: bytes.dropFirst())
            _ = try? EspressifFirmwarePacket(decoding: bytes[...])
            _ = try? EspressifSectorAck(decoding: bytes[...])
            _ = ESPAppImage.problem(bytes)
        }
    }

    func simulate(
        _ address: String, image: [UInt8], window: UInt8 = 3, factory: [UInt8] = ESPAppImage.sample(Array("factory".utf8)),
        deltaBase: DeltaBase? = nil
    ) async throws -> VendorRun {
        try await simulateVendorUpdate(
            address, image: image, speaking: EspressifOTAProtocol(), deltaBase: deltaBase,
            makeDevice: { _ in
                (EspressifOTADevice(partitionSize: 1 << 20, window: window, initialImage: factory), factory)
            }, running: { await $0.running }, makeHost: { EspressifOTAUpdater(context: $0) })
    }

    /// Two releases of one application: the second changes a few bytes of the first's code.
    static func releases(seed: UInt64) -> (old: [UInt8], new: [UInt8]) {
        var random = SeededRandom(seed: seed)
        let code = (0..<60_000).map { _ in UInt8.random(in: 0...255, using: &random) }
        var changed = code
        for offset in [1_000, 20_000, 45_000] { changed[offset] ^= 0x5A }
        return (ESPAppImage.sample(code), ESPAppImage.sample(changed + Array("v2".utf8)))
    }

    /// With --base the device runs, an esp_delta_ota patch goes instead of the image: the device feeds
    /// it to its patcher sector by sector and restarts into the exact new image.
    @Test(arguments: ["sim://2m-dle", "sim://1m-no-dle-30ms"])
    func aPatchAgainstTheRunningImageRebuildsTheExactNewOne(_ address: String) async throws {
        let (old, new) = Self.releases(seed: 11)
        let run = try await simulate(address, image: new, factory: old, deltaBase: DeltaBase(bytes: old, policy: .auto, source: "--base old.bin"))
        let report = try run.outcome.get()
        #expect(run.running == new)
        #expect(report.delta == true && report.bytes == new.count, "\(run.notes)")
        #expect(report.streamBytes * 10 < new.count, "\(report.streamBytes) bytes on the air for a \(new.count)-byte image")
        #expect(run.notes.contains { $0.hasPrefix("sending an esp_delta_ota patch:") && $0.hasSuffix("against --base old.bin") }, "\(run.notes)")
        print("espressif delta \(address): \(report.streamBytes) bytes on the air for \(new.count), transfer \(report.transferSeconds) s")
    }

    /// A device that runs another image than --base refuses the patch by its header and keeps its image:
    /// auto then sends the whole image, always fails naming the base, and the old image runs.
    @Test(arguments: [DeltaPolicy.auto, .always])
    func aPatchForAnotherBaseNeverActivates(policy: DeltaPolicy) async throws {
        let (old, new) = Self.releases(seed: 12)
        let other = ESPAppImage.sample(Array("another release".utf8))
        let run = try await simulate("sim://2m-dle", image: new, factory: other, deltaBase: DeltaBase(bytes: old, policy: policy, source: "--base old.bin"))
        switch (policy, run.outcome) {
        case (.auto, .success(let report)):
            #expect(run.running == new && report.delta == nil)
            #expect(run.notes.contains { $0.contains("did not restart after the patch against --base old.bin: sending the whole image") }, "\(run.notes)")
        case (.always, .failure(let error)):
            #expect(run.running == other)
            #expect(error.outcome == .oldImage("its old image") && error.message.contains("runs another image than --base old.bin"), "\(error)")
        default:
            Issue.record("\(policy): \(run.outcome)")
        }
    }

    /// The patcher as the device runs it: a patch damaged or cut short, or made for another base,
    /// gives no image to activate, and a sound one gives the exact image whatever the pieces it arrives in.
    @Test func theDevicesPatcherTakesPiecesAndRefusesWhatIsNotWhole() throws {
        let (old, new) = Self.releases(seed: 13)
        let patch = DeltaPatch.create(from: old, to: new, espBaseSHA256: DeltaPatch.espBaseSHA256(of: old))
        func rebuild(_ patch: [UInt8], running: [UInt8] = old, pieces: Int = 4096) -> (image: [UInt8]?, refusal: String?) {
            var receiver = EspressifOTADevice.PatchReceiver()
            #expect(EspressifOTADevice.PatchReceiver.starts(patch))
            var offset = 0
            while offset < patch.count {
                receiver.feed(Array(patch[offset..<min(patch.count, offset + pieces)]), running: running)
                offset += pieces
            }
            let image = receiver.finish()
            return (image, receiver.refusal)
        }
        #expect(rebuild(patch).image == new)
        #expect(rebuild(patch, pieces: 7).image == new)
        #expect(rebuild(Array(patch.dropLast(3))).image == nil)
        let wrongBase = rebuild(patch, running: ESPAppImage.sample(Array("other".utf8)))
        #expect(wrongBase.image == nil && wrongBase.refusal == "the patch is for another base than the running image")
        // A flipped byte in the body: the patch no longer parses to the end, or rebuilds an image whose
        // appended SHA-256 does not match (which the device's esp_ota_end check refuses).
        var random = seededGenerator("espressif-damaged-patch")
        for _ in 0..<20 {
            var damaged = patch
            damaged[Int.random(in: 70..<patch.count, using: &random)] ^= UInt8.random(in: 1...255, using: &random)
            let result = rebuild(damaged)
            if let image = result.image { #expect(ESPAppImage.problem(image) != nil || image == new) }
        }
        #expect(!EspressifOTADevice.PatchReceiver.starts(new))
    }

    static func image(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(seed: seed)
        return ESPAppImage.sample((0..<count).map { _ in UInt8.random(in: 0...255, using: &random) })
    }

    @Test(arguments: ["sim://2m-dle", "sim://1m-no-dle-30ms", "sim://slow-flash", "sim://linux-bluez"])
    func anUpdateLeavesTheExactImageRunning(_ address: String) async throws {
        let image = Self.image(50_000, seed: 4)
        let run = try await simulate(address, image: image)
        let report = try run.outcome.get()
        let exact = run.running == image
        #expect(exact)
        print("espressif \(address): \(report.totalSeconds) s, \(Int(report.goodput)) B/s, window \(report.tuning.window)")
    }

    /// On `linux-bluez` (MTU 517, 12 link-layer pairs an event) the host streams 495-byte writes, two
    /// full fragments, 6 an event; the largest (512 bytes, three fragments) go 4 an event.
    @Test func writesAtALargeMTUFillWholeLinkLayerFragments() async throws {
        let image = Self.image(100_000, seed: 6)
        let preferred = try await simulate("sim://linux-bluez", image: image)
        let largest = try await simulateVendorUpdate(
            "sim://linux-bluez", image: image, tuning: TransferTuning(packetSize: 509), knobs: [.packetSize],
            speaking: EspressifOTAProtocol(),
            makeDevice: { _ in (EspressifOTADevice(partitionSize: 1 << 20, window: 3, initialImage: Self.image(10, seed: 1)), []) },
            running: { await $0.running }, makeHost: { EspressifOTAUpdater(context: $0) })
        let fitted = try preferred.outcome.get()
        let full = try largest.outcome.get()
        #expect(preferred.running == image && largest.running == image)
        #expect(fitted.packetSize == 492 && full.packetSize == 509, "data bytes per write after the 3-byte header")
        #expect(fitted.transferSeconds < full.transferSeconds * 0.8, "\(fitted.transferSeconds) s against \(full.transferSeconds) s")
    }

    @Test func aLegacyDeviceThatAnnouncesNoWindowGetsOneSectorAtATime() async throws {
        let image = Self.image(20_000, seed: 5)
        let run = try await simulate("sim://2m-dle", image: image, window: 0)
        #expect(try run.outcome.get().tuning.window == 1)
        let exact = run.running == image
        #expect(exact)
    }

    /// `slow-flash`'s device writes a finished sector for 85 ms with room for 4 packets. One whose
    /// firmware drops what finds that full (`when-full=drop`; the OTA example's blocking ring holds
    /// the link instead) loses packets to a whole window of sectors sent at once, often a sector's
    /// last, the one it answers, so only the 2 s response timeout tells. The flight grows from one
    /// sector instead, and settles on one at the first loss.
    @Test func aDeviceThatCannotQueueASectorLosesNoneToATimeout() async throws {
        let image = Self.image(100_000, seed: 7)
        let run = try await simulate("sim://slow-flash?when-full=drop", image: image)
        let report = try run.outcome.get()
        #expect(run.running == image)
        #expect(report.statistics.ackTimeouts == 0)
        #expect(report.statistics.packetsLost <= 2, "\(report.statistics.packetsLost) sectors lost")
        #expect(report.tuning.window == 1)
    }

    /// The OTA example's ring buffer blocks the Bluetooth host task instead of dropping, so on
    /// `slow-flash` the link holds what the device has no room for: nothing is lost, and the flight
    /// grows to the window START announced.
    @Test func aDeviceThatHoldsItsLinkLosesNothingAndTakesTheWholeWindow() async throws {
        let image = Self.image(100_000, seed: 7)
        let run = try await simulate("sim://slow-flash", image: image)
        let report = try run.outcome.get()
        #expect(run.running == image)
        #expect(report.statistics.packetsLost == 0 && report.statistics.ackTimeouts == 0, "\(report.statistics)")
        #expect(report.tuning.window == 3)
    }

    /// A loss on air at one sector at a time is not a device that needs its packets spaced: the
    /// pause comes only when a sector is lost again before another is written.
    @Test func lossesOnAirDoNotSlowTheUploadLikeAFloodedDevice() async throws {
        let image = Self.image(200_000, seed: 8)
        let clean = try await simulate("sim://2m-dle?seed=3", image: image).outcome.get()
        let lossy = try await simulate("sim://2m-dle?loss=0.01&seed=3", image: image)
        let report = try lossy.outcome.get()
        #expect(lossy.running == image)
        #expect(report.statistics.packetsLost > 0, "the seed must lose something for this to test anything")
        #expect(report.transferSeconds < clean.transferSeconds * 3, "\(report.transferSeconds) s against \(clean.transferSeconds) s clean")
    }

    @Test(arguments: ["loss=0.02", "loss=0.05", "notify-loss=0.05", "corrupt=0.02", "disconnect-at=30000", "power-loss-at=25000", "duplicate=0.05"])
    func faultsEndWithTheExactImageOrTheOldOne(_ faults: String) async throws {
        try await sweepVendorFaults(faults, minimum: 4, image: { Self.image(30_000, seed: $0) }) { address, image in
            try await simulate(address, image: image)
        }
    }

    @Test func anImageTheDeviceWouldRefuseIsRefusedBeforeConnecting() throws {
        var image = Self.image(3000, seed: 6)
        image[100] ^= 1
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("esp-\(UUID()).bin").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(image))
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            _ = try EspressifOTAProtocol().prepareImage(ImageRequest(path: path))
            Issue.record("a damaged image was accepted")
        } catch {
            #expect(error.message.contains("its appended SHA-256 does not match its bytes"), "\(error.message)")
        }
    }

    @Test func anImageLargerThanThePartitionIsRefusedByTheDevice() async throws {
        let run = try await simulate("sim://2m-dle", image: Self.image((1 << 20) + 100, seed: 7))
        guard case .failure(let error) = run.outcome else {
            Issue.record("accepted")
            return
        }
        #expect(error.message.contains("refused START for"), "\(error)")
        let old = run.running == run.factory
        #expect(old)
    }
}
