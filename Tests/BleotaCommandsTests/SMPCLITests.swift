import Foundation
import Testing

@testable import BleotaCommands

@Suite struct SMPCLITests {
    static let samples = "samples/mcuboot/imgtool-2.5.0"
    static let device = "sim://2m-dle?protocol=smp"

    @Test func flashOverSMPReportsTheNewVersionAndEveryStep() throws {
        let result = try BleotaProcess.run([
            "flash", "\(Self.samples)/app-1.1.0-ecdsa-p256.bin", "--device", Self.device,
            "--key", "\(Self.samples)/ecdsa-p256.pub.pem", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        #expect(report?["versionBefore"] as? String == "1.0.0")
        #expect(report?["versionAfter"] as? String == "1.1.0")
        #expect(report?["protocolName"] as? String == "smp")
        let steps = (report?["stepSeconds"] as? [String: Double]).map { Set($0.keys) }
        #expect(steps == ["load", "connect", "transfer", "verify", "activate", "reconnect", "confirm"])
    }

    @Test func aSignatureFromAnotherKeyIsRefusedBeforeConnecting() throws {
        let result = try BleotaProcess.run([
            "flash", "\(Self.samples)/app-1.1.0-ecdsa-p256.bin", "--device", Self.device,
            "--key", "\(Self.samples)/other-ecdsa-p256.pub.pem",
        ])
        #expect(result.status == 5)
        #expect(result.stderr.contains("error: \(Self.samples)/app-1.1.0-ecdsa-p256.bin: the image was signed with a different key"))
        #expect(!result.stderr.contains("step: connect"), "nothing may connect")
    }

    @Test func anUnsignedImageWithAKeyIsRefused() throws {
        let result = try BleotaProcess.run([
            "flash", "\(Self.samples)/blinky-1.0.1-unsigned.bin", "--device", Self.device,
            "--key", "\(Self.samples)/ecdsa-p256.pub.pem",
        ])
        #expect(result.status == 5)
        #expect(result.stderr.contains("the image has no signature but --key was given"))
    }

    @Test func aDamagedImageIsRefusedBeforeConnecting() throws {
        var bytes = try [UInt8](Data(contentsOf: BleotaProcess.repositoryRoot.appendingPathComponent("\(Self.samples)/app-1.1.0-ecdsa-p256.bin")))
        bytes[0x300] ^= 0xFF
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-damaged-\(UUID()).bin")
        try Data(bytes).write(to: path)
        defer { try? FileManager.default.removeItem(at: path) }
        let result = try BleotaProcess.run(["flash", path.path, "--device", Self.device])
        #expect(result.status == 5)
        #expect(result.stderr.contains("does not match its contents"))
        #expect(result.stderr.split(separator: "\n").filter { $0.hasPrefix("error:") }.count == 1, "one line")
        #expect(!result.stderr.contains("step: connect"))
    }

    @Test func aNonMCUbootFileIsABadInputForSMP() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device])
        #expect(result.status == 3)
        #expect(result.stderr.contains("is not an MCUboot image"))
    }

    @Test func imageInfoShowsTheMCUbootHeaderTLVsAndSignature() throws {
        let result = try BleotaProcess.run([
            "image", "info", "\(Self.samples)/app-1.2.0+7-ed25519.bin",
            "--key", "\(Self.samples)/ed25519.pub.pem", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let mcuboot = report?["mcuboot"] as? [String: Any]
        #expect(mcuboot?["version"] as? String == "1.2.0.7")
        #expect(mcuboot?["signature"] as? String == "Ed25519")
        #expect(mcuboot?["signatureVerified"] as? Bool == true)
        #expect(mcuboot?["hash"] as? String == "11228a714b7aaadf649643068e16412cdcd8ebc6c314c0a3cc1c9cdb79b65d94")
        let wrongKey = try BleotaProcess.run(["image", "info", "\(Self.samples)/app-1.2.0+7-ed25519.bin", "--key", "\(Self.samples)/ecdsa-p256.pub.pem"])
        #expect(wrongKey.status == 5)
        #expect(wrongKey.stdout.contains("DOES NOT VERIFY"))
    }

    @Test func echoResetAndImageStateTalkToTheSimulatedDevice() throws {
        let echo = try BleotaProcess.run(["echo", "hello there", "--device", Self.device])
        #expect(echo.status == 0)
        #expect(echo.stdout == "hello there\n")
        let state = try BleotaProcess.run(["image", "state", "--device", Self.device])
        #expect(state.status == 0)
        #expect(state.stdout.hasPrefix("image 0 slot 0: 1.0.0  active confirmed bootable"))
        #expect(state.stdout.contains("bootloader: MCUboot (swap using scratch)"))
        let erase = try BleotaProcess.run(["image", "erase", "--device", Self.device])
        #expect(erase.status == 0, "\(erase.stderr)")
        #expect(erase.stdout == "erased slot 1 of \(Self.device)\n")
        let reset = try BleotaProcess.run(["reset", "--device", Self.device, "--json"])
        #expect(reset.status == 0)
        let denied = try BleotaProcess.run(["image", "state", "--device", Self.device, "--test", String(repeating: "ab", count: 32)])
        #expect(denied.status == 4)
        #expect(denied.stderr.contains("hash not found (rc 8)"))
    }

    @Test func pushAndPullUseTheFileSystemGroup() throws {
        let pulled = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-pulled-\(UUID()).txt")
        defer { try? FileManager.default.removeItem(at: pulled) }
        let result = try BleotaProcess.run(["pull", "hello.txt", "--device", Self.device, "-o", pulled.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try String(contentsOf: pulled, encoding: .utf8) == "Hello from the bleota simulator.\n")
        let push = try BleotaProcess.run(["push", "samples/firmware/blinky.bin", "--device", Self.device, "--json"])
        #expect(push.status == 0, "\(push.stderr)")
        let missing = try BleotaProcess.run(["pull", "absent.txt", "--device", Self.device, "-o", pulled.path + ".x"])
        #expect(missing.status == 4)
        #expect(!FileManager.default.fileExists(atPath: pulled.path + ".x"))
    }

    @Test func transportsAndProtocolsThatDoNotFitAreUsageErrors() throws {
        // An address that names a protocol which cannot echo says which can…
        let native = try BleotaProcess.run(["echo", "x", "--device", "sim://2m-dle?protocol=native"])
        #expect(native.status == 2)
        #expect(native.stderr.contains("add protocol=smp"))
        // …one that names none runs the device the command needs.
        let plain = try BleotaProcess.run(["echo", "hello", "--device", "sim://2m-dle"])
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(plain.stdout == "hello\n")
        let udpNative = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "udp://127.0.0.1:9", "--protocol", "nordic-dfu"])
        #expect(udpNative.status == 2)
        let badUDP = try BleotaProcess.run(["echo", "x", "--device", "udp://127.0.0.1:99999"])
        #expect(badUDP.status == 2)
        #expect(badUDP.stderr.contains("the port must be 1…65535"))
    }
}

