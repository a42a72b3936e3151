import Foundation
import Testing

/// `flash` over UDP against `bleota sim serve` shaped as Zephyr's own `smp_svr` was seen to be
/// (MCUmgr's UDP defaults: a 2048-byte buffer, a transport that reads 1500 bytes of a datagram, a
/// reset 250 ms after its answer): the default upload and the reset both work as they must there.
@Suite struct SMPOverUDPCLITests {
    static let samples = "samples/mcuboot/imgtool-2.5.0"

    /// A served SMP device with Zephyr's UDP buffer size and its UDP port.
    static func serveLikeZephyr(_ arguments: [String] = []) throws -> (Process, Int) {
        let served = try ServedDevice.start(
            ["--udp", "127.0.0.1:\(try NativeUDPCLITests.freePort())", "--smp-buffer", "2048", "--duration", "60"] + arguments)
        return (served.process, try served.port())
    }

    static func stop(_ server: Process) {
        server.terminate()
        server.waitUntilExit()
    }

    /// Requests sized from the device's 2048-byte buffer went out as 2048-byte datagrams, which
    /// Zephyr reads 1500 bytes of and answers "corrupt": every try failed. Now a datagram is at
    /// most 1472 bytes unless the address says otherwise, and the reset's answer is not taken
    /// for the reset: the update that took is reported as taken, with one reset.
    @Test func theDefaultFlashOverUDPWorksAgainstZephyrsLimitsAndItsLateReset() throws {
        let (server, port) = try Self.serveLikeZephyr()
        defer { Self.stop(server) }
        let device = "udp://127.0.0.1:\(port)"
        let result = try BleotaProcess.run(["flash", "\(Self.samples)/app-1.1.0-ecdsa-p256.bin", "--device", device, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        #expect(report?["versionAfter"] as? String == "1.1.0")
        #expect(!result.stderr.contains("resetting again"), "\(result.stderr)")
        // The device's own word, read by a second run: the new image runs, confirmed.
        let state = try BleotaProcess.run(["image", "state", "--device", device, "--json"])
        #expect(state.status == 0, "\(state.stderr)")
        let slots = try JSONSerialization.jsonObject(with: Data(state.stdout.utf8)) as? [String: Any]
        let first = (slots?["images"] as? [[String: Any]])?.first
        #expect(first?["version"] as? String == "1.1.0")
        #expect(first?["confirmed"] as? Bool == true)
    }

    /// An address that allows datagrams longer than the device reads: the first two are refused as
    /// cut short, the requests get smaller, the upload goes on and says why.
    @Test func datagramsTheDeviceCutsShortMakeTheRequestsSmaller() throws {
        let (server, port) = try Self.serveLikeZephyr()
        defer { Self.stop(server) }
        let result = try BleotaProcess.run([
            "flash", "\(Self.samples)/app-1.1.0-ecdsa-p256.bin", "--device", "udp://127.0.0.1:\(port)?datagram=4000", "--mode", "upload-only",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("the device refused requests of"), "\(result.stderr)")
        #expect(result.stderr.contains("as cut short (corrupt)"), "\(result.stderr)")
    }

    @Test(arguments: [
        ("udp://127.0.0.1:1?datagram=10", "the only udp:// key is datagram=N, the longest datagram to send (64…65507, e.g. datagram=1472)"),
        ("udp://127.0.0.1:1?mtu=1400", "the only udp:// key is datagram=N"),
    ])
    func aBadDatagramKeyIsAUsageErrorNamingTheFix(address: String, message: String) throws {
        let result = try BleotaProcess.run(["image", "state", "--device", address])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
    }
}

/// `image info` and `flash` of the images and packages nRF Connect SDK builds make.
@Suite struct NCSImageCLITests {
    static let samples = "samples/mcuboot/imgtool-2.5.0-ncs"

    /// imgtool --encrypt: the hash covers the plaintext, so it cannot be recomputed, and the image was
    /// called corrupt (exit 5). It is shown as encrypted, with its key TLV, and flashes.
    @Test func anEncryptedImageIsShownAsSuchAndFlashes() throws {
        let name = "\(Self.samples)/blinky-1.1.0-encrypted-aes128-ecies-p256.bin"
        let info = try BleotaProcess.run(["image", "info", name, "--key", "\(Self.samples)/ecdsa-p256.pub.pem"])
        #expect(info.status == 0, "\(info.stderr)")
        #expect(info.stdout.contains("flags 0x00000004 (encrypted AES-128)"), "\(info.stdout)")
        #expect(info.stdout.contains("  encrypted: AES-128, key in TLV 0x32 (encrypted key (ECIES P-256))"), "\(info.stdout)")
        #expect(info.stdout.contains("(not checked: it covers the plaintext of the encrypted image; MCUboot checks it after decrypting)"))
        #expect(info.stdout.contains("signature: ECDSA P-256 (verified with the given key)"), "\(info.stdout)")
        #expect(!info.stdout.contains("DOES NOT MATCH"))
        let flash = try BleotaProcess.run(["flash", name, "--device", "sim://2m-dle?protocol=smp", "--json"])
        #expect(flash.status == 0, "\(flash.stderr)")
        #expect(flash.stdout.contains("\"versionAfter\" : \"1.1.0\""), "\(flash.stdout)")
    }

    @Test func aCompressedImageNamesItsCompressionAndTheHashItWillBeKnownBy() throws {
        let info = try BleotaProcess.run(["image", "info", "\(Self.samples)/blinky-1.1.0-lzma2armthumb-ecdsa-p256.bin", "--json"])
        #expect(info.status == 0, "\(info.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(info.stdout.utf8)) as? [String: Any]
        let mcuboot = document?["mcuboot"] as? [String: Any]
        #expect(mcuboot?["compression"] as? String == "LZMA2 with the ARM Thumb filter")
        #expect(mcuboot?["flagNames"] as? [String] == ["compressed LZMA2", "ARM Thumb filter"])
        #expect(mcuboot?["decompressedSize"] as? Int == 13312)
        #expect((mcuboot?["decompressedHash"] as? String)?.count == 64)
        let names = (mcuboot?["tlvs"] as? [[String: Any]])?.compactMap { $0["name"] as? String }
        #expect(names?.contains("decompressed SHA") == true, "\(names ?? [])")
        #expect(!(names ?? []).contains { $0.hasPrefix("TLV 0x7") })
    }

    @Test func aDependencyAndASecurityCounterAreShown() throws {
        let info = try BleotaProcess.run(["image", "info", "\(Self.samples)/blinky-1.1.0-needs-image1-1.2.0+3-counter7-ecdsa-p256.bin"])
        #expect(info.status == 0, "\(info.stderr)")
        #expect(info.stdout.contains("  security counter: 7"), "\(info.stdout)")
        #expect(info.stdout.contains("  needs:     image 1 at 1.2.0.3 or later"), "\(info.stdout)")
    }

    @Test func imageInfoOfAnNCSPackageShowsEachImage() throws {
        let info = try BleotaProcess.run(["image", "info", "\(Self.samples)/nrf5340-sysbuild-dfu_application.zip", "--json"])
        #expect(info.status == 0, "\(info.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(info.stdout.utf8)) as? [String: Any]
        #expect(document?["format"] as? String == "nRF Connect SDK DFU package (format-version 1)")
        let parts = document?["parts"] as? [[String: Any]]
        #expect(parts?.map { $0["name"] as? String } == ["image 0", "image 1"])
        #expect(parts?.map { $0["image"] as? String } == ["sensor_hub.signed.bin", "ipc_radio.bin"])
        #expect(parts?.map { $0["imageIndex"] as? Int } == [0, 1])
        #expect(parts?.allSatisfy { $0["hashMatches"] as? Bool == true } == true)
    }

    /// The package an nRF5340 build makes updates both cores in one flash (exit 0, both cores named
    /// in the notes); `--image 1` updates the network core alone; a device with one image refuses
    /// the package at connect (exit 4), and `--image` is a usage error where it cannot apply.
    @Test func aTwoCorePackageFlashesBothCoresAndTheImageOptionPicksOne() throws {
        let package = "\(Self.samples)/nrf5340-sysbuild-dfu_application.zip"
        let both = try BleotaProcess.run(["flash", package, "--device", "sim://2m-dle?protocol=smp&images=2"])
        #expect(both.status == 0, "\(both.stderr)")
        #expect(both.stdout.contains("; device now runs '2.0.1' (was '1.0.0')"), "\(both.stdout)")
        #expect(both.stderr.contains("note: uploading image 1 (1.1.0), 13976 bytes"), "\(both.stderr)")
        let network = try BleotaProcess.run(["flash", package, "--image", "1", "--device", "sim://2m-dle?protocol=smp&images=2", "--json"])
        #expect(network.status == 0, "\(network.stderr)")
        #expect(network.stdout.contains("\"versionAfter\" : \"1.1.0\""), "\(network.stdout)")
        let single = try BleotaProcess.run(["flash", package, "--device", "sim://2m-dle?protocol=smp"])
        #expect(single.status == 4, "\(single.stderr)")
        #expect(single.stderr.contains("the device has no image 1 (its slot info lists image 0): nothing was sent"), "\(single.stderr)")
        #expect(single.stderr.split(separator: "\n").filter { $0.hasPrefix("error:") }.count == 1, "\(single.stderr)")
        let outOfRange = try BleotaProcess.run(["flash", package, "--image", "16", "--device", "sim://2m-dle?protocol=smp&images=2"])
        #expect(outOfRange.status == 2 && outOfRange.stderr.contains("error: --image 16: MCUboot numbers images 0…15: give one of those"), "\(outOfRange.stderr)")
        let native = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--image", "1", "--device", "sim://2m-dle"])
        #expect(native.status == 2 && native.stderr.contains("error: --image: bleota's native protocol updates one image per device: drop --image"), "\(native.stderr)")
    }
}

/// `flash --no-downgrade`: an image not newer than what the device runs is refused before anything is
/// sent, and the device is asked to refuse it too (SMP's upload `upgrade` flag, which the served device
/// honours as img_mgmt does: scripts/smp-interop drives it with mcumgr-toolkit's upgrade_only).
@Suite struct NoDowngradeCLITests {
    static let image = "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin"

    @Test func anImageNotNewerThanTheDevicesIsRefusedBeforeSending() throws {
        let same = try BleotaProcess.run(["flash", Self.image, "--device", "sim://2m-dle?protocol=smp&version=1.1.0", "--no-downgrade", "--json"])
        #expect(same.status == 4, "\(same.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(same.stdout.utf8)) as? [String: Any]
        #expect(
            (report?["error"] as? String)?.contains("the device runs 1.1.0, not older than the image's 1.1.0, and --no-downgrade refuses that: nothing was sent")
                == true, "\(same.stdout)")
        #expect(report?["step"] as? String == "connect")
        let newer = try BleotaProcess.run(["flash", Self.image, "--device", "sim://2m-dle?protocol=smp", "--no-downgrade", "--json"])
        #expect(newer.status == 0, "\(newer.stderr)")
        #expect(newer.stdout.contains("\"versionAfter\" : \"1.1.0\""))
    }

    @Test func aProtocolThatCannotAskTheDeviceRefusesTheFlag() throws {
        let native = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--no-downgrade"])
        #expect(native.status == 2, "\(native.stderr)")
        #expect(native.stderr.contains("error: --no-downgrade: bleota's native protocol cannot ask the device to refuse an older image: drop --no-downgrade"), "\(native.stderr)")
    }
}

/// `sim serve` as a process among others: its device list feeds fleet, and a signal ends it as documented.
@Suite struct SimServeProcessTests {
    /// stdout is the list fleet --devices reads (the header went to stdout too); SIGTERM ends it with
    /// 130, as every interrupted command, where the signal's own 143 was what the process said.
    @Test func theDeviceListIsAllOfStdoutAndSIGTERMExits130() throws {
        let server = Process()
        server.executableURL = BleotaProcess.executable
        server.arguments = ["sim", "serve", "--devices", "3", "--udp", "127.0.0.1:0", "--duration", "60"]
        let out = Pipe()
        let err = Pipe()
        server.standardOutput = out
        server.standardError = err
        try server.run()
        var text = ""
        while text.split(separator: "\n").count < 3 {
            let chunk = out.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        server.terminate()
        server.waitUntilExit()
        text += String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 3 && lines.allSatisfy { $0.hasPrefix("udp://127.0.0.1:") }, "\(text)")
        #expect(server.terminationReason == .exit && server.terminationStatus == 130, "\(server.terminationReason) \(server.terminationStatus)")
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(said.contains("serving 3 smp devices over udp:"), "\(said)")
        #expect(said.contains("error: interrupted: the simulated devices stopped serving"), "\(said)")
    }
}

/// `tune` for SMP: each trial uploads the image to the secondary slot with one frame size and window,
/// never marked; delays, which SMP has no use for, are not tried.
@Suite struct SMPTuneCLITests {
    @Test func tuneMeasuresUploadsOverFrameSizeAndWindowOnly() throws {
        let tuned = try BleotaProcess.run([
            "tune", "--device", "sim://linux-bluez?protocol=smp", "--no-saved-tuning", "--json", "--image", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin",
        ])
        #expect(tuned.status == 0, "\(tuned.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(tuned.stdout.utf8)) as? [String: Any]
        let space = document?["space"] as? [String: Any]
        #expect(space?["delaysMicroseconds"] as? [Int] == [0], "\(String(describing: space))")
        #expect((space?["windows"] as? [Int])?.count == 5)
        let trials = document?["trials"] as? [[String: Any]] ?? []
        #expect(!trials.isEmpty && trials.allSatisfy { ($0["goodput"] as? Double ?? 0) > 0 }, "every trial uploaded the image")
        let untuned = try BleotaProcess.run(["tune", "--device", "sim://2m-dle?protocol=smp", "--no-saved-tuning"])
        #expect(untuned.status == 2 && untuned.stderr.contains("SMP (MCUmgr) devices take only real images: give the package to measure with, --image FILE"))
    }
}

/// `flash --xip-pair A B`: two variants of a direct-XIP image, the one for the free slot sent.
@Suite struct XIPPairCLITests {
    static let samples = "samples/mcuboot/imgtool-2.5.0-ncs"

    @Test func theVariantForTheFreeSlotIsFlashedAndBadPairsAreRefused() throws {
        let pair = ["\(Self.samples)/blinky-1.1.0-xip-slot1-ecdsa-p256.bin", "\(Self.samples)/blinky-1.1.0-xip-slot0-ecdsa-p256.bin"]
        let flash = try BleotaProcess.run(["flash", "--xip-pair"] + pair + ["--device", "sim://2m-dle?protocol=smp&mcuboot-mode=direct-xip"])
        #expect(flash.status == 0, "\(flash.stderr)")
        #expect(flash.stderr.contains("note: direct-XIP: the device runs slot 0, so the variant linked for slot 1 goes"), "\(flash.stderr)")
        #expect(flash.stdout.contains("device now runs '1.1.0' (was '1.0.0')"), "\(flash.stdout)")
        let same = try BleotaProcess.run(["flash", "--xip-pair", pair[1], pair[1], "--device", "sim://2m-dle?protocol=smp&mcuboot-mode=direct-xip"])
        #expect(same.status == 3 && same.stderr.contains("are both linked for 0xc000: a direct-XIP pair has one image for each slot"), "\(same.stderr)")
        let plain = try BleotaProcess.run([
            "flash", "--xip-pair", pair[0], "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle?protocol=smp",
        ])
        #expect(plain.status == 3 && plain.stderr.contains("is not linked for a slot (no ROM_FIXED flag)"), "\(plain.stderr)")
        let both = try BleotaProcess.run(["flash", pair[0], "--xip-pair"] + pair + ["--device", "sim://2m-dle?protocol=smp"])
        #expect(both.status == 2 && both.stderr.contains("give either IMAGE or --xip-pair A B, not both"), "\(both.stderr)")
    }
}
