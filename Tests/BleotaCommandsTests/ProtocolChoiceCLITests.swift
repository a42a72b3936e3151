import BleotaCodec
import BleotaProtocols
import Foundation
import Testing

/// The image decides the protocol wherever the address does not: on a plain `sim://PRESET` the
/// simulated device then runs the protocol the image is made for. When the address or
/// `--protocol` names another, the refusal names both, before anything connects.
@Suite struct ProtocolChoiceCLITests {
    static func report(_ run: BleotaProcess) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout)\(run.stderr)")
    }

    @Test(
        arguments: [
            ("samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "smp", "1.1.0"),
            ("Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip", "nordic-dfu", nil),
            ("Tests/BleotaProtocolsTests/Fixtures/nordic/adafruit-nrfutil-0.5.3.post16-app.zip", "nordic-legacy", nil),
            ("samples/espressif/esp-app-sample.bin", "espressif-ota", nil),
            ("samples/suota/da1469x-app-sample-v3.img", "suota", nil),
            ("samples/ti-oad/cc26x2-app-sample_oad.bin", "ti-oad", nil),
            ("samples/silabs/efr32-app-sample.gbl", "silabs-ota", nil),
            ("samples/firmware/blinky.bin", "native", nil),
        ] as [(String, String, String?)])
    func thePlainSimulatedAddressRunsTheImagesProtocol(image: String, protocolName: String, version: String?) throws {
        let run = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--json", "--no-saved-tuning", "--verbose"])
        #expect(run.status == 0, "\(run.stderr)")
        let report = try Self.report(run)
        #expect(report["protocolName"] as? String == protocolName)
        if let version { #expect(report["versionAfter"] as? String == version) }
        if protocolName != "native" { #expect(run.stderr.contains("(from the image)"), "\(run.stderr)") }
    }

    /// A key only one protocol's device takes names that protocol.
    @Test func aKeyOfOneProtocolsDeviceNamesIt() throws {
        let run = try BleotaProcess.run([
            "flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle?swap-time=100", "--json",
        ])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Self.report(run)["protocolName"] as? String == "smp")
    }

    @Test(
        arguments: [
            (
                ["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle?protocol=nordic-dfu"],
                "error: samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin is made for SMP (MCUmgr), but sim://2m-dle?protocol=nordic-dfu is to speak Nordic Secure DFU: remove protocol=nordic-dfu from the address to flash it with smp, or give an image made for nordic-dfu"
            ),
            (
                ["flash", "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip", "--device", "sim://2m-dle", "--protocol", "smp"],
                "error: Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip is made for Nordic Secure DFU, but sim://2m-dle is to speak SMP (MCUmgr): leave out --protocol smp to flash it with nordic-dfu, or give an image made for smp"
            ),
        ] as [([String], String)])
    func anAddressOrOptionThatDisagreesWithTheImageNamesBoth(arguments: [String], message: String) throws {
        let run = try BleotaProcess.run(arguments)
        #expect(run.status == 2)
        #expect(run.stderr == message + "\n")
        #expect(!run.stderr.contains("step:"), "refused before connecting")
    }

    /// A serial port that is not there is what the user must fix, whatever the image.
    @Test(arguments: ["samples/firmware/blinky.bin", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin"])
    func aMissingSerialPortIsNamed(image: String) throws {
        let run = try BleotaProcess.run(["flash", image, "--device", "serial:///dev/ttyNOPE"])
        #expect(run.status == 6)
        #expect(
            run.stderr
                == "error: serial:///dev/ttyNOPE: there is no serial port /dev/ttyNOPE: check the device is plugged in and the path (ls /dev/ttyACM* /dev/ttyUSB*)\n")
    }

    /// Nothing answers on that port: the first SMP request is tried only as long as
    /// `--connect-timeout` allows (one try of half a second here, where it was 30 tries of 2 s).
    @Test func theConnectTimeoutBoundsSMPsFirstRequest() throws {
        let run = try BleotaProcess.run([
            "flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "udp://127.0.0.1:1", "--connect-timeout", "0.5",
        ])
        #expect(run.status != 0)
        #expect(run.stderr.contains("the MCUmgr parameters request after 1 try"), "\(run.stderr)")
    }

    /// A plain image and Nordic's protocol: the message names the file bleota looked for as one
    /// it looked for, not as if the user had named it.
    @Test func aNordicImageWithoutItsInitPacketSaysWhatWasLookedFor() throws {
        let run = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle?protocol=nordic-dfu"])
        #expect(run.status == 3)
        #expect(
            run.stderr
                == "error: no init packet for samples/firmware/blinky.bin: a Nordic Secure DFU image needs its nrfutil package (.zip), or its .dat beside it (looked for samples/firmware/blinky.dat)\n"
        )
    }
}

/// A .zip that is not a Nordic package gets one message, the same from every command that reads it.
@Suite struct NotAPackageCLITests {
    static let zip = "Tests/BleotaCodecTests/Fixtures/not-a-dfu-package.zip"
    static let message =
        "error: \(zip) is a .zip without manifest.json, so not a Nordic DFU package: give the package nrfutil or adafruit-nrfutil made, or the image itself (.bin, .hex)\n"

    @Test(
        arguments: [
            ["flash", zip, "--device", "sim://2m-dle"],
            ["flash", zip, "--device", "sim://2m-dle?protocol=nordic-dfu"],
            ["image", "info", zip],
            ["image", "convert", zip, "/tmp/bleota-never-written.bin"],
        ])
    func everyCommandSaysTheSame(arguments: [String]) throws {
        let run = try BleotaProcess.run(arguments)
        #expect(run.status == 3)
        #expect(run.stderr == Self.message)
        #expect(!FileManager.default.fileExists(atPath: "/tmp/bleota-never-written.bin"))
    }

    @Test func aRealPackageIsNotConvertedAsOneImage() throws {
        let package = "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip"
        let run = try BleotaProcess.run(["image", "convert", package, "/tmp/bleota-never-written.bin"])
        #expect(run.status == 3)
        #expect(
            run.stderr
                == "error: \(package) is a Nordic Secure DFU package, not one image: bleota image info shows its parts, and bleota flash takes it whole\n")
    }
}

