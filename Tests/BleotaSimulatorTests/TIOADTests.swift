import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaProtocols
@testable import BleotaSimulator

/// TI OAD: the image header and Image Identify byte for byte, updates on the
/// simulator, refusals by name, and a fault sweep.
@Suite struct TIOADTests {
    @Test func identifyCopiesTheHeaderFieldsTIsAppCopies() throws {
        let image = TIOADImageHeader.sample(Array(repeating: 0x5A, count: 300), softwareVersion: "0102")
        let header = try TIOADImageHeader(decoding: image)
        #expect(header.imageID == Array("CC26x2R1".utf8) && header.bimVersion == 3 && header.metadataVersion == 1)
        #expect(Int(header.length) == image.count && header.imageType == 1)
        #expect(header.crc == CRC32.checksum(image[12...]))
        let identify = TIOADImageHeader.identify(image)
        #expect(identify.count == 22)
        #expect(Array(identify[0..<8]) == Array("CC26x2R1".utf8))
        #expect(Array(identify[8..<14]) == [3, 1, 0xFF, 0xFF, 1, 0])
        #expect(Array(identify[14..<18]) == TIOADWire.u32(UInt32(image.count)))
        #expect(Array(identify[18..<22]) == Array("0102".utf8))
        #expect(TIOADBlockRequest(decoding: TIOADBlockRequest(status: 14, block: 0x01020304).encode()[...]) == TIOADBlockRequest(status: 14, block: 0x01020304))
        var damaged = image
        damaged[200] ^= 1
        #expect(TIOADImageHeader.problem(damaged) == "the CRC-32 at offset 8 does not match bytes 12 to the end")
    }

    @Test func decodersNeverTrapOnAnyInput() {
        var random = seededGenerator("ti-oad-decoders")
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...80, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            _ = try? TIOADImageHeader(decoding: bytes)
            _ = TIOADImageHeader.problem(bytes)
            _ = TIOADBlockRequest(decoding: bytes[...])
        }
    }

    func simulate(_ address: String, image: [UInt8], tuning: TransferTuning = TransferTuning(), knobs: Set<TuningKnob> = []) async throws -> VendorRun {
        try await simulateVendorUpdate(
            address, image: image, tuning: tuning, knobs: knobs, speaking: TIOADProtocol(),
            makeDevice: { model in
                let factory = TIOADImageHeader.sample(Array("factory".utf8), softwareVersion: "0001")
                return (TIOADDevice(slotSize: 1 << 20, maximumPacket: model.maximumPayload, initialImage: factory), factory)
            }, running: { await $0.running }, makeHost: { TIOADUpdater(context: $0) })
    }

    static func image(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(seed: seed)
        return TIOADImageHeader.sample((0..<count).map { _ in UInt8.random(in: 0...255, using: &random) })
    }

    @Test(arguments: ["sim://2m-dle", "sim://1m-no-dle-30ms", "sim://slow-flash", "sim://linux-bluez"])
    func anUpdateLeavesTheExactImageRunning(_ address: String) async throws {
        let image = Self.image(20_000, seed: 3)
        let run = try await simulate(address, image: image)
        let report = try run.outcome.get()
        let exact = run.running == image
        #expect(exact)
        print("ti-oad \(address): \(report.totalSeconds) s, \(Int(report.goodput)) B/s, blocks of \(report.tuning.packetSize ?? 0) bytes")
    }

    /// `oad.c` writes whichever block is the next it expects, asked for or not: blocks go ahead of
    /// their requests, the window growing to 16, so the download takes less than one connection
    /// event a block where one block per request takes two.
    @Test func blocksGoAheadOfTheirRequests() async throws {
        let image = Self.image(50_000, seed: 4)
        let run = try await simulate("sim://2m-dle", image: image)
        let report = try run.outcome.get()
        #expect(run.running == image)
        let blocks = Double((image.count + 239) / 240)
        #expect(report.transferSeconds < blocks * 0.015, "\(report.transferSeconds) s for \(Int(blocks)) blocks")
        #expect(report.tuning.window == 16)
    }

    /// `--window 1` keeps one block in flight, as TI's own downloader does: two events a block.
    @Test func aWindowOfOneSendsEachBlockOnItsRequest() async throws {
        let image = Self.image(20_000, seed: 5)
        var tuning = TransferTuning()
        tuning.window = 1
        let run = try await simulate("sim://2m-dle", image: image, tuning: tuning, knobs: [.window])
        let report = try run.outcome.get()
        #expect(run.running == image)
        let blocks = Double((image.count + 239) / 240)
        #expect(report.transferSeconds >= blocks * 2 * 0.015, "\(report.transferSeconds) s for \(Int(blocks)) blocks")
        #expect(report.tuning.window == 1)
    }

    /// A device whose 4-packet queue drops what overflows it (`slow-flash`) resets at the first
    /// block missing: the next try sends fewer blocks ahead, and the image arrives whole.
    @Test func aDeviceThatDropsBlocksAheadGetsFewerOnTheNextTry() async throws {
        let image = Self.image(50_000, seed: 6)
        let run = try await simulate("sim://slow-flash", image: image)
        let report = try run.outcome.get()
        #expect(run.running == image)
        #expect(run.notes.contains { $0.contains("starting again from Image Identify") }, "\(run.notes)")
        #expect(report.tuning.window > 1 && report.tuning.window < 16, "window \(report.tuning.window)")
    }

    @Test func anImageForAnotherChipIsRefusedByName() async throws {
        let image = TIOADImageHeader.sample(Array("other".utf8), imageID: Array("CC13x2R1".utf8))
        let run = try await simulate("sim://2m-dle", image: image)
        guard case .failure(let error) = run.outcome else {
            Issue.record("a CC13x2 image was taken")
            return
        }
        #expect(error.message.contains("OAD_INVALID_FILE"), "\(error.message)")
        let old = run.running == run.factory
        #expect(old)
    }

    /// One block in flight and no retry inside a download: a lost block or request costs the
    /// download; every run must still end with the exact image or the old one. The floors are
    /// what the five seeds measured (deterministic for a seed), so a host that gets worse fails:
    /// loss 5 of 5 (the host's new connections make up for lost downloads), notify-loss 4 of 5,
    /// duplicate 2 of 5 (a duplicated block shifts the device's image: its CRC then fails).
    @Test(arguments: [("loss=0.01", 5), ("notify-loss=0.01", 4), ("disconnect-at=9000", 5), ("power-loss-at=7000", 5), ("duplicate=0.02", 2)])
    func faultsEndWithTheExactImageOrTheOldOne(_ setup: (String, Int)) async throws {
        try await sweepVendorFaults(setup.0, minimum: setup.1, image: { Self.image(12_000, seed: $0) }) { address, image in
            try await simulate(address, image: image)
        }
    }
}
