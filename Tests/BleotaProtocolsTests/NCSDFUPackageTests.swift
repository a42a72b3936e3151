import BleotaCodec
import BleotaEngine
import Foundation
import Testing
import ZIPFoundation

@testable import BleotaProtocols

/// nRF Connect SDK's `dfu_application.zip`: the packages scripts/ncs-fixtures.py made with
/// generate_zip.py's schema, and hostile or mismatched ones built here, each refused in one line.
@Suite struct NCSDFUPackageTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let samples = root.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs")
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-ncs-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func zip(_ name: String, _ members: [(String, [UInt8])]) throws -> String {
        let url = directory.appendingPathComponent(name)
        let archive = try Archive(url: url, accessMode: .create)
        for (path, bytes) in members {
            let data = Data(bytes)
            try archive.addEntry(with: path, type: .file, uncompressedSize: Int64(data.count), compressionMethod: .deflate) { position, size in
                data.subdata(in: Int(position)..<Int(position) + size)
            }
        }
        return url.path
    }

    static func manifest(_ files: [[String: Any]], formatVersion: Int = 1) throws -> [UInt8] {
        [UInt8](try JSONSerialization.data(withJSONObject: ["format-version": formatVersion, "time": 1, "files": files], options: [.sortedKeys]))
    }

    static func sample(_ name: String) throws -> [UInt8] { try [UInt8](Data(contentsOf: samples.appendingPathComponent(name))) }

    static func head(_ path: String) -> [UInt8] { ImageFiles.probe(path).head }

    @Test(arguments: ["nrf5340-sysbuild-dfu_application.zip", "nrf5340-before-sysbuild-dfu_application.zip"])
    func aTwoCorePackageListsTheApplicationAndTheNetworkCore(name: String) throws {
        let path = Self.samples.appendingPathComponent(name).path
        #expect(NCSDFUPackage.isPackage(at: path, head: Self.head(path)))
        let package = try NCSDFUPackage(contentsOf: path)
        #expect(package.formatVersion == (name.contains("before") ? 0 : 1))
        #expect(package.imageIndices == [0, 1])
        #expect(package.images.map(\.mcuboot.version.description) == ["2.0.1", "1.1.0"])
        #expect(package.images[0].mcuboot.dependencies.map(\.description) == ["image 1 at 1.1.0 or later"])
        #expect(package.images.allSatisfy { $0.xipSlot == nil })
        #expect(package.images[1].board?.hasSuffix("cpunet") == true)
        // SMP owns it, and Nordic's Secure DFU, whose packages are zips too, does not.
        let probe = ImageProbe(path: path, head: Self.head(path))
        #expect(SMPProtocol().imageAffinity(probe) == .owns)
        #expect(NordicSecureDFUProtocol().imageAffinity(probe) == .refuses)
    }

    @Test func aDirectXIPPackageHoldsOneVariantForEachSlot() throws {
        let path = Self.samples.appendingPathComponent("nrf52840-direct-xip-dfu_application.zip").path
        let package = try NCSDFUPackage(contentsOf: path)
        #expect(package.images.map(\.xipSlot) == [0, 1])
        #expect(package.images.map(\.mcuboot.loadAddress) == [0xC000, 0x82000])
        #expect(package.images.allSatisfy { $0.mcuboot.imageFlags.contains(.romFixed) })
    }

    @Test func aPackageOfOneApplicationImageFlashesAsThatImage() throws {
        let image = try Self.sample("blinky-1.1.0-lzma2armthumb-ecdsa-p256.bin")
        let path = try zip(
            "one.zip",
            [
                ("app_update.bin", image),
                ("manifest.json", try Self.manifest([["file": "app_update.bin", "load_address": 0xc200, "version_MCUBOOT": "1.1.0", "size": image.count]])),
            ])
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: path))
        #expect(prepared.bytes == image)
        #expect(prepared.version == "1.1.0")
        #expect(prepared.summary.hasPrefix("nRF Connect SDK package \(path): app_update.bin for image 0, MCUboot image 1.1.0"))
    }

    /// A two-core package prepares as one update of both images, each part naming its image, and
    /// `--image N` keeps one of them; a direct-XIP pair keeps both variants, each naming its slot.
    @Test func aTwoCorePackageIsOneUpdateOfEachImageAndTheImageOptionPicksOne() throws {
        let path = Self.samples.appendingPathComponent("nrf5340-sysbuild-dfu_application.zip").path
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: path))
        #expect(prepared.parts.map(\.name) == ["image 0 (sensor_hub.signed.bin)", "image 1 (ipc_radio.bin)"])
        #expect(prepared.parts.map { $0.attributes[SMPProtocol.imageNumberAttribute] } == [0, 1])
        #expect(prepared.version == "2.0.1")
        let package = try NCSDFUPackage(contentsOf: path)
        #expect(prepared.parts.map(\.data) == package.images.map(\.bytes))
        let network = try SMPProtocol().prepareImage(ImageRequest(path: path, imageNumber: 1))
        #expect(network.parts.map(\.name) == ["image 1 (ipc_radio.bin)"] && network.version == "1.1.0")
        #expect(
            throws: TransferError(
                .badInput, step: .load,
                "--image 2: \(path) has no image 2 (it has 0, 1): give one of those, or no --image to update every image")
        ) { try SMPProtocol().prepareImage(ImageRequest(path: path, imageNumber: 2)) }
        let xip = Self.samples.appendingPathComponent("nrf52840-direct-xip-dfu_application.zip").path
        let pair = try SMPProtocol().prepareImage(ImageRequest(path: xip))
        #expect(pair.parts.map { $0.attributes[SMPProtocol.xipSlotAttribute] } == [0, 1], "both variants go to the host, which picks at connect")
        #expect(pair.parts.allSatisfy { $0.attributes[SMPProtocol.imageNumberAttribute] == 0 })
    }

    /// An application that needs a newer network core than the package's own is refused before connecting.
    @Test func aPackageWhoseImagesDoNotMeetEachOthersDependenciesIsRefused() throws {
        let application = try Self.sample("blinky-1.1.0-needs-image1-1.2.0+3-counter7-ecdsa-p256.bin")
        let network = try NCSDFUPackage(contentsOf: Self.samples.appendingPathComponent("nrf5340-sysbuild-dfu_application.zip").path).images[1].bytes
        let path = try zip(
            "needs.zip",
            [
                ("app.bin", application), ("ipc_radio.bin", network),
                (
                    "manifest.json",
                    try Self.manifest([
                        ["file": "app.bin", "image_index": "0", "version_MCUBOOT": "1.1.0", "size": application.count],
                        ["file": "ipc_radio.bin", "image_index": "1", "version_MCUBOOT": "1.1.0", "size": network.count],
                    ])
                ),
            ])
        #expect(
            throws: TransferError(
                .badInput, step: .load,
                "\(path): app.bin (image 0) needs image 1 at 1.2.0.3 or later, but the package's ipc_radio.bin is 1.1.0: MCUboot would refuse it at boot; build the package again with matching images"
            )
        ) { try SMPProtocol().prepareImage(ImageRequest(path: path)) }
    }

    @Test func badPackagesAreRefusedInOneLineNamingTheProblem() throws {
        let image = try Self.sample("blinky-1.1.0-xip-slot0-ecdsa-p256.bin")
        let entry: [String: Any] = ["file": "app.bin", "image_index": "0", "version_MCUBOOT": "1.1.0", "size": image.count]
        let cases: [(String, [(String, [UInt8])], String)] = [
            ("no-manifest.zip", [("app.bin", image)], "is a .zip without manifest.json, so not a DFU package"),
            ("missing.zip", [("manifest.json", try Self.manifest([entry]))], "the manifest names 'app.bin' but the archive has no such member"),
            (
                "version.zip", [("app.bin", image), ("manifest.json", try Self.manifest([entry.merging(["version_MCUBOOT": "1.2.0"]) { $1 }]))],
                "app.bin's MCUboot header says version 1.1.0 but the manifest says 1.2.0"
            ),
            (
                "size.zip", [("app.bin", image), ("manifest.json", try Self.manifest([entry.merging(["size": 12]) { $1 }]))],
                "app.bin holds \(image.count) bytes but the manifest says 12"
            ),
            (
                "not-mcuboot.zip", [("app.bin", [UInt8](repeating: 0xAB, count: 64)), ("manifest.json", try Self.manifest([["file": "app.bin"]]))],
                "app.bin is not an MCUboot image"
            ),
            (
                "climbs.zip", [("app.bin", image), ("manifest.json", try Self.manifest([entry.merging(["file": "../app.bin"]) { $1 }]))],
                "the manifest names '../app.bin', a path outside the package"
            ),
            (
                "two.zip",
                [("app.bin", image), ("b.bin", image), ("manifest.json", try Self.manifest([entry, entry.merging(["file": "b.bin"]) { $1 }]))],
                "lists 2 files for image 0 (app.bin, b.bin): only a direct-XIP pair"
            ),
            (
                "xip.zip",
                [
                    ("app.bin", image),
                    (
                        "manifest.json",
                        try Self.manifest([["file": "app.bin", "slot": "1", "load_address": "0x82200", "version_MCUBOOT+XIP": "1.1.0"]])
                    ),
                ],
                "app.bin is linked for 0xc000 (ROM-fixed) but the manifest loads it at 0x82200"
            ),
        ]
        for (name, members, message) in cases {
            let path = try zip(name, members)
            do {
                _ = try NCSDFUPackage(contentsOf: path)
                Issue.record("\(name) was read")
            } catch {
                #expect(error.description.contains(message), "\(name): \(error)")
                #expect(!error.description.contains("\n"), "one line: \(error)")
            }
        }
    }

    @Test func manifestValuesAreReadAsStringsOrNumbers() {
        #expect(NCSDFUPackage.integer("0") == 0)
        #expect(NCSDFUPackage.integer("0x1008800") == 0x1008800)
        #expect(NCSDFUPackage.integer(49664) == 49664)
        #expect(NCSDFUPackage.integer("one") == nil)
        #expect(NCSDFUPackage.integer(nil) == nil)
    }
}
