import BleotaCodec
import BleotaEngine
import BleotaProtocols
import Foundation
import Testing

@testable import BleotaSimulator

/// Direct-XIP (MCUboot modes 4 and 5): each slot runs in place, so an NCS build makes a variant
/// of the application for each slot, and the host sends the one for the slot the device does
/// not run; MCUboot boots an image only from the slot it is linked for.
@Suite struct SMPDirectXIPTests {
    static let samples = repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs")
    static let package = samples.appendingPathComponent("nrf52840-direct-xip-dfu_application.zip").path

    static func variant(_ slot: Int) throws -> [UInt8] {
        try [UInt8](Data(contentsOf: samples.appendingPathComponent("blinky-1.1.0-xip-slot\(slot)-ecdsa-p256.bin")))
    }

    /// From either running slot the variant for the other goes, and the device then runs it from there:
    /// with revert marked test and confirmed, without revert booted by its version alone.
    @Test(arguments: [("direct-xip", 0), ("direct-xip", 1), ("direct-xip-revert", 0), ("direct-xip-revert", 1)])
    func thePackagesVariantForTheFreeSlotIsSentAndRuns(_ option: String, running: Int) async throws {
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package))
        #expect(prepared.parts.count == 2)
        let run = try await simulateSMPUpgrade(
            "sim://2m-dle?protocol=smp&mcuboot-mode=\(option)", prepared: prepared,
            prepare: { storage in
                guard running == 1 else { return }
                storage.withState { state in
                    state.primary = SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0), linkedAt: 0x82000)
                    state.activeSlot = 1
                }
            })
        let report = try run.outcome.get()
        let free = 1 - running
        #expect(run.device.activeSlot == free)
        #expect(same(run.device.primary, try Self.variant(free)), "the device runs the variant linked for the slot it had free")
        #expect(run.device.primaryConfirmed)
        #expect(report.versionAfter == "1.1.0")
        #expect(run.notes.contains("direct-XIP: the device runs slot \(running), so the variant linked for slot \(free) goes"), "\(run.notes)")
        #expect(run.slots.first { $0.active }?.slot == free)
    }

    /// A package holding only the variant for the slot the device runs is refused at connect, nothing sent.
    @Test func aVariantOnlyForTheRunningSlotIsRefusedBeforeAnythingIsSent() async throws {
        var prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package))
        prepared.parts.removeAll { $0.attributes[SMPProtocol.xipSlotAttribute] == 1 }
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&mcuboot-mode=direct-xip", prepared: prepared)
        let error = try #require(run.failure, "a variant for the running slot was sent")
        #expect(error.step == .connect && error.code == .deviceRefused)
        #expect(
            error.message
                == "the update's image 0 is linked only for slot 0, which the device runs (direct-XIP), so it cannot go to slot 1: nothing was sent; give the package with both variants (an NCS direct-XIP build makes mcuboot_secondary_app.bin too)"
        )
        #expect(run.device.secondary == nil && run.steps == [.connect])
    }

    /// The wrong variant, given as a plain image, lands in the free slot, but MCUboot will not run
    /// an image linked for another address: it erases it and the device keeps its image.
    @Test func anImageLinkedForTheRunningSlotIsRefusedAtBoot() async throws {
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&mcuboot-mode=direct-xip", image: try Self.variant(0))
        let error = try #require(run.failure, "an image linked for slot 0 ran from slot 1")
        #expect(error.message.contains("MCUboot refused the image at boot"), "\(error.message)")
        #expect(run.device.activeSlot == 0 && run.device.secondary == nil)
        #expect(error.outcome == .oldImage("1.0.0"))
    }

    /// With revert, a test boot not confirmed goes back to the other slot at the next boot; without
    /// revert, `--mode test` is an upload and a reset (said), and the image stays.
    @Test(arguments: [("direct-xip-revert", 0), ("direct-xip", 1)])
    func aTestBootIsRevertedOnlyWhereTheModeHasRevert(_ option: String, slotAfterNextBoot: Int) async throws {
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package))
        let run = try await simulateSMPUpgrade(
            "sim://2m-dle?protocol=smp&mcuboot-mode=\(option)", prepared: prepared, mode: .test, after: { $0.boot() })
        _ = try run.outcome.get()
        #expect(run.device.activeSlot == slotAfterNextBoot)
        #expect(
            run.notes.contains("direct XIP without revert (mode 4): MCUboot boots the highest version for good, so --mode test is an upload and a reset")
                == (option == "direct-xip"), "\(run.notes)")
    }
}
