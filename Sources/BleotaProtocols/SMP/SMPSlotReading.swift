import BleotaEngine

/// What MCUboot's slot list says of one update's image, named by its hash: the readings
/// ``SMPUpdater``'s lifecycle steps decide on, pure so each is a row of a table test.
///
/// The sequence (connect, upload, verify, activate, reconnect, confirm, the probe after a late
/// failure, the repeats) is the engine's ``/BleotaEngine/UpdateStateMachine``; what only
/// MCUboot's slots can tell it (the image held but not running, running but not confirmed,
/// reverted, refused at boot) is here, as ``/BleotaEngine/UpdateStateMachine/DeviceReport``s.
package struct SMPSlotReading: Sendable, Hashable {
    package var slots: [SMPImageSlot]
    /// The image's hash TLV: how the device names it.
    package var hash: [UInt8]
    /// How the device names the image once its bootloader has decompressed it: NCS's MCUboot
    /// writes the decompressed SHA TLV as the hash of the slot it decompresses into, so after the
    /// swap the slot list shows that, not the file's hash (nil for an image that is not compressed).
    package var decompressedHash: [UInt8]?
    /// MCUboot's image number (core) the update is for: only its slots are read.
    package var image: Int

    package init(_ slots: [SMPImageSlot], hash: [UInt8], decompressedHash: [UInt8]? = nil, image: Int = 0) {
        self.slots = slots
        self.hash = hash
        self.decompressedHash = decompressedHash
        self.image = image
    }

    /// Whether `slot` holds the image, as uploaded or as its bootloader decompressed it.
    package func holdsImage(_ slot: SMPImageSlot) -> Bool {
        slot.image == image && (slot.hash == hash || (decompressedHash != nil && slot.hash == decompressedHash))
    }

    /// The image's own slots.
    package var own: [SMPImageSlot] { slots.filter { $0.image == image } }
    /// The slot the device runs.
    package var active: SMPImageSlot? { own.first(where: \.active) }
    /// The image, when it is what the device runs.
    package var running: SMPImageSlot? { active.flatMap { holdsImage($0) ? $0 : nil } }
    /// The image, waiting in a slot the device does not run: where an upload leaves it.
    package var staged: SMPImageSlot? { own.first { holdsImage($0) && !$0.active } }
    /// Whether a mark took: the image is pending, or already runs.
    package var marked: Bool { own.first { holdsImage($0) }.map { $0.pending || $0.active } ?? false }

    /// Whether the device can show what the image's core runs: an nRF5340's network core (image 1)
    /// lists no slot 0, its flash being the other core's. Such an image is updated by MCUboot
    /// copying it over (upgrade-only): no test boot, no confirm, and once it took, its slot is empty.
    package var primaryReadable: Bool { image == 0 || own.contains { $0.slot == 0 } }

    /// Whether `mode` still asks for the running image to be confirmed.
    package func confirmationOwed(_ mode: FlashMode, by slot: SMPImageSlot) -> Bool { mode == .testAndConfirm && !slot.confirmed }

    /// What the device says of the image, for the engine (after a probe, or at connect when it
    /// already runs it); nil when it runs nothing the host can name, which leaves the outcome unknown.
    package func report(_ mode: FlashMode) -> UpdateStateMachine.DeviceReport? {
        guard let active else { return nil }
        let target: UpdateStateMachine.TargetImage
        if let running {
            target = .running(confirmationOwed: confirmationOwed(mode, by: running))
        } else if staged != nil {
            target = .held
        } else {
            target = .absent
        }
        return UpdateStateMachine.DeviceReport(mode: .application, version: active.version, target: target)
    }

    /// What the device's return from the reset says, once the readings are settled.
    package enum AfterReset: Sendable, Hashable {
        /// It runs the image.
        case runs(SMPImageSlot)
        /// The image is still pending: the reset never arrived.
        case stillPending
        /// Neither: read again first (an answer damaged on the way can show a wrong hash), then
        /// ``failure(version:)`` says why.
        case elsewhere
        /// An image whose core cannot be read (``primaryReadable``) left its slot: MCUboot copied it over.
        case copied
    }

    package var afterReset: AfterReset {
        if let running { return .runs(running) }
        if !primaryReadable {
            // Consumed: MCUboot copied it to the other core and erased its slot.
            guard let staged else { return .copied }
            return staged.pending ? .stillPending : .elsewhere
        }
        if staged?.pending == true { return .stillPending }
        return .elsewhere
    }

    /// Why the device came back running another image than `version`, with what it runs: MCUboot
    /// reverted the image (it still holds it) or refused it at boot (and erased it).
    package func failure(version: String) -> TransferError {
        let running = active?.version ?? "nothing"
        var error: TransferError
        if !primaryReadable {
            // Still in its slot, no longer marked: the boot passed it over.
            error = TransferError(
                .verificationFailed, step: .reconnect,
                "image \(image) (\(version)) is still in its slot after the reset, no longer marked: MCUboot did not copy it to its core (on an nRF5340 it skips the network core's update when the application core's image was marked first, NCSDK-34106); flash it again with --image \(image)"
            )
            // What the core runs cannot be read: the update did not reach it, so the old image runs.
            error.outcome = .oldImage(DeviceOutcome.unnamedOldImage)
            return error
        }
        if slots.contains(where: holdsImage) {
            error = TransferError(
                .verificationFailed, step: .reconnect,
                "the device came back running \(running), not \(version): MCUboot reverted the image (it did not confirm itself, or failed its test boot)")
        } else {
            error = TransferError(
                .verificationFailed, step: .reconnect,
                "the device came back running \(running), not \(version): MCUboot refused the image at boot (it did not verify: check it is signed with the key the bootloader trusts; if it is, it arrived damaged, so flash it again) and erased it"
            )
        }
        error.outcome = .oldImage(running)
        return error
    }
}
