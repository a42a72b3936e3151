import Foundation
import Testing

@testable import BleotaCommands

@Suite struct ImageCommandTests {
    struct Checksums: Decodable {
        struct Entry: Decodable {
            var size: Int
            var crc32: String
            var sha256: String
        }
        var blinky: Entry
    }

    static func expected() throws -> Checksums.Entry {
        let url = BleotaProcess.repositoryRoot.appendingPathComponent("samples/firmware/checksums.json")
        return try JSONDecoder().decode(Checksums.self, from: Data(contentsOf: url)).blinky
    }

    @Test(arguments: ["blinky.hex", "blinky.srec", "blinky.bin"])
    func infoJSONMatchesIndependentChecksums(file: String) throws {
        let result = try BleotaProcess.run(["image", "info", "samples/firmware/\(file)", "--json"])
        #expect(result.status == 0)
        let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(result.stdout.utf8))
        let expected = try Self.expected()
        #expect(report.crc32 == expected.crc32)
        #expect(report.sha256 == expected.sha256)
        #expect(report.size == expected.size)
        if file != "blinky.bin" {
            #expect(report.segments == [.init(address: 0x8000, length: 10240), .init(address: 0xB000, length: 1024)])
        }
    }

    @Test func infoTextShowsSegmentsAndHashes() throws {
        let result = try BleotaProcess.run(["image", "info", "samples/firmware/blinky.hex"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("format:    Intel HEX"))
        #expect(result.stdout.contains("0x00008000–0x0000a800  10240 bytes"))
        #expect(result.stdout.contains("crc32:     \(try Self.expected().crc32)"))
    }

    /// An image in a bootloader's own format is not just "raw binary": info names the format and
    /// the protocol flash picks for it (the same hook), in text and in JSON.
    @Test(
        arguments: [
            ("samples/espressif/esp-app-sample.bin", "espressif-ota", "ESP-IDF application (.bin)"),
            ("samples/suota/da1469x-app-sample.img", "suota", "DA1469x mkimage image (.img, .bin)"),
            ("samples/ti-oad/cc26x2-app-sample_oad.bin", "ti-oad", "OAD image (.bin from TI's oad_image_tool)"),
            ("samples/silabs/efr32-app-sample.gbl", "silabs-ota", "Gecko Bootloader image (.gbl)"),
            ("samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "smp", "MCUboot (.bin signed by imgtool)"),
        ] as [(String, String, String)])
    func infoNamesTheProtocolAnImageIsMadeFor(file: String, protocolName: String, format: String) throws {
        let text = try BleotaProcess.run(["image", "info", file, "--input-format", "bin"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("format:    raw binary, \(format)\n"), "\(text.stdout)")
        #expect(text.stdout.contains("protocol:  \(protocolName) (what flash speaks to carry it)"))
        let json = try BleotaProcess.run(["image", "info", file, "--input-format", "bin", "--json"])
        let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(json.stdout.utf8))
        #expect(report.protocol == protocolName)
        #expect(report.madeFor == format)
        let plain = try BleotaProcess.run(["image", "info", "samples/firmware/blinky.bin", "--json"])
        #expect(try JSONDecoder().decode(ImageInfoDocument.self, from: Data(plain.stdout.utf8)).protocol == nil)
    }

    @Test func hexToBinToHexRoundTrip() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let bin = directory.appendingPathComponent("out.bin").path
        let hex = directory.appendingPathComponent("again.hex").path
        #expect(try BleotaProcess.run(["image", "convert", "samples/firmware/blinky.hex", bin]).status == 0)
        let convert = try BleotaProcess.run(["image", "convert", bin, hex, "--base-address", "0x8000"])
        #expect(convert.status == 0)
        #expect(convert.stdout.hasPrefix("wrote \(hex) (Intel HEX"))
        let original = try BleotaProcess.run(["image", "info", "samples/firmware/blinky.hex", "--json"])
        let again = try BleotaProcess.run(["image", "info", hex, "--json"])
        let a = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(original.stdout.utf8))
        let b = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(again.stdout.utf8))
        #expect(a.sha256 == b.sha256)
        #expect(a.baseAddress == b.baseAddress)
        #expect(a.size == b.size)
    }

    /// An S-record's S0 header survives a conversion to S-record, and a .bin output, one flat
    /// run, says its segments were filled into one rather than "2 segments" (issue 48, item 17).
    @Test func conversionsSayWhatTheOutputHolds() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = "samples/firmware/blinky.srec"
        let header = try #require(try String(contentsOfFile: source, encoding: .utf8).split(separator: "\n").first)
        #expect(header.hasPrefix("S0"))
        let srec = directory.appendingPathComponent("again.srec").path
        let toSrec = try BleotaProcess.run(["image", "convert", source, srec])
        #expect(toSrec.status == 0, "\(toSrec.stderr)")
        #expect(try String(contentsOfFile: srec, encoding: .utf8).split(separator: "\n").first == header)
        #expect(toSrec.stdout.contains("(Motorola S-record, 2 segments, "), "\(toSrec.stdout)")
        let bin = directory.appendingPathComponent("flat.bin").path
        let toBin = try BleotaProcess.run(["image", "convert", source, bin])
        #expect(toBin.status == 0, "\(toBin.stderr)")
        #expect(toBin.stdout.contains("(raw binary, 2 segments filled into one with 0xFF, 13312 bytes, "), "\(toBin.stdout)")
    }

    @Test func malformedImageIsExit3WithFileAndLine() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bad-\(UUID().uuidString).hex").path
        try ":0100000042BD\n:0100010043BC\n:00000001FF\n".write(toFile: path, atomically: true, encoding: .utf8)
        let result = try BleotaProcess.run(["image", "info", path])
        #expect(result.status == 3)
        let name = (path as NSString).lastPathComponent
        #expect(result.stderr == "error: \(name): line 2 (record 00): bad checksum: expected 0xBB, found 0xBC\n")
    }

    @Test func missingFileAndUnknownFormat() throws {
        let missing = try BleotaProcess.run(["image", "info", "nope/none.hex"])
        #expect(missing.status == 3)
        #expect(missing.stderr == "error: nope/none.hex: no such file: check the path\n")
        let unknown = try BleotaProcess.run(["image", "info", "README.md"])
        #expect(unknown.status == 3)
        #expect(unknown.stderr.contains("add --input-format bin, hex or srec"))
        let output = try BleotaProcess.run(["image", "convert", "samples/firmware/blinky.hex", "/tmp/out.weird"])
        #expect(output.status == 2)
        #expect(output.stderr.contains("add --format bin, hex or srec"))
    }

    @Test func everySubcommandHasHelp() throws {
        for command in [["image"], ["image", "info"], ["image", "convert"], ["flash"], ["push"], ["pull"], ["sim"], ["sim", "presets"]] {
            let result = try BleotaProcess.run(command + ["--help"])
            #expect(result.status == 0, "\(command)")
            #expect(result.stdout.contains("USAGE:"), "\(command)")
        }
    }
}

