import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Foundation
import Testing

@testable import BleotaSimulator

/// MCUboot's firmware-loader mode (bootloader info mode 7): the application takes no upload; a
/// reset with `boot_mode` 1 starts the loader (another address), which writes the image over the
/// application in slot 0; nothing is marked, and the next boot runs slot 0 if it verifies.
@Suite struct SMPFirmwareLoaderTests {
    @Test func theApplicationResetsIntoItsLoaderWhichWritesTheImageOverIt() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade("sim://2m-dle?protocol=smp&mcuboot-mode=firmware-loader", image: image)
        let report = try run.outcome.get()
        #expect(same(run.device.primary, image))
        #expect(!run.device.inLoader && run.device.pendingSwap == nil)
        #expect(report.versionBefore == "1.0.0" && report.versionAfter == "1.1.0")
        #expect(run.steps == [.connect, .enterBootloader, .reconnect, .transfer, .verify, .activate, .reconnect, .confirm])
        #expect(run.device.boots == 2, "one boot into the loader, one back into the application")
        #expect(run.notes.contains { $0.hasPrefix("firmware loader (MCUboot mode 7): the application resets into its loader (boot mode 1)") }, "\(run.notes)")
    }

    /// A device left in its loader (an update cut short there) is updated from it, with no reset first.
    @Test func aDeviceFoundInItsLoaderIsUpdatedFromThere() async throws {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let run = try await simulateSMPUpgrade(
            "sim://2m-dle?protocol=smp&mcuboot-mode=firmware-loader", image: image,
            prepare: { storage in
                storage.withState { state in
                    state.primary = []
                    state.inLoader = true
                }
            })
        _ = try run.outcome.get()
        #expect(same(run.device.primary, image) && !run.device.inLoader)
        #expect(run.steps == [.connect, .transfer, .verify, .activate, .reconnect, .confirm])
        #expect(run.notes.contains("the device runs its firmware loader already (slot 1): the image goes over the application in slot 0"))
    }

    /// The boots MCUboot makes in this mode: the loader when asked or when the application does not verify.
    @Test func theLoaderBootsWhenAskedOrWhenTheApplicationDoesNotVerify() {
        let factory = SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))
        let storage = SMPDeviceStorage(primary: factory)
        storage.withState { $0.firmwareLoader = SMPDevice.factoryImage(version: .init(major: 0, minor: 1, revision: 0, build: 0), size: 1024) }
        storage.withState { $0.bootModeRequest = SMPResetRequest.bootLoaderMode }
        #expect(storage.boot() == "booted the firmware loader (boot mode 1)")
        #expect(storage.snapshot.inLoader && storage.slots.map(\.slot) == [0, 1] && storage.slots.first { $0.active }?.slot == 1)
        #expect(storage.boot() == "booted the application")
        #expect(!storage.snapshot.inLoader && storage.slots.map(\.slot) == [0])
        storage.withState { $0.primary = Array(factory.dropLast(7)) }
        #expect(storage.boot() == "the application does not verify: booted the firmware loader")
        #expect(storage.snapshot.inLoader)
    }
}

/// A loader that advertises a name of its own (an NCS loader's `FL_…`) is found by it when the host
/// is told the name (`--protocol-option loader-name=…`); told another, the reconnect names what it sought.
@Suite struct SMPFirmwareLoaderNameTests {
    static func run(loaderName: String) async throws -> SMPRun {
        let image = try imgtoolSample("app-1.1.0-ecdsa-p256.bin")
        let parsed = try SimulatorAddress(parsing: "sim://2m-dle?protocol=smp&mcuboot-mode=firmware-loader&loader-name=FL_00042")
        return try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            let device = try SMPProtocol().makeDevice(Simulation.configuration(parsed, for: SMPProtocol())) as! SMPDevice
            await world.add(SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model))
            let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: "sim")
            let steps = SharedSteps(), notes = SharedLog()
            let context = HostContext(
                protocolName: SMPProtocol.name, connector: connector, clock: world.clock, timeouts: StepTimeouts(reboot: .seconds(5)),
                options: try ProtocolOptions(parsing: ["loader-name": loaderName], SMPProtocol().hostOptions)
            ) { event in
                if case .step(let step) = event { steps.append(step) }
                if case .note(let note) = event { notes.append(note) }
            }
            let outcome: Result<UpdateReport, TransferError>
            do throws(TransferError) {
                outcome = .success(
                    try await SMPUpdater(context: context, explicitKnobs: []).flash(try SMPProtocol.prepare(image, path: "app", keyPath: nil), mode: .testAndConfirm))
            } catch { outcome = .failure(error) }
            return SMPRun(outcome: outcome, device: device.storage.snapshot, slots: device.storage.slots, steps: steps.all, notes: notes.all)
        }
    }

    @Test func theLoaderIsFoundByTheNameItAdvertises() async throws {
        let found = try await Self.run(loaderName: "FL_00042")
        #expect(try found.outcome.get().versionAfter == "1.1.0")
        #expect(!found.device.inLoader)
        let error = try #require(try await Self.run(loaderName: "FL_99999").failure, "a loader was found under another name")
        #expect(error.step == .reconnect && error.message.contains("no device advertising the name 'FL_99999'"), "\(error.message)")
    }
}
