import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Foundation
import Synchronization
import Testing

@testable import BleotaProtocols
@testable import BleotaSimulator

/// Silicon Labs OTA DFU: the GBL file format, updates through the AppLoader on
/// the simulator, the AppLoader's refusals by name, and a fault sweep in which
/// every run ends with the exact application or a named failure that leaves
/// no half-written image running.
@Suite struct SiliconLabsOTATests {
    static func program(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(seed: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    @Test func aSampleFileParsesWithItsTagsAndCRC() throws {
        let file = GeckoBootloaderImage.sample(Self.program(1000, seed: 1), applicationVersion: 7, address: 0x4000)
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(Array(file.prefix(8)) == [0xEB, 0x17, 0xA6, 0x03, 8, 0, 0, 0])
        #expect(image.formatVersion == 0x0300_0000 && image.applicationVersion == 7 && image.length == file.count)
        #expect(image.programs == [GeckoBootloaderImage.Program(address: 0x4000, length: 1000)])
        // The end tag's CRC-32 covers everything before it and its own 8-byte header.
        #expect(
            CRC32.checksum(file.dropLast(4)) == UInt32(file[file.count - 4]) | UInt32(file[file.count - 3]) << 8
                | UInt32(file[file.count - 2]) << 16 | UInt32(file[file.count - 1]) << 24)
        #expect(GeckoBootloaderImage.problem(file) == nil)
        var damaged = file
        damaged[500] ^= 0x10
        let problem = try #require(GeckoBootloaderImage.problem(damaged))
        #expect(problem.contains("end tag CRC-32"), "\(problem)")
        // Bytes after the end tag are padding the bootloader's parser never reads (Commander pads a
        // compressed file to a multiple of 4): taken, and not part of the image.
        #expect(GeckoBootloaderImage.problem(file + [0xFF, 0xFF]) == nil)
        #expect(try GeckoBootloaderImage(decoding: file + [0xFF, 0xFF]).length == file.count)
        #expect(GeckoBootloaderImage.problem(Array(file.dropFirst(4)))?.contains("header tag") == true)
    }

    @Test func theParserNeverTrapsOnAnyInput() {
        var random = seededGenerator("silabs-gbl-parser")
        let good = GeckoBootloaderImage.sample(Self.program(64, seed: 2), applicationVersion: 2)
        for _ in 0..<20_000 {
            var bytes = Bool.random(using: &random) ? good : (0..<Int.random(in: 0...80, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            if !bytes.isEmpty {
                for _ in 0..<Int.random(in: 1...4, using: &random) { bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random) }
                bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &random)))
            }
            _ = try? GeckoBootloaderImage(decoding: bytes)
            _ = GeckoBootloaderImage.problem(bytes)
        }
    }

    static let factory = GeckoBootloaderImage.sample(Array("factory".utf8), applicationVersion: 1)

    func simulate(_ address: String, image: [UInt8], startInAppLoader: Bool = false) async throws -> (VendorRun, DeviceMode) {
        let device = Mutex<SiliconLabsOTADevice?>(nil)
        let run = try await simulateVendorUpdate(
            address, image: image, speaking: SiliconLabsOTAProtocol(),
            makeDevice: { _ in
                let half = SiliconLabsOTADevice(slotSize: 1 << 20, initialApplication: Self.factory)
                device.withLock { $0 = half }
                return (half, Self.factory)
            },
            running: { half in
                guard await half.mode == .application else { return [] }
                return await half.application ?? []
            }, makeHost: { SiliconLabsOTAUpdater(context: $0) })
        let mode = await device.withLock { $0 }!.mode
        return (run, mode)
    }

    @Test(arguments: ["sim://2m-dle", "sim://1m-no-dle-30ms", "sim://slow-flash", "sim://linux-bluez"])
    func anUpdateGoesThroughTheAppLoaderAndLeavesTheExactFileRunning(_ address: String) async throws {
        let file = GeckoBootloaderImage.sample(Self.program(30_000, seed: 3), applicationVersion: 2)
        let (run, mode) = try await simulate(address, image: file)
        let report = try run.outcome.get()
        let exact = run.running == file
        #expect(exact && mode == .application)
        #expect(report.stepSeconds["enter-bootloader"] != nil, "\(report.stepSeconds)")
        print("silabs-ota \(address): \(report.totalSeconds) s, \(Int(report.goodput)) B/s, \(report.statistics.packetsSent) writes, \(report.statistics.packetsResent) resent")
    }

    /// `slow-flash`'s AppLoader programs 2 writes an event into a queue of 4. One that drops what
    /// finds it full (`when-full=drop`; the SDK's OTA code holds the link instead) loses writes to
    /// the first try's windows of 16, which shows only at the end. The next try goes one write per
    /// read with up to three reads unanswered (reached one answer at a time), which the queue takes
    /// as it works, and the file arrives whole.
    @Test func aTryAfterAFloodedOneGoesOneWritePerReadWithReadsAhead() async throws {
        let file = GeckoBootloaderImage.sample(Self.program(60_000, seed: 5), applicationVersion: 2)
        let (run, mode) = try await simulate("sim://slow-flash?when-full=drop", image: file)
        let report = try run.outcome.get()
        #expect(run.running == file && mode == .application)
        #expect(report.tuning.window == 1 && report.tuning.interPacketDelay == .zero)
        #expect(run.notes.contains { $0.contains("with 1 writes between reads") && $0.contains("3 reads ahead") }, "\(run.notes)")
    }

    /// The AppLoader, as the SDK's OTA code does, programs each write before its stack takes the
    /// next, so on `slow-flash` the writes it has no room for wait on the link instead of being
    /// lost: the first try's windows of 16 go through whole, at the device's pace.
    @Test func anAppLoaderThatHoldsItsLinkTakesTheFirstTryWhole() async throws {
        let file = GeckoBootloaderImage.sample(Self.program(60_000, seed: 5), applicationVersion: 2)
        let (run, mode) = try await simulate("sim://slow-flash", image: file)
        let report = try run.outcome.get()
        #expect(run.running == file && mode == .application)
        #expect(report.tuning.window == 16 && report.statistics.packetsResent == 0, "\(report.tuning) \(report.statistics)")
    }

    /// How each failed try slows the next: one write per read with reads ahead, then each read
    /// answered before 3 writes, then half that, with a pause from the second failure.
    @Test func eachFailedTrySlowsTheNext() {
        var pace = SiliconLabsOTAUpdater.Pace(packetSize: 244, window: 16, delay: .zero)
        var seen: [String] = []
        for _ in 0..<4 {
            pace.slowDown()
            seen.append("\(pace.window)/\(pace.readsAhead)/\(pace.rampsReads)/\(pace.delay)")
        }
        #expect(seen == ["1/3/true/0.0 seconds", "3/1/false/0.002 seconds", "1/1/false/0.004 seconds", "1/1/false/0.008 seconds"])
    }

    /// Files Silicon Labs' own tool made (Simplicity Commander 1v25p1b2000, `scripts/silabs-fixtures.sh`):
    /// plain, with a version dependency tag, LZ4 (padded after its end tag) and LZMA. Each goes
    /// through the AppLoader whole, padding included, and the device runs exactly the file up to its
    /// end tag.
    @Test(arguments: ["app", "app-dep-geq5", "app-lz4", "app-lzma"])
    func aFileCommanderMadeIsFlashedWhole(_ variant: String) async throws {
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("BleotaProtocolsTests/Fixtures/silabs")
        let file = try [UInt8](Data(contentsOf: fixtures.appendingPathComponent("commander-1v25p1b2000-\(variant).gbl")))
        #expect(GeckoBootloaderImage.problem(file) == nil)
        let (run, mode) = try await simulate("sim://2m-dle", image: file)
        _ = try run.outcome.get()
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(run.running == Array(file.prefix(image.length)) && mode == .application)
    }

    @Test func aFileTheAppLoaderCannotParseIsRefusedByNameAndTheDeviceWaitsInTheAppLoader() async throws {
        // A GBL whose program tag is beyond the device's flash: IMAGE_TOO_BIG at the end.
        let file = GeckoBootloaderImage.sample(Self.program(4000, seed: 4), applicationVersion: 2, address: 0x0020_0000)
        let (run, mode) = try await simulate("sim://2m-dle", image: file)
        guard case .failure(let error) = run.outcome else {
            Issue.record("a file past the flash's end was taken")
            return
        }
        #expect(error.message.contains("IMAGE_TOO_BIG") && error.step == .verify, "\(error.message)")
        #expect(error.outcome == .inBootloader)
        #expect(mode == .bootloader && run.running.isEmpty)
    }

    @Test func anUpdateFinishesFromTheAppLoaderAfterAFailedOne() async throws {
        let file = GeckoBootloaderImage.sample(Self.program(20_000, seed: 5), applicationVersion: 3)
        // A power cut in the middle leaves the AppLoader (the application half overwritten);
        // the same command again finds it there, begins afresh and ends with the new application.
        let (run, mode) = try await simulate("sim://2m-dle?power-loss-at=9000&seed=1", image: file)
        let exact = run.running == file
        #expect(exact && mode == .application, "\(run.outcome)")
    }

    /// Writes without response and one verdict at the end: a lost write costs the try.
    /// Every run ends with the exact file running, or a failure that names where the device is
    /// (its old application, or the AppLoader) — never another image running.
    @Test(arguments: ["loss=0.002", "notify-loss=0.01", "disconnect-at=9000", "power-loss-at=7000", "duplicate=0.001", "corrupt=0.001"])
    func faultsEndWithTheExactFileOrANamedSafeState(_ faults: String) async throws {
        var succeeded = 0
        for seed in 1...5 {
            let file = GeckoBootloaderImage.sample(Self.program(12_000, seed: UInt64(seed)), applicationVersion: UInt32(10 + seed))
            let (run, mode) = try await simulate("sim://2m-dle?\(faults)&seed=\(seed)", image: file)
            switch run.outcome {
            case .success:
                let exact = run.running == file
                #expect(exact, "\(faults) seed \(seed): the device runs \(run.running.count) bytes, not the file's \(file.count)")
                succeeded += 1
            case .failure(let error):
                switch error.outcome {
                case .inBootloader?: #expect(mode == .bootloader, "\(faults) seed \(seed): \(error)")
                case .oldImage?: #expect(run.running == Self.factory, "\(faults) seed \(seed): \(error)")
                default: #expect(run.running.isEmpty || run.running == Self.factory || run.running == file, "\(faults) seed \(seed): \(error)")
                }
            }
        }
        #expect(succeeded >= 3, "\(faults): \(succeeded) of 5")
    }
}