@Suite struct SimCommandTests {
    @Test func presetsJSONListsEveryPresetWithItsCapacity() throws {
        let result = try BleotaProcess.run(["sim", "presets", "--json"])
        #expect(result.status == 0)
        struct Output: Decodable {
            struct Preset: Decodable {
                var name: String
                var capacity: Double
            }
            var presets: [Preset]
            var keys: [String: String]
        }
        let output = try JSONDecoder().decode(Output.self, from: Data(result.stdout.utf8))
        #expect(output.presets.map(\.name) == ["1m-no-dle-30ms", "1m-dle-7.5ms", "2m-dle", "linux-bluez", "slow-flash"])
        // 2m-dle: 8 × 244 bytes per 15 ms event.
        #expect(abs(output.presets[2].capacity - 8 * 244 / 0.015) < 0.01)
        #expect(output.keys["loss"] != nil)
    }
}

@Suite struct TransferCommandTests {
    @Test func flashOnTheSimulatorPrintsAJSONReport() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.hex", "--device", "sim://2m-dle?loss=0.02&seed=3", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        struct Report: Decodable {
            var bytes: Int
            var linkCapacity: Double
            var goodput: Double
            var versionAfter: String
            var stepSeconds: [String: Double]
            var statistics: Statistics
            var compressed: Bool
            struct Statistics: Decodable {
                var packetsSent: Int
                var packetsResent: Int
            }
        }
        let report = try JSONDecoder().decode(Report.self, from: Data(result.stdout.utf8))
        #expect(report.bytes == 13312)
        #expect(report.goodput > 0 && report.goodput <= report.linkCapacity)
        #expect(report.versionAfter.hasPrefix("sha256:06ad61a3f232"))
        #expect(Set(report.stepSeconds.keys) == ["connect", "enter-bootloader", "reconnect", "transfer", "verify", "activate", "confirm"])
        // Compressed by default: blinky's 13 312 bytes deflate to about 11 KiB, fewer packets than 13 312 / 239.
        #expect(report.statistics.packetsSent >= 40)
        #expect(report.compressed)
    }

    /// On a device slower than its link, the report's share is of what the device can write.
    @Test func aSlowDeviceIsMeasuredAgainstWhatItCanWrite() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.hex", "--device", "sim://slow-flash?seed=7"])
        #expect(result.status == 0, "\(result.stderr)")
        let line = try #require(result.stdout.split(separator: "\n").last)
        #expect(line.contains("KiB/s this device can write; the link carries 127.1 KiB/s"), "\(line)")
        let json = try BleotaProcess.run(["flash", "samples/firmware/blinky.hex", "--device", "sim://slow-flash?seed=7", "--json"])
        let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let device = try #require(report["deviceCapacity"] as? Double)
        let link = try #require(report["linkCapacity"] as? Double)
        #expect(device < link / 3)
        // A fast device leaves the link as the measure, and no deviceCapacity.
        let fast = try BleotaProcess.run(["flash", "samples/firmware/blinky.hex", "--device", "sim://2m-dle", "--json"])
        #expect(!fast.stdout.contains("deviceCapacity"))
    }

    /// Compression is on by default where the device inflates and it helps, and off when asked.
    @Test func compressionIsTheDefaultAndCanBeTurnedOff() throws {
        let image = "samples/cortex-m/gcc-arm-none-eabi-12.2.1/sensor-hub-2.0.0.bin"
        let on = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--json"])
        let off = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--json", "--compression", "off"])
        #expect(on.status == 0 && off.status == 0, "\(on.stderr)\(off.stderr)")
        struct Report: Decodable {
            var compressed: Bool
            var streamBytes: Int
            var bytes: Int
        }
        let compressed = try JSONDecoder().decode(Report.self, from: Data(on.stdout.utf8))
        let plain = try JSONDecoder().decode(Report.self, from: Data(off.stdout.utf8))
        #expect(compressed.compressed && compressed.streamBytes < compressed.bytes * 7 / 10)
        #expect(!plain.compressed && plain.streamBytes == plain.bytes)
    }

    @Test func flashWithoutATerminalPrintsOneLinePerStep() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://1m-dle-7.5ms"])
        #expect(result.status == 0)
        #expect(
            result.stderr.split(separator: "\n").map(String.init).filter { $0.hasPrefix("step: ") }
                == ["step: connect", "step: enter-bootloader", "step: reconnect", "step: transfer", "step: verify", "step: activate", "step: confirm"])
        #expect(result.stderr.split(separator: "\n").allSatisfy { $0.hasPrefix("step: ") || $0.hasPrefix("note: ") || $0.hasPrefix("progress: ") })
        // A line at each tenth of the transfer, the last at 100 % with rate and ETA.
        let progress = result.stderr.split(separator: "\n").filter { $0.hasPrefix("progress: transfer [") }
        #expect(progress.count >= 2 && progress.count <= 10, "\(result.stderr)")
        #expect(progress.last?.contains("100%") == true && progress.last?.contains("/s  ETA") == true)
        #expect(result.stdout.hasPrefix("flashed 13.0 KiB to sim://1m-dle-7.5ms"))
    }

    @Test func badInputGetsOneLineAndTheRightExitCode() throws {
        let cases: [([String], Int32, String)] = [
            (["flash", "missing.bin", "--device", "sim://2m-dle"], 3, "error: missing.bin: no such file: check the path\n"),
            (
                ["flash", "samples/firmware/app-v2.bin", "--device", "sim://2m-dle?slot=4096"], 4,
                "error: connect failed: the image is 49152 bytes but the device's slot holds 4096: nothing was sent; build a smaller image; the device still runs its old image (1.0.0)\n"
            ),
            (
                ["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--packet-size", "400"], 2,
                // Refused on connecting, before the device is sent to its bootloader.
                "error: connect failed: packet size 400 is out of range for this link and device: use 1…239\n"
            ),
            (["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--window", "0"], 2, ""),
            (["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--delay=-1"], 2, ""),
            (
                ["flash", "samples/firmware/blinky.bin", "--device", "sim://warp-drive"], 2,
                "error: unknown simulator preset 'warp-drive': use one of 1m-no-dle-30ms, 1m-dle-7.5ms, 2m-dle, linux-bluez, slow-flash\n"
            ),
            (["flash", "samples/firmware/blinky.bin", "--device", "tcp://x"], 2, ""),
            (
                ["pull", "nothing.txt", "--device", "sim://2m-dle", "-o", "/tmp/bleota-never-written"], 4,
                "error: transfer failed: the device has no file named 'nothing.txt': check the name\n"
            ),
        ]
        for (arguments, status, message) in cases {
            let result = try BleotaProcess.run(arguments)
            #expect(result.status == status, "\(arguments): \(result.stderr)")
            // Progress lines may come first (one per step); the error is the last line, alone.
            let last = result.stderr.split(separator: "\n").last.map { String($0) + "\n" }
            if !message.isEmpty { #expect(last == message, "\(arguments)") }
            #expect(result.stderr.split(separator: "\n").contains { $0.hasPrefix("error:") || $0.hasPrefix("Error:") }, "\(arguments)")
        }
        #expect(!FileManager.default.fileExists(atPath: "/tmp/bleota-never-written"))
        let window = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--window", "0"])
        #expect(window.stderr.contains("--window 0 is out of range: use 1…250"))
        let delay = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--delay=-1"])
        #expect(delay.stderr.contains("--delay cannot be negative"))
        let scheme = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "tcp://x"])
        #expect(scheme.stderr.contains("is not a device address: use sim://PRESET"))
    }

    @Test func pullWritesTheFileAtomically() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-pull-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let output = directory.appendingPathComponent("hello.txt").path
        let result = try BleotaProcess.run(["pull", "hello.txt", "--device", "sim://2m-dle?loss=0.05&seed=2", "-o", output])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try String(contentsOfFile: output, encoding: .utf8) == "Hello from the bleota simulator.\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["hello.txt"])
        // Into a directory that does not exist: an error, and nothing created.
        let bad = try BleotaProcess.run(["pull", "hello.txt", "--device", "sim://2m-dle", "-o", directory.path + "/no/such/dir/x"])
        #expect(bad.status == 3)
        #expect(bad.stderr.contains("does not exist: create it first"))
    }

    @Test func pushReportsWhatWasStored() throws {
        let result = try BleotaProcess.run(["push", "samples/firmware/blinky.bin", "--device", "sim://1m-no-dle-30ms", "--name", "fw.bin"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasPrefix("pushed 'fw.bin' (13.0 KiB) to sim://1m-no-dle-30ms"))
    }

    @Test func bleAddressOnAMachineWithoutBluetoothSaysWhatIsMissing() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "ble://AA:BB:CC:DD:EE:FF"])
        // This machine's kernel has no Bluetooth: the probe must say so with its own exit code.
        if result.status == 7 {
            #expect(result.stderr.hasPrefix("error: this machine's kernel has no Bluetooth support") || result.stderr.contains("adapter"))
        } else {
            #expect(result.status == 1)
        }
    }
}