/// A `.dat` beside a plain image is Nordic's init packet only when it is one for that image, or
/// when Nordic's protocol is what the device speaks: a data file that merely shares the image's
/// name took the image over (`flash blinky.bin` failed "blinky.dat is not a Secure DFU init
/// packet", exit 3), though the user never named it.
@Suite struct StrayInitPacketCLITests {
    /// A scratch directory holding blinky.bin and, beside it, blinky.dat with `dat`.
    static func imageBeside(_ dat: [UInt8]) throws -> (image: String, dat: String) {
        let directory = try scratchDirectory()
        let image = directory + "/blinky.bin"
        try FileManager.default.copyItem(atPath: BleotaProcess.repositoryRoot.appendingPathComponent("samples/firmware/blinky.bin").path, toPath: image)
        try Data(dat).write(to: URL(fileURLWithPath: directory + "/blinky.dat"))
        return (image, directory + "/blinky.dat")
    }

    /// What each stray `.dat` is said to be, after "it is".
    static func strays() throws -> [(name: String, bytes: [UInt8], what: String)] {
        let blinky = try #require(FileManager.default.contents(atPath: BleotaProcess.repositoryRoot.appendingPathComponent("samples/firmware/blinky.bin").path))
        let other = try NordicDFUPackage(
            contentsOf: BleotaProcess.repositoryRoot.appendingPathComponent("\(ImageInfoJSONTests.fixtures)/nrfutil-6.1.7-app-unsigned.zip").path)
        let part = try #require(other.parts.last)
        return [
            ("a data file", Array("time,temperature\n0,21.5\n1,21.6\n".utf8), "not a Secure DFU init packet (--protocol nordic-dfu would read it)"),
            ("100 000 bytes", [UInt8](repeating: 0x5A, count: 100_000), "more than 4096 bytes, larger than any init packet (--protocol nordic-dfu would read it)"),
            (
                "another image's init packet", part.initPacketBytes,
                "the init packet of an image of \(part.image.count) bytes, not of this one (\(blinky.count) bytes) (--protocol nordic-dfu would read it)"
            ),
        ]
    }

