import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaSimulator

/// Large raw binaries are sent from their file as they are read, never held whole.
@Suite struct StreamedImageTests {
    static func writeFile(_ bytes: [UInt8], name: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-stream-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent(name).path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// From 16 MiB a .bin is prepared as a streamed part: no bytes in memory, its hashes
    /// taken in one pass, the version label from its SHA-256; smaller ones are read whole.
    @Test func largeBinariesArePreparedAsStreams() throws {
        var random = seededGenerator("largeBinariesArePreparedAsStreams")
        var content = [UInt8](repeating: 0, count: NativeProtocol.streamingThreshold)
        for index in stride(from: 0, to: content.count, by: 8) {
            var word = random.next()
            for offset in index..<min(index + 8, content.count) {
                content[offset] = UInt8(truncatingIfNeeded: word)
                word >>= 8
            }
        }
        let path = try Self.writeFile(content, name: "large.bin")
        let image = try NativeProtocol().prepareImage(ImageRequest(path: path))
        let part = try #require(image.parts.first)
        let streamed = try #require(part.streamed)
        #expect(part.data.isEmpty)
        #expect(part.count == content.count)
        #expect(image.totalBytes == content.count)
        #expect(streamed.sha256 == SHA256Digest.hash(content))
        #expect(streamed.crc32 == CRC32.checksum(content))
        #expect(image.version == "sha256:" + String(SHA256Digest.hash(content).hexString.prefix(12)))

        let small = try Self.writeFile(Array(content.prefix(4096)), name: "small.bin")
        let whole = try NativeProtocol().prepareImage(ImageRequest(path: small, versionLabel: "3"))
        #expect(whole.parts.first?.streamed == nil)
        #expect(whole.bytes == Array(content.prefix(4096)))
    }

    /// The device ends with exactly the file's bytes, sent packet by packet from the file.
    @Test func aFlashFromAFileLeavesTheFilesBytesOnTheDevice() async throws {
        var random = seededGenerator("aFlashFromAFileLeavesTheFilesBytesOnTheDevice")
        let content = (0..<(FileByteSource.blockSize * 2 + 777)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        let path = try Self.writeFile(content, name: "app.bin")
        let source = try FileByteSource(path: path)
        let parsed = try SimulatorAddress(parsing: "sim://2m-dle?loss=0.02&seed=4")
        let (report, storage) = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            let storage = DeviceStorage(activeImage: [0], activeVersion: "1", slotSize: 1 << 20)
            await world.add(
                SimulatedDevice(
                    address: "C0:FF:EE:00:00:01",
                    half: NativeDevice(name: "sim", storage: storage, bufferCount: 32, maximumPacket: 244),
                    model: parsed.model))
            let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: "sim")
            let report = try await NativeUpdater(connector: connector, clock: world.clock)
                .flash(source: source, digests: nil, version: "2")
            return (report, storage)
        }
        #expect(storage.snapshot.activeImage == content)
        #expect(storage.snapshot.activeVersion == "2")
        #expect(report.statistics.packetsResent > 0)
    }

    /// A streamed image cannot be deflated whole: --compression on is refused with the fix.
    @Test func compressionOnIsRefusedForAStreamedImage() async throws {
        let path = try Self.writeFile([UInt8](repeating: 0xAB, count: 50_000), name: "zeros.bin")
        let source = try FileByteSource(path: path)
        let tuning = TransferTuning(compression: .on)
        let parsed = try SimulatorAddress(parsing: "sim://2m-dle")
        let outcome: Result<UpdateReport, TransferError> = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model)
            await world.add(
                SimulatedDevice(
                    address: "C0:FF:EE:00:00:01",
                    half: NativeDevice(
                        name: "sim", storage: DeviceStorage(activeImage: [0], activeVersion: "1", slotSize: 1 << 20),
                        bufferCount: 32, maximumPacket: 244),
                    model: parsed.model))
            let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: "sim")
            do throws(TransferError) {
                return .success(
                    try await NativeUpdater(connector: connector, clock: world.clock, tuning: tuning)
                        .flash(source: source, digests: nil, version: "2"))
            } catch { return .failure(error) }
        }
        guard case .failure(let error) = outcome else {
            Issue.record("a compressed streamed flash was not refused")
            return
        }
        #expect(error.code == .badInput)
        #expect(error.message.contains("--compression auto or off"))
    }
}
