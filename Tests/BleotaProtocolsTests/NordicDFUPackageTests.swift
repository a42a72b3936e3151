import BleotaCodec
import BleotaEngine
import BleotaTestSupport
import Crypto
import Foundation
import Testing
import ZIPFoundation

@testable import BleotaProtocols

/// Packages built here with ZIPFoundation as nrfutil lays them out, then
/// read back; hostile ones are refused with one line naming the member.
@Suite struct NordicDFUPackageTests {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-nordic-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// Writes a zip of `members` (name, bytes, compressed or not) and returns its path.
    func zip(_ name: String, _ members: [(String, [UInt8])], compress: Bool = true) throws -> String {
        let url = directory.appendingPathComponent(name)
        let archive = try Archive(url: url, accessMode: .create)
        for (path, bytes) in members {
            let data = Data(bytes)
            try archive.addEntry(
                with: path, type: .file, uncompressedSize: Int64(data.count),
                compressionMethod: compress ? .deflate : .none
            ) { position, size in
                data.subdata(in: Int(position)..<Int(position) + size)
            }
        }
        return url.path
    }

    static func manifest(_ parts: [String: [String: Any]], legacy: Bool = false) throws -> [UInt8] {
        var manifest: [String: Any] = parts
        if legacy { manifest["dfu_version"] = 0.5 }
        return [UInt8](try JSONSerialization.data(withJSONObject: ["manifest": manifest], options: [.sortedKeys]))
    }

