import Foundation
import Testing

@testable import BleotaCommands

/// The Nordic protocols through the command line: packages described and
/// checked by `image info`, refused by `flash` before anything connects, and
/// flashed and tuned on the simulator.
@Suite struct NordicCLITests {
    static let fixtures = "Tests/BleotaProtocolsTests/Fixtures/nordic"

    @Test func imageInfoDescribesAPackageAndVerifiesItsSignature() throws {
        let result = try BleotaProcess.run([
            "image", "info", "\(Self.fixtures)/nrfutil-6.1.7-sd-bl-app-signed.zip",
            "--key", "\(Self.fixtures)/nrfutil-6.1.7-test-key-public.pem", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(json["protocol"] as? String == "nordic-dfu")
        let parts = try #require(json["parts"] as? [[String: Any]])
        #expect(parts.map { $0["name"] as? String } == ["SoftDevice and bootloader", "application"])
        #expect(parts.allSatisfy { $0["hashMatches"] as? Bool == true && $0["signatureVerified"] as? Bool == true })
    }

    @Test func aPackageSignedWithAnotherKeyIsRefusedBeforeConnecting() throws {
        // A device that would refuse every connection (power lost at its first byte): a refusal after connecting would say so.
        let other = "samples/mcuboot/imgtool-2.5.0/other-ecdsa-p256.pub.pem"
        let result = try BleotaProcess.run([
            "flash", "\(Self.fixtures)/nrfutil-6.1.7-app-signed.zip", "--key", other,
            "--device", "sim://2m-dle?protocol=nordic-dfu&power-loss-at=0",
        ])
        #expect(result.status == 5, "\(result.stderr)")
        #expect(result.stderr.contains("the application's signature does not verify with \(other): it was signed with another key"))
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    @Test func flashAndTuneOnTheSimulator() throws {
        let flash = try BleotaProcess.run([
            "flash", "\(Self.fixtures)/adafruit-nrfutil-0.5.3.post16-app.zip",
            "--device", "sim://2m-dle?protocol=nordic-legacy", "--json",
        ])
        #expect(flash.status == 0, "\(flash.stderr)")
        #expect(flash.stdout.contains("\"versionAfter\" : \"2\"") && flash.stdout.contains("\"protocolName\" : \"nordic-legacy\""))
        let untuned = try BleotaProcess.run(["tune", "--device", "sim://2m-dle?protocol=nordic-dfu", "--no-saved-tuning"])
        #expect(untuned.status == 2)
        #expect(untuned.stderr.contains("Nordic Secure DFU devices take only real images: give the package to measure with, --image FILE"))
        let tuned = try BleotaProcess.run([
            "tune", "--device", "sim://slow-flash?protocol=nordic-dfu", "--no-saved-tuning", "--json",
            "--image", "\(Self.fixtures)/nrfutil-6.1.7-app-unsigned.zip",
        ])
        #expect(tuned.status == 0, "\(tuned.stderr)")
        #expect(tuned.stdout.contains("\"chosen\""))
    }

    /// Protocol-specific options given wrong: one line, exit 2, what to write instead.
    @Test(arguments: [
        (
            ["sim", "serve", "--protocol", "nordic-dfu", "--serial", "--device-option", "nordic-hw"],
            "error: --device-option 'nordic-hw' is not KEY=VALUE: write e.g. --device-option nordic-hw=52"
        ),
        (
            ["sim", "serve", "--protocol", "nordic-dfu", "--serial", "--device-option", "colour=red"],
            "error: --device-option colour is not a key Nordic Secure DFU's device takes: use one of nordic-hw, nordic-sd, nordic-key, nordic-bootloader, nordic-buttonless, nordic-start, nordic-save-progress, nordic-serial-mtu"
        ),
        (
            // sim serve's own default swap time is left out for a device without one; a given one is refused.
            ["sim", "serve", "--protocol", "nordic-dfu", "--serial", "--swap-time", "5ms"],
            "error: --swap-time has no meaning for Nordic Secure DFU's device: drop it"
        ),
        (
            ["sim", "serve", "--protocol", "nordic-dfu", "--serial", "--device-option", "nordic-sd=0x10000"],
            "error: --device-option nordic-sd '0x10000' is not a number of 16 bits: use a decimal or 0x-prefixed value"
        ),
        (
            [
                "flash", "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip", "--device", "sim://2m-dle?protocol=nordic-dfu",
                "--protocol-option", "name=Dfu",
            ],
            "error: --protocol-option name is not a key Nordic Secure DFU takes: use one of bootloader-name"
        ),
        (
            ["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--protocol-option", "bootloader-name=X"],
            "error: --protocol-option bootloader-name is not a key bleota's native protocol takes: it takes none"
        ),
        (
            ["tune", "--device", "sim://2m-dle", "--no-saved-tuning", "--image", "samples/firmware/blinky.bin"],
            "error: --image: bleota's native protocol measures with test bytes the device discards: drop --image"
        ),
    ])
    func protocolOptionsGivenWrongAreOneLineUsageErrors(_ arguments: [String], _ message: String) throws {
        let result = try BleotaProcess.run(arguments)
        #expect(result.status == 2, "\(arguments): \(result.stderr)")
        #expect(result.stderr.trimmingCharacters(in: .newlines) == message)
    }
}

/// A bootloader that refuses a package by its policy (its hw_version, its sd_req) refused it: exit 4,
/// "device refused", not 5, "verification failed" (issue 48, item 17).
@Suite struct NordicPolicyRefusalCLITests {
    @Test(arguments: [
        ("nordic-hw=53", "the package's hw_version does not match this device"),
        ("nordic-sd=0x00B6", "the device's SoftDevice is not in the package's sd_req"),
    ])
    func aPackageTheBootloaderRefusesByPolicyExits4(_ key: String, message: String) throws {
        let flash = try BleotaProcess.run([
            "flash", "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip", "--device", "sim://2m-dle?protocol=nordic-dfu&\(key)",
        ])
        #expect(flash.status == 4, "\(flash.stderr)")
        #expect(flash.stderr.contains(message), "\(flash.stderr)")
    }
}
