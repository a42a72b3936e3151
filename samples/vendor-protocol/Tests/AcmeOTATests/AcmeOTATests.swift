import AcmeOTA
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Foundation
import Testing

@Suite struct AcmeMessageTests {
    @Test func everyMessageRoundTrips() throws {
        let messages: [AcmeMessage] = [
            .start(length: 70_000, crc32: 0xDEAD_BEEF, chunk: 239, version: "2.0"), .data(index: 0xFFFF, payload: [1, 2, 3]),
            .end, .versionRequest, .poll, .status(.missing, next: 7, count: 3), .version("1.0.0"),
        ]
        for message in messages { #expect(try AcmeMessage(decoding: message.encode()) == message) }
        #expect(AcmeMessage.data(index: 0x0102, payload: [0xAA]).encode().prefix(4) == [0x02, 0x02, 0x01, 0xAA])
    }

    @Test func aDamagedDataPacketNamesItsChecksum() {
        var packet = AcmeMessage.data(index: 1, payload: Array(repeating: 7, count: 20)).encode()
        packet[5] ^= 0x10
        #expect(throws: DecodingError.self) { try AcmeMessage(decoding: packet) }
        do { _ = try AcmeMessage(decoding: packet) } catch { #expect(error.field == "data.crc16") }
        do { _ = try AcmeMessage(decoding: [0x42]) } catch { #expect(error.field == "opcode") }
    }
}

/// Flashes `image` onto a simulated ACME device at `address`; returns the outcome and what the device runs.
func simulateAcmeFlash(_ address: String, image: [UInt8]) async throws -> (Result<UpdateReport, TransferError>, [UInt8], String) {
    let registry = ProtocolRegistry.builtIn.registering(AcmeOTAProtocol())
    let parsed = try SimulatorAddress(parsing: address, registry: registry)
    return try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        let device = AcmeDevice(version: "1.0", slotSize: 1 << 20)
        await world.add(SimulatedDevice(address: Simulation.deviceAddress, half: device, model: parsed.model))
        let context = HostContext(
            protocolName: "acme-ota", connector: SimulatedConnector(world: world, address: Simulation.deviceAddress, description: address),
            clock: world.clock)
        let host = AcmeOTAProtocol().makeHost(context)
        let outcome: Result<UpdateReport, TransferError>
        do throws(TransferError) {
            outcome = .success(try await host.flash(PreparedImage(bytes: image, version: "2.0", summary: "test"), mode: .testAndConfirm))
        } catch { outcome = .failure(error) }
        return (outcome, await device.activeImage, await device.runningVersion)
    }
}

@Suite struct AcmeSimulationTests {
    static func image(_ size: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(seed: seed)
        return (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    @Test func aCleanLinkActivatesTheExactImage() async throws {
        let image = Self.image(40_000, seed: 1)
        let (outcome, active, version) = try await simulateAcmeFlash("sim://2m-dle?protocol=acme-ota", image: image)
        let report = try outcome.get()
        #expect(active == image)
        #expect(version == "2.0")
        #expect(report.versionBefore == "1.0" && report.versionAfter == "2.0")
        #expect(report.protocolName == "acme-ota")
    }

    @Test(arguments: [UInt64(11), 12, 13, 14])
    func lossAndCorruptionEndWithTheExactImageOrTheOldOne(seed: UInt64) async throws {
        print("seed \(seed)")
        let image = Self.image(30_000, seed: seed)
        let (outcome, active, version) = try await simulateAcmeFlash(
            "sim://1m-dle-7.5ms?protocol=acme-ota&loss=0.05&corrupt=0.01&notify-loss=0.02&seed=\(seed)", image: image)
        switch outcome {
        case .success:
            #expect(active == image)
            #expect(version == "2.0")
        case .failure(let error):
            Issue.record("seed \(seed): \(error)")
            #expect(active.isEmpty && version == "1.0")
        }
    }
}

@Suite struct AcmeCommandLineTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `acme-bleota`, built beside this test bundle: in the package's own
    /// `.build/debug`, or in whatever `--scratch-path` the build was given
    /// (bleota's CI builds this sample in bleota's own build directory).
    static var executable: URL {
        if let bundle = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            let beside = URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent("acme-bleota")
            if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        }
        return root.appendingPathComponent(".build/debug/acme-bleota")
    }

    static func run(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.currentDirectoryURL = root
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, stdout, stderr)
    }

    @Test func bleotasOwnFlashCommandSpeaksTheVendorProtocol() throws {
        let image = FileManager.default.temporaryDirectory.appendingPathComponent("acme-\(UUID()).bin")
        try Data(AcmeSimulationTests.image(20_000, seed: 5)).write(to: image)
        defer { try? FileManager.default.removeItem(at: image) }
        let result = try Self.run(["flash", image.path, "--device", "sim://2m-dle?protocol=acme-ota&loss=0.02", "--version-label", "3.1", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        #expect(report?["protocolName"] as? String == "acme-ota")
        #expect(report?["versionAfter"] as? String == "3.1")
        #expect(report?["versionBefore"] as? String == "1.0.0")
    }

    @Test func whatTheProtocolCannotDoIsRefusedInOneLine() throws {
        let udp = try Self.run(["flash", "x.bin", "--protocol", "acme-ota", "--device", "udp://127.0.0.1:9"])
        #expect(udp.status == 2)
        #expect(udp.stderr.contains("ACME OTA does not run over udp"))
        let echo = try Self.run(["echo", "hi", "--device", "sim://2m-dle?protocol=acme-ota"])
        #expect(echo.status == 2)
        #expect(echo.stderr.contains("which cannot echo"))
        let listed = try Self.run(["protocols"])
        #expect(listed.stdout.contains("acme-ota: ACME OTA"))
    }
}
