import BleotaCodec
import BleotaEngine
import BleotaSystem
import Foundation
import Testing

@testable import BleotaProtocols

/// SMP describes an MCUboot image for `image info` as metadata inside a plain image: the
/// header, the TLVs and what was checked, under the key `mcuboot`; any other file is not its own.
@Suite struct MCUbootImageDescriptionTests {
    static let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("samples")
    static let signed = samples.appendingPathComponent("cortex-m/gcc-arm-none-eabi-12.2.1/sensor-hub-2.0.0-mcuboot-ecdsa-p256.bin").path
    static let publicKey = samples.appendingPathComponent("cortex-m/gcc-arm-none-eabi-12.2.1/ecdsa-p256.pub.pem").path

    /// A file of `bytes` in a fresh directory, removed after `body`.
    static func withFile(_ name: String, _ bytes: [UInt8], _ body: (String) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-describe-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent(name).path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        try body(path)
    }

    static func entry(_ description: ImageDescription?, _ key: String) -> ImageDescription.Value? {
        description?.embedded?.entries.first { $0.key == key }?.value
    }

    @Test func aSignedImageIsDescribedWithItsTLVsAndTheSignatureChecked() throws {
        let description = try SMPProtocol().describeImage(ImageRequest(path: Self.signed, keyPath: Self.publicKey))
        #expect(description?.embedded?.key == "mcuboot")
        #expect(description?.parts.isEmpty == true)
        #expect(description?.problem == nil)
        #expect(Self.entry(description, "version") == .text("2.0.0"))
        #expect(Self.entry(description, "hashValid") == .flag(true))
        #expect(Self.entry(description, "signature") == .text("ECDSA P-256"))
        #expect(Self.entry(description, "signatureVerified") == .flag(true))
        #expect(Self.entry(description, "problem") == .missing)
        #expect(description?.embedded?.lines.first?.hasPrefix("mcuboot:   version 2.0.0, header ") == true)
    }

    @Test func aDamagedImageNamesTheFileAndTheHash() throws {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: Self.signed)))
        bytes[0x300] ^= 0xFF  // in the firmware, past the 0x200-byte header
        try Self.withFile("damaged.bin", bytes) { path in
            let description = try SMPProtocol().describeImage(ImageRequest(path: path))
            #expect(Self.entry(description, "hashValid") == .flag(false))
            let problem = try #require(description?.problem)
            #expect(problem.hasPrefix("\(path): "))
            #expect(problem.contains("SHA-256 TLV"))
        }
    }

    @Test func anMCUbootImageInIntelHexIsFoundAfterLoading() throws {
        let image = MCUbootImage.build(firmware: Array(repeating: 0x5A, count: 600), version: .init(major: 3, minor: 1, revision: 0, build: 7))
        let firmware = try FirmwareImage(binary: image, baseAddress: 0x1_0000)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-describe-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("app.hex").path
        try firmware.write(to: path, format: .intelHex, fill: 0xFF)
        let description = try SMPProtocol().describeImage(ImageRequest(path: path))
        #expect(Self.entry(description, "version") == .text("3.1.0.7"))
        #expect(Self.entry(description, "hashValid") == .flag(true))
    }

    @Test func otherFilesAreNotItsOwn() throws {
        try Self.withFile("plain.bin", Array(repeating: 0x11, count: 64)) { path throws in
            #expect(try SMPProtocol().describeImage(ImageRequest(path: path)) == nil)
        }
        try Self.withFile("notes.txt", Array("hello".utf8)) { path throws in
            #expect(try SMPProtocol().describeImage(ImageRequest(path: path)) == nil, "no image format: left to the command to name")
        }
    }

    @Test func aHeaderThatDoesNotParseIsBadInputNamingTheFile() throws {
        let image = MCUbootImage.build(firmware: Array(repeating: 0x5A, count: 600), version: .init(major: 1, minor: 0, revision: 0, build: 0))
        try Self.withFile("cut.bin", Array(image.prefix(0x210))) { path in
            let refusal: TransferError? = {
                do throws(TransferError) { _ = try SMPProtocol().describeImage(ImageRequest(path: path)) } catch { return error }
                return nil
            }()
            #expect(refusal?.code == .badInput)
            #expect(refusal?.message.hasPrefix("\(path) starts like an MCUboot image but does not parse: ") == true, "\(String(describing: refusal))")
        }
    }
}
