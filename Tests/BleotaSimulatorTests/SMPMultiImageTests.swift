import BleotaCodec
import BleotaEngine
import BleotaProtocols
import Foundation
import Testing

@testable import BleotaSimulator

/// Two-core parts (an nRF5340): image 0 the application core, image 1 the network core, whose
/// flash the application cannot read and which MCUboot updates by copying over (upgrade-only),
/// skipping it when the application core's image was marked first (NCSDK-34106).
@Suite struct SMPMultiImageTests {
    static let package = repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs/nrf5340-sysbuild-dfu_application.zip").path

    static func parts() throws -> (application: [UInt8], network: [UInt8]) {
        let images = try NCSDFUPackage(contentsOf: package).images
        return (images[0].bytes, images[1].bytes)
    }

    /// One update of both images: each to its image's slot 1 (the upload's `image` field), the
    /// network core marked before the application core, one reset, and each image checked after:
    /// the application runs confirmed, the network core's slot was consumed by MCUboot's copy.
    @Test(arguments: ["sim://2m-dle?protocol=smp&images=2", "sim://linux-bluez?protocol=smp&images=2&notify-loss=0.03&seed=11"])
    func aTwoCorePackageUpdatesBothCoresInOneUpdate(_ address: String) async throws {
        let (application, network) = try Self.parts()
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package))
        let run = try await simulateSMPUpgrade(address, prepared: prepared)
        let report = try run.outcome.get()
        #expect(same(run.device.primary, application), "the application core runs exactly the package's image 0")
        #expect(same(run.device.networkCore?.running, network), "the network core runs exactly the package's image 1")
        #expect(run.device.networkCore?.secondary == nil && run.device.networkCore?.pending == false)
        #expect(run.device.primaryConfirmed)
        #expect(run.device.boots == 1, "one reset for both images")
        #expect(report.versionAfter == "2.0.1" && report.versionBefore == "1.0.0")
        #expect(report.bytes == application.count + network.count)
        #expect(run.steps == [.connect, .transfer, .verify, .activate, .reconnect, .confirm])
        #expect(run.notes.contains("uploading image 1 (1.1.0), \(network.count) bytes"))
        #expect(
            run.notes.contains {
                $0.hasPrefix("image 1 (1.1.0) is for a core whose flash the device cannot read (no slot 0 listed for image 1)")
            }, "\(run.notes)")
        // The list a multi-image device gives numbers every entry, image 0's too.
        let body = SMPImageSlot.listBody(run.slots, numbered: true)
        #expect(body["images"]?.elements?.allSatisfy { $0["image"] != nil } == true)
    }

    /// MCUboot's rule as NCSDK-34106 states it: with the application core's flag set first, the
    /// network core's update is skipped at the boot (its slot kept, no longer marked).
    @Test func theNetworkCoreIsUpdatedOnlyWhenMarkedBeforeTheApplicationCore() throws {
        let (application, network) = try Self.parts()
        for (order, updated) in [([1, 0], true), ([0, 1], false), ([1], true)] {
            let factory = SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))
            let storage = SMPDeviceStorage(primary: factory, networkCore: .init(running: factory, slotSize: 256 * 1024))
            storage.withState { state in
                state.secondary = application
                if order.contains(0) { state.pendingSwap = .test }
                state.networkCore?.secondary = network
                state.networkCore?.pending = true
                state.markOrder = order
            }
            let said = storage.boot()
            let state = storage.snapshot
            #expect(same(state.networkCore?.running, updated ? network : factory), "order \(order)")
            #expect(state.networkCore?.pending == false && state.markOrder.isEmpty)
            #expect(same(state.networkCore?.secondary, updated ? nil : network), "a skipped update stays in its slot")
            #expect(said.contains(updated ? "updated the network core" : "skipped the network core's update"), "\(said)")
            // The package's application needs its network core (a dependency TLV): without it MCUboot does not swap it either.
            #expect(same(state.primary, order.contains(0) && updated ? application : factory), "order \(order)")
        }
    }

    /// `flash --image 1`: the network core alone. It cannot be read back, so the check is that its
    /// slot emptied at the reset; `--mode test` updates it for good, and bleota says so.
    @Test(arguments: [FlashMode.testAndConfirm, .test])
    func theNetworkCoreAloneIsFlashedByItsImageNumber(_ mode: FlashMode) async throws {
        let (_, network) = try Self.parts()
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package, imageNumber: 1))
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&images=2", prepared: prepared, mode: mode)
        let report = try run.outcome.get()
        #expect(same(run.device.networkCore?.running, network))
        let factory = SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))
        #expect(same(run.device.primary, factory), "the application core is untouched")
        #expect(run.device.pendingSwap == nil && run.device.primaryConfirmed)
        #expect(report.versionAfter == "1.1.0")
        #expect(run.notes.contains { $0.hasPrefix("image 1 (1.1.0) left its slot at the reset: MCUboot copied it to its core") }, "\(run.notes)")
        #expect(run.notes.contains { $0.contains("--mode test updates it for good") } == (mode == .test))
    }

    /// A late failure names the image: here something marked the application core before bleota's
    /// marks (a stale trailer), so MCUboot skips the network core's update, and the application,
    /// which needs that network core (its dependency TLV), is not swapped either; the message says
    /// what each image did.
    @Test func aNetworkCoreUpdateThatWasSkippedFailsNamingTheImage() async throws {
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package))
        let run = try await simulateSMPUpgrade(
            "sim://2m-dle?protocol=smp&images=2", prepared: prepared, prepare: { storage in storage.withState { $0.markOrder = [0] } })
        let error = try #require(run.failure, "a skipped network core update was reported as done")
        #expect(error.code == .verificationFailed && error.step == .reconnect)
        #expect(
            error.message
                == "image 0 runs 1.0.0 but image 1 (1.1.0) is still in its slot after the reset, no longer marked: MCUboot did not copy it to its core (on an nRF5340 it skips the network core's update when the application core's image was marked first, NCSDK-34106); flash it again with --image 1"
        )
        #expect(error.outcome == .oldImage("1.0.0"))
        #expect(run.device.networkCore?.secondary != nil && run.device.networkCore?.pending == false)
    }

    /// A package for two cores against a device with one: refused at connect from its slot info, nothing sent.
    @Test func aPackageForAnImageTheDeviceLacksIsRefusedBeforeAnythingIsSent() async throws {
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package))
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp", prepared: prepared)
        let error = try #require(run.failure, "a two-core package was flashed to a one-image device")
        #expect(error.step == .connect && error.code == .deviceRefused)
        #expect(
            error.message
                == "the update has image 1 (1.1.0) but the device has no image 1 (its slot info lists image 0): nothing was sent; give the package built for this device, or --image with one of those"
        )
        #expect(run.device.secondary == nil && run.steps == [.connect])
    }

    /// Upload-only leaves both images in their slots, listed per image (image 1 has no slot 0
    /// entry), unmarked; a device that is asked for an image it lacks answers "no free slot".
    @Test func uploadOnlyListsEachImageInItsOwnSlot() async throws {
        let (application, network) = try Self.parts()
        let prepared = try SMPProtocol().prepareImage(ImageRequest(path: Self.package))
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&images=2", prepared: prepared, mode: .upload)
        _ = try run.outcome.get()
        #expect(run.slots.map { [$0.image, $0.slot] } == [[0, 0], [0, 1], [1, 1]])
        #expect(run.slots.allSatisfy { !$0.pending })
        #expect(same(run.device.secondary, application) && same(run.device.networkCore?.secondary, network))
        #expect(run.steps == [.connect, .transfer, .verify])
    }

    /// An image's dependency on image 1 (`IMAGE_TLV_DEPENDENCY`) is checked before anything is sent
    /// where the device lists what image 1 runs; where it cannot (an nRF5340), bleota says so, and
    /// MCUboot's refusal at boot (the upgrade cancelled, the image left in its slot) is named with it.
    @Test(arguments: [("2-listed", "1.0.0"), ("2-listed", "1.3.0"), ("2", "1.0.0")])
    func aDependencyOnTheOtherImageIsCheckedWhereTheDeviceShowsIt(_ images: String, running: String) async throws {
        let image = try [UInt8](
            Data(contentsOf: repositoryRootForSMP.appendingPathComponent("samples/mcuboot/imgtool-2.5.0-ncs/blinky-1.1.0-needs-image1-1.2.0+3-counter7-ecdsa-p256.bin")))
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&images=\(images)&version=\(running)", image: image)
        switch (images, running) {
        case ("2-listed", "1.0.0"):
            let error = try #require(run.failure, "an unmet dependency was flashed")
            #expect(
                error.message
                    == "image 0 (1.1.0) needs image 1 at 1.2.0.3 or later, but the device's image 1 runs 1.0.0: nothing was sent; update image 1 first, or with it (MCUboot would refuse the image at boot)"
            )
            #expect(error.step == .connect && run.device.secondary == nil && run.steps == [.connect])
        case ("2-listed", _):
            #expect(try run.outcome.get().versionAfter == "1.1.0")
            #expect(same(run.device.primary, image))
        default:
            let error = try #require(run.failure, "MCUboot swapped an image whose dependency is unmet")
            #expect(run.notes.contains("image 0 (1.1.0) needs image 1 at 1.2.0.3 or later, which bleota cannot check: the device does not show what image 1 runs"))
            #expect(error.message.hasSuffix("; or the image's dependency (image 1 at 1.2.0.3 or later) was not met, which bleota could not check beforehand"), "\(error.message)")
            #expect(same(run.device.secondary, image) && run.device.pendingSwap == nil, "the upgrade was cancelled, the image left in its slot")
            #expect(error.outcome == .oldImage("1.0.0"))
        }
    }
}
