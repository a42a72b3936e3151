import BleotaCodec
import BleotaEngine
import BleotaProtocols
import Foundation
import Testing

@testable import BleotaSimulator

/// Encrypted MCUboot images (imgtool `--encrypt`): only the bootloader can check them, once it has
/// unwrapped the AES key with its own private key, so bleota sends them without a plaintext-hash
/// claim and the device's validation decides; one encrypted for a key the device lacks is erased
/// at boot, and the failure says what the image needs.
@Suite struct SMPEncryptedImageTests {
    static func sample(_ name: String) throws -> [UInt8] {
        try [UInt8](Data(contentsOf: repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs/\(name)")))
    }

    @Test(arguments: [
        ("blinky-1.1.0-encrypted-aes128-ecies-p256.bin", "ecies-p256", true),
        ("blinky-1.1.0-encrypted-aes256-x25519-ed25519.bin", "x25519", true),
        ("blinky-1.1.0-encrypted-aes128-ecies-p256.bin", "x25519", false),
        ("blinky-1.1.0-encrypted-aes256-x25519-ed25519.bin", "none", false),
    ])
    func anEncryptedImageRunsWhereTheBootloaderHoldsItsKey(_ name: String, key: String, runs: Bool) async throws {
        let image = try Self.sample(name)
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&decrypt-key=\(key)", image: image)
        if runs {
            #expect(try run.outcome.get().versionAfter == "1.1.0")
            #expect(same(run.device.primary, image) && run.device.primaryConfirmed)
            return
        }
        let error = try #require(run.failure, "an image encrypted for another key ran")
        let keyTLV = name.contains("ecies-p256") ? "0x32" : "0x33"
        let cipher = name.contains("aes128") ? "AES-128" : "AES-256"
        #expect(error.message.contains("MCUboot refused the image at boot"), "\(error.message)")
        #expect(
            error.message.hasSuffix("; the image is encrypted (\(cipher), its key in TLV \(keyTLV)): the bootloader must hold the private key it was encrypted for"),
            "\(error.message)")
        #expect(run.device.secondary == nil && error.outcome == .oldImage("1.0.0"))
    }
}
