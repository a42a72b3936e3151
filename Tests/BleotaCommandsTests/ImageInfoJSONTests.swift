import BleotaCodec
import BleotaProtocols
import Crypto
import Foundation
import Testing

@testable import BleotaCommands

/// `image info` as a new user meets it with third-party tools' files: one JSON
/// document whatever happens, typed fields, and the image asked about described.
@Suite struct ImageInfoJSONTests {
    static let fixtures = "Tests/BleotaProtocolsTests/Fixtures/nordic"

    /// Unzips a package's parts (as a user would) into a scratch directory.
    static func unpacked(_ package: String) throws -> (directory: String, part: NordicDFUPackage.Part) {
        let parsed = try NordicDFUPackage(contentsOf: BleotaProcess.repositoryRoot.appendingPathComponent(package).path)
        let part = try #require(parsed.parts.last)
        let directory = try scratchDirectory()
        try Data(part.image).write(to: URL(fileURLWithPath: directory + "/" + part.imageName))
        try Data(part.initPacketBytes).write(to: URL(fileURLWithPath: directory + "/" + part.initPacketName))
        return (directory, part)
    }

    @Test func aBinBesideALegacyInitPacketIsDescribedAsTheImageItIs() throws {
        // adafruit-nrfutil's package unzips to nordic-app.bin + nordic-app.dat, the .dat a legacy
        // init packet: it was read as a Secure DFU init packet and refused with exit 3.
        let (directory, part) = try Self.unpacked("\(Self.fixtures)/adafruit-nrfutil-0.5.3.post16-app.zip")
        let result = try BleotaProcess.run(["image", "info", directory + "/" + part.imageName, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(result.stdout.utf8))
        #expect(report.size == part.image.count)
        #expect(report.sha256 == SHA256Digest.hash(part.image).hexString)
        #expect(report.crc32 == hex32(CRC32.checksum(part.image)))
    }

    @Test func aBinBesideAnNrfutilInitPacketGetsItsOwnSizeAndChecksumsAsTypedFields() throws {
        let (directory, part) = try Self.unpacked("\(Self.fixtures)/nrfutil-6.1.7-app-unsigned.zip")
        let result = try BleotaProcess.run(["image", "info", directory + "/" + part.imageName, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(json["protocol"] as? String == "nordic-dfu")
        let described = try #require((json["parts"] as? [[String: Any]])?.first)
        #expect(described["image"] as? String == part.imageName)
        #expect(described["imageSize"] as? Int == part.image.count)
        #expect(described["initPacketSize"] as? Int == part.initPacketBytes.count)
        #expect(described["sha256"] as? String == SHA256Digest.hash(part.image).hexString)
        #expect(described["crc32"] as? String == hex32(CRC32.checksum(part.image)))
        // Numbers are numbers, lists are lists, flags are flags: no "5000 bytes" strings to parse.
        #expect(described["firmwareVersion"] as? Int == part.initPacket?.firmwareVersion.map(Int.init))
        #expect(described["sdReq"] as? [Int] == part.initPacket?.softDeviceRequirements.map(Int.init))
        #expect(described["signed"] as? Bool == false)
        #expect(described["hashMatches"] as? Bool == true)
        #expect(json["exitStatus"] == nil && json["error"] == nil)
    }

    /// One JSON document on stdout even when verification fails (exit 5): the error is in it.
    @Test func aFailedVerificationPrintsOneDocumentCarryingTheError() throws {
        let directory = try scratchDirectory()
        // An MCUboot image signed with one key, checked against another.
        let image = directory + "/signed.bin"
        try Data(try PrivateKeyCLITests.signedImage([1, 2, 3], key: P256.Signing.PrivateKey())).write(to: URL(fileURLWithPath: image))
        let other = directory + "/other.pem"
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: other, atomically: true, encoding: .utf8)
        // A Secure DFU package whose image does not match the hash in its init packet.
        let (packageDirectory, part) = try Self.unpacked("\(Self.fixtures)/nrfutil-6.1.7-app-unsigned.zip")
        var damaged = part.image
        damaged[100] ^= 0xFF
        try Data(damaged).write(to: URL(fileURLWithPath: packageDirectory + "/" + part.imageName))

        for arguments in [
            ["image", "info", image, "--key", other, "--json"],
            ["image", "info", packageDirectory + "/" + part.imageName, "--json"],
        ] {
            let result = try BleotaProcess.run(arguments)
            #expect(result.status == 5, "\(arguments): \(result.stderr)")
            // The whole of stdout is one JSON value (JSONSerialization rejects two).
            let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
            #expect(json["exitStatus"] as? Int == 5)
            let error = try #require(json["error"] as? String)
            #expect(result.stderr == "error: \(error)\n")
        }
    }
}