@Suite struct SMPBadInputTests {
    @Test(arguments: [
        (["image", "state", "--device", "sim://2m-dle?protocol=smp", "--test", "abc"], Int32(2), "'abc' is not a SHA-256: write 64 hex digits"),
        (["sim", "serve", "--smp-buffer", "10"], 2, "--smp-buffer 10 is out of range: use 128…65535"),
        (["sim", "serve", "--buffer", "10"], 2, "--smp-buffer and --smp-buffers, as the sim:// keys"),
        (["sim", "serve", "--slot", "0"], 2, "--slot 0 is out of range: use 1…4294967295 bytes"),
        (["sim", "serve", "--link", "nonsense"], 2, "--link 'nonsense': unknown simulator preset 'nonsense': use one of"),
        (["sim", "serve", "--link", "2m-dle?loss=2"], 2, "sim:// key 'loss' is a probability: use 0…1, got 2"),
        (
            ["sim", "serve", "--link", "slow-flash?when-full=hold"], 2,
            "--link 'slow-flash?when-full=hold': the shaped link drops what finds the device's queue full and cannot hold it: drop when-full=hold"
        ),
        (
            ["gatt", "subscribe", "--device", "ble://C0:FF:EE:00:00:01", "--handle", "8", "--write-handle", "3"], 2,
            "--write-handle and --write-hex go together: give both or neither"
        ),
        (
            ["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle?protocol=smp", "--key", "/nonexistent.pem"], 3,
            "/nonexistent.pem: no such file: check the path"
        ),
        (["echo", "x", "--device", "serial://ttyACM0"], 2, "needs an absolute device path: write serial:///dev/ttyACM0"),
        (
            ["image", "info", "samples/firmware/blinky.bin", "--key", "samples/mcuboot/imgtool-2.5.0/ed25519.pub.pem"], 3,
            "is not an MCUboot image, so --key has nothing to verify"
        ),
        (["tune", "--device", "udp://127.0.0.1:1337"], 2, "SMP (MCUmgr) devices take only real images: give the package to measure with, --image FILE"),
    ])
    func badInputIsOneLineWithTheFix(arguments: [String], status: Int32, message: String) throws {
        let result = try BleotaProcess.run(arguments)
        #expect(result.status == status, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        let errorLines = result.stderr.split(separator: "\n").filter { $0.lowercased().hasPrefix("error:") }
        #expect(errorLines.count == 1)
    }
}
