import Foundation
import Testing

@testable import BleotaCommands

/// The Cortex-M sample firmware (samples/cortex-m, built by scripts/make-firmware.sh
/// with gcc-arm-none-eabi 12.2.1 and signed by imgtool 2.5.0), checked against what
/// the build recorded with Python's own zlib and hashlib, and flashed on the simulator.
@Suite struct SampleFirmwareTests {
    static let directory = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"

    struct Recorded: Decodable {
        struct Image: Decodable {
            var size: Int
            var crc32: String
            var sha256: String
            var deflated: Int
        }
        var images: [String: Image]
    }

    static func recorded() throws -> Recorded {
        let url = BleotaProcess.repositoryRoot.appendingPathComponent("\(directory)/checksums.json")
        return try JSONDecoder().decode(Recorded.self, from: Data(contentsOf: url))
    }

    @Test func theHexFlattensToTheBinAndBothAreRealSizedFirmware() throws {
        let recorded = try Self.recorded()
        let bin = try #require(recorded.images["sensor-hub-2.0.0.bin"])
        #expect((100 * 1024...300 * 1024).contains(bin.size), "a 100–300 KiB image")
        // Real code and data compress, but far from to nothing (random bytes would not compress at all).
        let ratio = Double(bin.deflated) / Double(bin.size)
        #expect(ratio > 0.4 && ratio < 0.85, "deflate ratio \(ratio)")
        for file in ["sensor-hub-2.0.0.hex", "sensor-hub-2.0.0.bin"] {
            let result = try BleotaProcess.run(["image", "info", "\(Self.directory)/\(file)", "--json"])
            #expect(result.status == 0, "\(result.stderr)")
            let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(result.stdout.utf8))
            #expect(report.sha256 == bin.sha256 && report.crc32 == bin.crc32 && report.size == bin.size, "\(file)")
        }
    }

    @Test func theSignedMCUbootImageVerifiesWithItsKeyAndFlashesOverSMP() throws {
        let signed = "\(Self.directory)/sensor-hub-2.0.0-mcuboot-ecdsa-p256.bin"
        let info = try BleotaProcess.run(["image", "info", signed, "--key", "\(Self.directory)/ecdsa-p256.pub.pem"])
        #expect(info.status == 0, "\(info.stderr)")
        let flash = try BleotaProcess.run(["flash", signed, "--device", "sim://2m-dle?protocol=smp", "--json"])
        #expect(flash.status == 0, "\(flash.stderr)")
        #expect(flash.stdout.contains("\"versionAfter\" : \"2.0.0\""))
        let other = try BleotaProcess.run(["image", "info", signed, "--key", "samples/mcuboot/imgtool-2.5.0/other-ecdsa-p256.pub.pem"])
        #expect(other.status == 5, "a foreign key does not verify it")
    }
}