    static let application = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 13) }

    static func initPacket(for image: [UInt8], type: NordicInitPacket.FirmwareType = .application) -> [UInt8] {
        NordicInitPacket(
            firmwareVersion: 1, hardwareVersion: 52, softDeviceRequirements: [0x0100], type: type,
            applicationSize: UInt32(image.count), hash: SHA256Digest.hash(image)
        ).encode()
    }

    @Test func aSecurePackageReadsItsPartsInSendingOrder() throws {
        let sdbl = [UInt8](repeating: 0x5A, count: 3000)
        let path = try zip(
            "full.zip",
            [
                (
                    "manifest.json",
                    try Self.manifest([
                        "application": ["bin_file": "app.bin", "dat_file": "app.dat"],
                        "softdevice_bootloader": [
                            "bin_file": "sd_bl.bin", "dat_file": "sd_bl.dat",
                            "info_read_only_metadata": ["bl_size": 1000, "sd_size": 2000],
                        ],
                    ])
                ),
                ("app.bin", Self.application), ("app.dat", Self.initPacket(for: Self.application)),
                ("sd_bl.bin", sdbl), ("sd_bl.dat", Self.initPacket(for: sdbl, type: .softDeviceAndBootloader)),
            ])
        let package = try NordicDFUPackage(contentsOf: path)
        #expect(package.flavour == .secure)
        #expect(package.parts.map(\.kind) == [.softDeviceBootloader, .application])
        #expect(package.parts[0].softDeviceSize == 2000 && package.parts[0].bootloaderSize == 1000)
        #expect(package.parts[1].image == Self.application)
        #expect(package.parts[1].initPacket?.hashMatches(Self.application) == true)
        #expect(package.parts[0].initPacket?.type == .softDeviceAndBootloader)
    }

    @Test func aLegacyPackageKeepsItsInitPacketAsStored() throws {
        let legacyInit: [UInt8] = [0x52, 0x00, 0xFF, 0xFF, 0x01, 0, 0, 0, 1, 0, 0xFE, 0xFF, 0x34, 0x12]
        let path = try zip(
            "legacy.zip",
            [
                ("manifest.json", try Self.manifest(["application": ["bin_file": "a.bin", "dat_file": "a.dat"]], legacy: true)),
                ("a.bin", Self.application), ("a.dat", legacyInit),
            ])
        let package = try NordicDFUPackage(contentsOf: path)
        #expect(package.flavour == .legacy(dfuVersion: 0.5))
        #expect(package.parts.count == 1 && package.parts[0].initPacket == nil && package.parts[0].initPacketBytes == legacyInit)
    }

    /// `flash` refuses before connecting, and `image info` reports, a package
    /// whose image no longer matches its init packet's hash; a .bin with its
    /// .dat beside it is read like a package.
    @Test func aChangedImageIsRefusedByPrepareAndReportedByDescribe() throws {
        var changed = Self.application
        changed[4000] ^= 0x04
        let path = try zip(
            "changed.zip",
            [
                ("manifest.json", try Self.manifest(["application": ["bin_file": "app.bin", "dat_file": "app.dat"]])),
                ("app.bin", changed), ("app.dat", Self.initPacket(for: Self.application)),
            ])
        let nordic = NordicSecureDFUProtocol()
        #expect(nordic.imageAffinity(ImageFiles.probe(path)) == .owns)
        do {
            _ = try nordic.prepareImage(ImageRequest(path: path))
            Issue.record("a changed image was accepted")
        } catch {
            #expect(error.code == .verificationFailed && error.step == .load)
            #expect(error.message == "\(path): the application does not match the hash in its init packet: the image was changed or damaged; regenerate the package")
        }
        let description = try #require(try nordic.describeImage(ImageRequest(path: path)))
        #expect(description.parts.map(\.hashMatches) == [false])
        #expect(description.problem != nil)

        let bin = directory.appendingPathComponent("app.bin")
        try Data(Self.application).write(to: bin)
        try Data(Self.initPacket(for: Self.application)).write(to: directory.appendingPathComponent("app.dat"))
        #expect(nordic.imageAffinity(ImageFiles.probe(bin.path)) == .owns)
        let prepared = try nordic.prepareImage(ImageRequest(path: bin.path))
        #expect(prepared.parts.map(\.data) == [Self.application] && prepared.version == "1")
    }

    /// adafruit-nrfutil writes a SoftDevice+bootloader image's sizes on the part itself, nrfutil under info_read_only_metadata.
    @Test func aLegacySoftDeviceAndBootloaderPartKeepsItsSizes() throws {
        let path = try zip(
            "legacy-sdbl.zip",
            [
                (
                    "manifest.json",
                    try Self.manifest(
                        [
                            "softdevice_bootloader": [
                                "bin_file": "sd_bl.bin", "dat_file": "sd_bl.dat",
                                "sd_size": 3000, "bl_size": 1000,
                            ]
                        ], legacy: true)
                ),
                ("sd_bl.bin", [UInt8](repeating: 7, count: 4000)),
                ("sd_bl.dat", NordicLegacyInitPacket(deviceRevision: 0xADAF, imageCRC: NordicLegacyInitPacket.crc(of: [UInt8](repeating: 7, count: 4000))).encode()),
            ])
        let package = try NordicDFUPackage(contentsOf: path)
        #expect(package.parts[0].softDeviceSize == 3000 && package.parts[0].bootloaderSize == 1000)
        let prepared = try NordicLegacyDFUProtocol().prepareImage(ImageRequest(path: path))
        #expect(prepared.parts[0].attributes["softdevice-size"] == 3000)
    }

    @Test func hostilePackagesAreRefusedWithOneLine() throws {
        let good = try Self.manifest(["application": ["bin_file": "app.bin", "dat_file": "app.dat"]])
        let cases: [(String, [(String, [UInt8])], String)] = [
            (
                "climb.zip", [("manifest.json", good), ("../app.bin", Self.application), ("app.dat", [])],
                "member '../app.bin' names a path outside the package (absolute or with ..): refusing it"
            ),
            ("absolute.zip", [("/etc/passwd", [1])], "member '/etc/passwd' names a path outside the package (absolute or with ..): refusing it"),
            (
                "missing.zip", [("manifest.json", good), ("app.bin", Self.application)],
                "the manifest names 'app.dat' but the archive has no such member: regenerate the package"
            ),
            (
                "traversal-in-manifest.zip", [("manifest.json", try Self.manifest(["application": ["bin_file": "../../x.bin", "dat_file": "a.dat"]]))],
                "the manifest names '../../x.bin', a path outside the package: refusing it"
            ),
            (
                "bomb.zip", [("manifest.json", good), ("app.bin", [UInt8](repeating: 0, count: NordicDFUPackage.maximumMemberSize + 1)), ("app.dat", [])],
                "member 'app.bin' unpacks to 16777217 bytes, more than 16777216: not a firmware image"
            ),
            ("notjson.zip", [("manifest.json", Array("{nope".utf8))], "manifest.json is not valid JSON: regenerate the package"),
            (
                "empty-manifest.zip", [("manifest.json", try Self.manifest([:]))],
                "manifest.json names no application, bootloader or SoftDevice: nothing to flash"
            ),
            (
                "bad-dat.zip", [("manifest.json", good), ("app.bin", Self.application), ("app.dat", [0x0A, 0x40])],
                "app.dat: init packet field 1 at offset 1: input ends 64 bytes too early: regenerate the package with nrfutil pkg generate"
            ),
        ]
        for (name, members, problem) in cases {
            let path = try zip(name, members)
            #expect(throws: NordicPackageError(path, problem), "\(name)") { try NordicDFUPackage(contentsOf: path) }
        }
        // A zip without a manifest is some other archive, and is called that.
        let manifestless = try zip("manifestless.zip", [("app.bin", Self.application)])
        #expect(throws: NordicPackageError(message: "\(manifestless) \(NordicDFUPackage.notAPackage)")) { try NordicDFUPackage(contentsOf: manifestless) }
        let text = directory.appendingPathComponent("text.zip")
        try Data("not a zip".utf8).write(to: text)
        #expect {
            try NordicDFUPackage(contentsOf: text.path)
        } throws: { error in
            "\(error)".hasPrefix("\(text.path): is not a readable zip archive") && !"\(error)".contains("\n")
        }
        #expect(throws: NordicPackageError(message: "/nonexistent.zip: no such file: check the path")) {
            try NordicDFUPackage(contentsOf: "/nonexistent.zip")
        }
    }
}