/// `image info` of a damaged image in a protocol's own format fails as `flash` does, with flash's
/// exit status and message (issue 48, item 13): it used to print the plain report and exit 0.
@Suite struct DamagedVendorImageInfoTests {
    @Test(arguments: [
        "samples/espressif/esp-app-sample.bin", "samples/suota/da1469x-app-sample.img", "samples/ti-oad/cc26x2-app-sample_oad.bin",
        "samples/silabs/efr32-app-sample.gbl",
    ])
    func aTamperedImageFailsImageInfoAsFlashRefusesIt(_ sample: String) throws {
        var bytes = [UInt8](try Data(contentsOf: BleotaProcess.repositoryRoot.appendingPathComponent(sample)))
        // One bit of the code, well past every header.
        bytes[bytes.count * 2 / 3] ^= 0x10
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tampered-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent((sample as NSString).lastPathComponent).path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let intact = try BleotaProcess.run(["image", "info", sample])
        #expect(intact.status == 0, "\(intact.stderr)")
        let info = try BleotaProcess.run(["image", "info", path])
        let flash = try BleotaProcess.run(["flash", path, "--device", "sim://2m-dle"])
        #expect(flash.status != 0, "\(flash.stderr)")
        #expect(info.status == flash.status, "image info \(info.status), flash \(flash.status): \(info.stderr)")
        let said = { (text: String) in text.split(separator: "\n").first { $0.hasPrefix("error:") }.map(String.init) }
        #expect(said(info.stderr) != nil && said(info.stderr) == said(flash.stderr), "\(info.stderr) / \(flash.stderr)")
        let json = try BleotaProcess.run(["image", "info", path, "--json"])
        let document = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(json.status == flash.status && document?["exitStatus"] as? Int == Int(flash.status), "\(json.stdout)")
    }
}