    @Test func flashAndImageInfoLeaveAStrayDatUnreadAndSaySo() throws {
        for stray in try Self.strays() {
            let (image, dat) = try Self.imageBeside(stray.bytes)
            let note = "\(dat) beside \(image) is not read: it is \(stray.what)"
            let flash = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--json", "--no-saved-tuning", "--verbose"])
            #expect(flash.status == 0, "\(stray.name): \(flash.stderr)")
            #expect(try ProtocolChoiceCLITests.report(flash)["protocolName"] as? String == "native", "\(stray.name)")
            #expect(flash.stderr.contains(note), "\(stray.name): \(flash.stderr)")
            // Said at info level: a run without -v prints nothing about it.
            let quiet = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--no-saved-tuning"])
            #expect(quiet.status == 0 && !quiet.stderr.contains("is not read"), "\(stray.name): \(quiet.stderr)")

            let info = try BleotaProcess.run(["image", "info", image, "--json", "--log-level", "info"])
            #expect(info.status == 0, "\(stray.name): \(info.stderr)")
            let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(info.stdout.utf8))
            let blinky = try #require(FileManager.default.contents(atPath: image))
            #expect(report.sha256 == SHA256Digest.hash(Array(blinky)).hexString && report.size == blinky.count, "\(stray.name)")
            #expect(info.stderr.contains(note), "\(stray.name): \(info.stderr)")
        }
    }

    /// Named, or from the address, Nordic's protocol reads the `.dat` and says what is wrong with it.
    @Test func theDatIsReadWhenTheProtocolIsNordics() throws {
        let (image, dat) = try Self.imageBeside(Array("time,temperature\n0,21.5\n".utf8))
        for arguments in [
            ["flash", image, "--device", "sim://2m-dle", "--protocol", "nordic-dfu"],
            ["flash", image, "--device", "sim://2m-dle?protocol=nordic-dfu"],
        ] {
            let run = try BleotaProcess.run(arguments)
            #expect(run.status == 3, "\(arguments): \(run.stderr)")
            #expect(run.stderr.hasPrefix("error: \(dat) is not a Secure DFU init packet ("), "\(run.stderr)")
            #expect(run.stderr.hasSuffix("): give the .dat nrfutil made for this image\n") && run.stderr.split(separator: "\n").count == 1, "\(run.stderr)")
        }
        let (big, bigDat) = try Self.imageBeside([UInt8](repeating: 0x5A, count: 100_000))
        let run = try BleotaProcess.run(["flash", big, "--device", "sim://2m-dle?protocol=nordic-dfu"])
        #expect(run.status == 3)
        #expect(run.stderr == "error: \(bigDat) is 100000 bytes, more than the limit of 4096 bytes\n", "\(run.stderr)")
    }
}

/// Small things a new user met (issue 48, items 11, 12, 14, 16).
@Suite struct FirstContactMessageTests {
    @Test func aWrongLogLevelListsTheLevels() throws {
        let run = try BleotaProcess.run(["flash", "x.bin", "--device", "sim://2m-dle", "--log-level", "bogus"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("Please provide one of the following: 'trace', 'debug', 'info', 'notice', 'warning', 'error', 'critical'"), "\(run.stderr)")
    }

    @Test func deltaCreateShowsItsDefaultCompressionByName() throws {
        let help = try BleotaProcess.run(["delta", "create", "--help"])
        #expect(help.stdout.contains("default: heatshrink"), "\(help.stdout)")
        #expect(!help.stdout.contains("default: 4"))
    }

    @Test func aProtocolThatDisagreesWithTheAddressIsAUsageError() throws {
        let run = try BleotaProcess.run([
            "flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--protocol", "smp", "--device", "sim://2m-dle?protocol=suota",
        ])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(
            run.stderr.contains(
                "error: --protocol smp disagrees with sim://2m-dle?protocol=suota, whose device speaks suota: drop --protocol, or protocol=suota from the address"),
            "\(run.stderr)")
    }

    @Test func theVersionIsThisRelease() throws {
        let run = try BleotaProcess.run(["--version"])
        #expect(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0.2.0")
    }
}

/// Every time takes a unit, these two included (issue 48, item 17).
@Suite struct TimeUnitOptionTests {
    @Test(arguments: [
        (["bond", "pair", "--device", "ble://AA:BB:CC:DD:EE:FF", "--discovery-seconds", "0.05s"], "--discovery-seconds 0.05s is out of range"),
        (["fleet", "flash", "samples/firmware/blinky.bin", "--scan-name", "x", "--scan-seconds", "500ms"], "--scan-seconds 500ms is out of range"),
    ])
    func aTimeWithAUnitIsReadAndCheckedAgainstTheRange(arguments: [String], message: String) throws {
        let run = try BleotaProcess.run(arguments)
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains(message), "\(run.stderr)")
    }

    @Test func aUnitWithinTheRangeIsTaken() throws {
        // 2s is within 1…120: the scan starts (and, with no Bluetooth here, says what is missing).
        let run = try BleotaProcess.run(["fleet", "flash", "samples/firmware/blinky.bin", "--scan-name", "x", "--scan-seconds", "2s"])
        #expect(run.status != 2, "\(run.stderr)")
        #expect(!run.stderr.contains("--scan-seconds"), "\(run.stderr)")
    }
}

/// `-v --log-level error` logs errors only: what the user wrote wins over the shorthand (issue 48, item 17).
@Suite struct LogLevelTests {
    @Test func anExplicitLevelWinsOverVerbose() throws {
        let quiet = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "-v", "--log-level", "error"])
        #expect(quiet.status == 0, "\(quiet.stderr)")
        #expect(!quiet.stderr.contains(" info "), "\(quiet.stderr)")
        let verbose = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "-v"])
        #expect(verbose.stderr.contains(" info "), "\(verbose.stderr)")
    }
}
