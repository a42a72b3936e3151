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
