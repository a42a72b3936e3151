import BleotaCodec
import BleotaEngine
import BleotaProtocols
import Foundation
import Testing

@testable import BleotaSimulator

/// Each of MCUboot's modes 0–9 (`boot_status.h`), as the simulated device does it, flashed with
/// bleota's default flow: what the device runs afterwards, the steps taken, and bootloader info's
/// name for the mode. Direct-XIP (4, 5) and the firmware loader (7) have suites of their own too.
@Suite struct SMPBootModeTests {
    enum Expected: Sendable {
        /// Runs 1.1.0 confirmed, after these steps; `secondaryKept`: the old image is still in a slot.
        case runs(steps: [UpdateStep], secondaryKept: Bool)
        /// Refused at connect with this message, nothing sent.
        case refused(String)
    }

    static let swapSteps: [UpdateStep] = [.connect, .transfer, .verify, .activate, .reconnect, .confirm]
    static func singleSlot(_ number: Int, _ name: String) -> Expected {
        .refused(
            "the device's MCUboot is single-slot (mode \(number), \(name)): the application has no slot for an update, so nothing was sent; update it through MCUboot's serial recovery (the bootloader's SMP on its serial console: hold the device in recovery and flash --device serial://…)"
        )
    }

    @Test(arguments: [
        ("single-slot", 0, singleSlot(0, "single slot")),
        ("swap-scratch", 1, .runs(steps: swapSteps, secondaryKept: true)),
        ("overwrite-only", 2, .runs(steps: swapSteps, secondaryKept: false)),
        ("swap-move", 3, .runs(steps: swapSteps, secondaryKept: true)),
        ("direct-xip", 4, .runs(steps: swapSteps, secondaryKept: true)),
        ("direct-xip-revert", 5, .runs(steps: swapSteps, secondaryKept: true)),
        ("ram-load", 6, .runs(steps: swapSteps, secondaryKept: true)),
        ("firmware-loader", 7, .runs(steps: [.connect, .enterBootloader, .reconnect, .transfer, .verify, .activate, .reconnect, .confirm], secondaryKept: false)),
        ("single-slot-ram-load", 8, singleSlot(8, "single slot RAM load")),
        ("swap-offset", 9, .runs(steps: swapSteps, secondaryKept: true)),
    ])
    func everyModeIsFlashedWithTheFlowItNeeds(_ word: String, number: Int, expected: Expected) async throws {
        // Direct-XIP runs an image only from the slot it is linked for: the slot-1 variant there.
        let xip = number == 4 || number == 5
        let image =
            xip
            ? try [UInt8](Data(contentsOf: repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs/blinky-1.1.0-xip-slot1-ecdsa-p256.bin")))
            : try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let address = "sim://2m-dle?protocol=smp&mcuboot-mode=\(word)"
        let run = try await simulateSMPUpgrade(address, image: image)
        #expect(run.device.mode.rawValue == number)
        switch expected {
        case .refused(let message):
            let error = try #require(run.failure, "mode \(number): flashed where nothing should be sent")
            #expect(error.message == message && error.step == .connect)
            #expect(run.steps == [.connect] && run.device.secondary == nil)
        case .runs(let steps, let kept):
            let report = try run.outcome.get()
            #expect(report.versionAfter == "1.1.0", "mode \(number)")
            #expect(same(run.device.primary, image), "mode \(number): the device runs exactly the image")
            #expect(run.device.primaryConfirmed, "mode \(number)")
            #expect(run.steps == steps, "mode \(number)")
            #expect((run.device.secondary != nil) == kept, "mode \(number): the old image \(kept ? "kept" : "gone")")
        }
    }

    /// An upgrade-only device has no way back: a test mark boots the image for good, and a second
    /// reset without a confirm keeps it (a swap device would revert).
    @Test func overwriteOnlyKeepsATestImageWithoutAConfirm() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        for (word, kept) in [("overwrite-only", true), ("swap-scratch", false)] {
            let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&mcuboot-mode=\(word)", image: image, mode: .test, after: { $0.boot() })
            _ = try run.outcome.get()
            #expect(same(run.device.primary, image) == kept, "\(word)")
        }
    }
}
