import BleotaCodec
import Synchronization

/// What an MCUboot device keeps in flash: two slots and the swap trailers'
/// flags. Survives connections and resets; the upload in progress survives
/// connections only, as in Zephyr, where it lives in RAM.
///
/// The flags follow MCUboot's trailers (bootutil_public.c): a secondary slot
/// marked for a test swap or a permanent one, and a primary that came from a
/// test swap and is not confirmed yet — which is what MCUboot reverts at the
/// next boot. Zephyr's image list and its refusals derive from these.
package final class SMPDeviceStorage: Sendable {
    package struct State: Sendable {
        package var primary: [UInt8]
        package var secondary: [UInt8]?
        /// The image in the primary slot is confirmed (it will not be reverted).
        package var primaryConfirmed = true
        /// A swap to the secondary image is requested: test (once) or permanent.
        package var pendingSwap: PendingSwap?
        /// Boots of the device so far.
        package var boots = 0
        package var slotSize: Int
        package var files: [String: [UInt8]] = [:]
        /// Image 1 of a two-core part (an nRF5340's network core), when the device has one.
        package var networkCore: NetworkCore?
        /// MCUboot in direct-XIP mode: both slots execute in place, nothing is swapped, and
        /// `primary` is the image of the slot the device runs (`activeSlot`), `secondary` the other's.
        package var directXIP: DirectXIP?
        /// The slot `primary` is in: 0 unless direct-XIP booted slot 1.
        package var activeSlot = 0
        /// The mode MCUboot was built for, which bootloader info reports.
        package var mode: MCUbootMode = .swapScratch
        /// The private key MCUboot holds for encrypted images (`MCUBOOT_ENCRYPT_*`).
        package var decryption: Decryption = .any
        /// MCUboot's firmware-loader mode (mode 7): a second, small application with MCUmgr, the
        /// loader (its image here), which MCUboot boots when asked (reset with `boot_mode` 1) or when
        /// the application does not verify, and which writes an upload over the application.
        package var firmwareLoader: [UInt8]?
        /// Whether the loader runs (the device advertises as its bootloader then).
        package var inLoader = false
        /// The boot mode a reset asked for (retention RAM), read by the next boot.
        package var bootModeRequest: Int?
        /// The images marked for the next boot, in the order their flags were set: on an nRF5340
        /// MCUboot skips the network core's update when the application core's flag was set first
        /// (nRF Connect SDK's known issue NCSDK-34106), so hosts mark image 1 before image 0.
        package var markOrder: [Int] = []

        package enum PendingSwap: Sendable, Equatable { case test, permanent }

        /// MCUboot's swap type for the next boot, from the trailers.
        package var swapType: SwapType {
            switch pendingSwap {
            case .test?: .test
            case .permanent?: .permanent
            case nil: primaryConfirmed ? .none : .revert
            }
        }
    }

    /// An nRF5340's network core as MCUboot updates it: the image runs on the other core, whose flash
    /// the application core cannot read (the image list has no entry for image 1's slot 0), and an
    /// update is copied over it at boot (upgrade-only: no test boot, no revert), after which the
    /// application core's slot that carried it is erased.
    package struct NetworkCore: Sendable {
        /// What the network core runs (not listed: unreadable from the application core).
        package var running: [UInt8]
        /// Image 1's secondary slot, in the application core's flash.
        package var secondary: [UInt8]?
        /// Marked for the next boot (a test mark is taken as permanent: there is no way back).
        package var pending: Bool = false
        /// Whether the mark asked for permanence (what the trailer, and so the list, says).
        package var permanent: Bool = false
        package var slotSize: Int
        /// Whether the image list shows what it runs (slot 0): not on an nRF5340, where that flash is
        /// the other core's; a part whose second image the application can read lists it.
        package var listsRunning: Bool
        package init(running: [UInt8], slotSize: Int, listsRunning: Bool = false) {
            self.running = running
            self.slotSize = slotSize
            self.listsRunning = listsRunning
        }
    }

    /// Which encrypted images MCUboot can decrypt: it unwraps the image's AES key with its own
    /// private key (the key TLV's kind: 0x30 RSA-OAEP, 0x31 AES key wrap, 0x32 ECIES P-256, 0x33
    /// ECIES X25519), so an image encrypted for another kind, or a bootloader without a key, fails
    /// validation and is erased. `any` stands for the key each image was encrypted for.
    package enum Decryption: Sendable, Equatable {
        case any, none
        case key(UInt16)

        func decrypts(_ image: MCUbootImage) -> Bool {
            switch self {
            case .any: true
            case .none: false
            case .key(let kind): image.encryption?.key?.type == kind
            }
        }
    }

    /// What MCUboot's validation says of `image` on this device: an encrypted image is validated once
    /// decrypted, which needs the key it was encrypted for; any other, its hash.
    static func validates(_ image: [UInt8], _ state: State) -> Bool {
        guard let parsed = try? MCUbootImage(decoding: image) else { return false }
        if parsed.isEncrypted { return state.decryption.decrypts(parsed) }
        return verifies(image)
    }

    /// MCUboot's modes as `boot_status.h` numbers them (bootloader info's `mode`, which Zephyr's
    /// `os_mgmt` derives from the application's Kconfig). The simulated device does each: swap
    /// (scratch, move, offset: test, confirm or revert), overwrite-only (copied, no revert),
    /// direct-XIP and RAM load (the highest version from the slot it is in), direct-XIP with
    /// revert, the firmware loader, and single-slot (no slot for an upload).
    package enum MCUbootMode: Int, Sendable, CaseIterable {
        case singleSlot = 0, swapScratch, overwriteOnly, swapMove, directXIP, directXIPRevert, ramLoad, firmwareLoader, singleSlotRAMLoad,
            swapOffset

        /// Whether an application has a second slot to take an upload.
        package var hasSecondSlot: Bool { self != .singleSlot && self != .singleSlotRAMLoad && self != .firmwareLoader }

        /// How the slots run, where they run in place (or from RAM): nil for the swap modes.
        package var inPlace: DirectXIP? {
            switch self {
            case .directXIP, .ramLoad: .withoutRevert
            case .directXIPRevert: .withRevert
            default: nil
            }
        }
    }

    /// MCUboot's direct-XIP modes (`MCUBOOT_DIRECT_XIP`, bootloader info mode 4, and with
    /// `MCUBOOT_DIRECT_XIP_REVERT` mode 5). Each slot runs in place, so an image is linked for one
    /// slot (imgtool `--rom-fixed`, `IMAGE_F_ROM_FIXED` and the load address): MCUboot boots an
    /// image only from the slot it is linked for (`boot_rom_address_check`). Without revert it
    /// boots the valid image of the highest version, marks or not; with revert it boots the other
    /// slot's image only once marked, and a test boot not confirmed goes back at the next boot.
    package enum DirectXIP: Sendable, Equatable {
        case withoutRevert, withRevert

        /// Where each slot starts: an nRF52840's layout after a 48 KiB MCUboot (slots of 0x76000).
        package static let slotAddresses: [UInt32] = [0xC000, 0x82000]
        package static let slotSize = 0x76000
        /// bootloader info's `mode`.
        package var mode: Int { self == .withoutRevert ? 4 : 5 }
    }

    /// Whether `image` may run from physical `slot` under direct-XIP: it verifies, and an image
    /// linked for a fixed address is linked for this slot's.
    static func executes(_ image: [UInt8], inSlot slot: Int) -> Bool {
        guard verifies(image), let parsed = try? MCUbootImage(decoding: image) else { return false }
        return !parsed.imageFlags.contains(.romFixed) || parsed.loadAddress == DirectXIP.slotAddresses[slot]
    }

    /// `boot_swap_type()`: what MCUboot will do at the next boot.
    package enum SwapType: Sendable, Equatable {
        case none, test, permanent
        /// Running a test image that was not confirmed: the next boot swaps the old one back.
        case revert
    }

    /// An upload in progress (RAM on a real device).
    package struct Upload: Sendable {
        /// The image (core) it is for: Zephyr keeps one upload context for all of them.
        package var image: Int = 0
        package var length: Int
        package var sha: [UInt8]?
        package var bytes: [UInt8]
    }

    private let state: Mutex<State>
    private let upload = Mutex<Upload?>(nil)
    /// Whether the bootloader decompresses compressed images (nRF Connect SDK's MCUboot does;
    /// upstream MCUboot does not): the slot it decompresses into then carries the decompressed
    /// SHA as its hash TLV, which is what the image list reports once it runs.
    package let decompresses: Bool

    package init(
        primary: [UInt8], slotSize: Int = 512 * 1024, decompresses: Bool = false, networkCore: NetworkCore? = nil, directXIP: DirectXIP? = nil
    ) {
        var initial = State(primary: primary, slotSize: slotSize)
        initial.networkCore = networkCore
        initial.directXIP = directXIP
        state = Mutex(initial)
        self.decompresses = decompresses
    }

    /// The images the device updates: 1, or 2 with a network core.
    package var imageCount: Int { snapshot.networkCore == nil ? 1 : 2 }

    /// What the primary slot holds once the bootloader has installed `image`: the image itself, or
    /// for a compressed one on a decompressing bootloader, the image with the decompressed SHA as
    /// its hash TLV (the simulator keeps the compressed firmware: only what the slot list reports
    /// of it is modelled, not the decompressed bytes).
    func installed(_ image: [UInt8]) -> [UInt8] {
        guard decompresses, let parsed = try? MCUbootImage(decoding: image), let hash = parsed.decompressedHash,
            let replaced = parsed.replacingUnprotectedTLV(MCUbootImage.TLVType.sha256, with: hash, in: image)
        else { return image }
        return replaced
    }

    package func withState<T>(_ body: (inout State) throws -> T) rethrows -> T { try state.withLock { try body(&$0) } }
    package var snapshot: State { state.withLock { $0 } }
    func withUpload<T>(_ body: (inout Upload?) -> T) -> T { upload.withLock { body(&$0) } }
    /// Bytes of the upload in progress the device holds (0 when none is).
    var uploadedBytes: Int { upload.withLock { $0?.bytes.count ?? 0 } }

    /// Power-up as MCUboot does it: perform a requested swap if the secondary
    /// image verifies (else erase it and boot the primary unchanged), revert an
    /// unconfirmed test image, never boot a bad one. RAM (the upload in
    /// progress) is lost. Returns what happened, for logs and the simulator's trace.
    @discardableResult
    package func boot() -> String {
        upload.withLock { $0 = nil }
        return state.withLock { state in
            state.boots += 1
            let network = Self.bootNetworkCore(&state)
            state.markOrder = []
            if state.firmwareLoader != nil { return Self.bootWithLoader(&state) }
            let application = state.directXIP == nil ? Self.bootApplication(&state, installing: installed) : Self.bootInPlace(&state)
            return network.map { "\(application); \($0)" } ?? application
        }
    }

    /// Firmware-loader mode: the loader when asked (boot mode 1) or when the application does not
    /// verify (an upload cut short leaves it so), else the application. Nothing is swapped or marked.
    private static func bootWithLoader(_ state: inout State) -> String {
        defer { state.bootModeRequest = nil }
        if state.bootModeRequest == SMPResetRequest.bootLoaderMode {
            state.inLoader = true
            return "booted the firmware loader (boot mode 1)"
        }
        guard verifies(state.primary) else {
            state.inLoader = true
            return "the application does not verify: booted the firmware loader"
        }
        state.inLoader = false
        state.primaryConfirmed = true
        return "booted the application"
    }

    /// A direct-XIP boot: nothing moves; MCUboot picks the slot to run (``DirectXIP``), and an
    /// image linked for the other slot's address is refused and erased.
    private static func bootInPlace(_ state: inout State) -> String {
        func runOther(confirmed: Bool) {
            let running = state.primary
            state.primary = state.secondary!
            state.secondary = running
            state.activeSlot = 1 - state.activeSlot
            state.primaryConfirmed = confirmed
        }
        let other = 1 - state.activeSlot
        if let secondary = state.secondary, !executes(secondary, inSlot: other), state.directXIP == .withoutRevert || state.pendingSwap != nil {
            state.secondary = nil
            state.pendingSwap = nil
            return "the image in slot \(other) does not verify or is linked for the other slot: erased it, kept slot \(state.activeSlot)"
        }
        switch (state.directXIP!, state.swapType) {
        case (.withoutRevert, _):
            state.pendingSwap = nil
            state.primaryConfirmed = true
            guard let secondary = state.secondary, let offered = try? MCUbootImage(decoding: secondary),
                let running = try? MCUbootImage(decoding: state.primary), offered.version > running.version
            else { return "booted slot \(state.activeSlot) (the highest version)" }
            runOther(confirmed: true)
            return "booted slot \(state.activeSlot), the highest version"
        case (.withRevert, .test), (.withRevert, .permanent):
            let permanent = state.pendingSwap == .permanent
            state.pendingSwap = nil
            runOther(confirmed: permanent)
            return "booted slot \(state.activeSlot)\(permanent ? " for good" : " for a test boot")"
        case (.withRevert, .revert):
            guard state.secondary.map({ executes($0, inSlot: other) }) == true else {
                state.primaryConfirmed = true
                return "the previous image does not verify: kept the test image"
            }
            runOther(confirmed: true)
            return "the test image was not confirmed: back to slot \(state.activeSlot)"
        case (.withRevert, .none):
            return "booted slot \(state.activeSlot)"
        }
    }

    /// The network core's part of a boot: its update copied over (PCD) when marked, unless the
    /// application core's flag was set first (NCSDK-34106: the update is skipped, its slot kept,
    /// no longer marked). Nil when there is nothing to say.
    private static func bootNetworkCore(_ state: inout State) -> String? {
        guard var core = state.networkCore, core.pending else { return nil }
        core.pending = false
        core.permanent = false
        defer { state.networkCore = core }
        if let application = state.markOrder.firstIndex(of: 0), let network = state.markOrder.firstIndex(of: 1), application < network {
            return "skipped the network core's update: the application core's image was marked first (NCSDK-34106)"
        }
        guard let secondary = core.secondary, verifies(secondary) else {
            core.secondary = nil
            return "the network core's update does not verify: erased it"
        }
        core.running = secondary
        core.secondary = nil
        return "updated the network core"
    }

    private static func bootApplication(_ state: inout State, installing installed: ([UInt8]) -> [UInt8]) -> String {
        switch state.swapType {
        case .test, .permanent:
            let permanent = state.pendingSwap == .permanent || state.mode == .overwriteOnly
            state.pendingSwap = nil
            guard let secondary = state.secondary, Self.validates(secondary, state) else {
                // boot_validate_slot: a pending image that fails validation is scrambled.
                state.secondary = nil
                return "the secondary image does not verify: erased it, kept the primary"
            }
            if let unmet = unmetDependency(of: secondary, in: state) {
                // boot_verify_dependencies: the upgrade is cancelled, the image left where it is.
                return "the secondary image needs \(unmet), which image \(unmet.image) does not meet: not swapped"
            }
            // Overwrite-only copies the image over and erases its slot: there is no way back.
            state.secondary = state.mode == .overwriteOnly ? nil : state.primary
            state.primary = installed(secondary)
            state.primaryConfirmed = permanent
            return permanent ? "swapped to the new image permanently" : "swapped to the new image for a test boot"
        case .revert:
            guard let secondary = state.secondary, Self.verifies(secondary) else {
                // The old image no longer validates: MCUboot keeps the unconfirmed one.
                state.secondary = nil
                return "the previous image does not verify: erased it, kept the test image"
            }
            state.secondary = state.primary
            state.primary = secondary
            state.primaryConfirmed = true
            return "the test image was not confirmed: reverted to the previous image"
        case .none:
            return "booted the primary image"
        }
    }

    /// The first of `image`'s dependencies on the network core (image 1) that what it runs does not meet.
    private static func unmetDependency(of image: [UInt8], in state: State) -> MCUbootImage.Dependency? {
        guard let parsed = try? MCUbootImage(decoding: image), let core = state.networkCore,
            let running = try? MCUbootImage(decoding: core.running)
        else { return nil }
        return parsed.dependencies.first { $0.image == 1 && running.version < $0.minimumVersion }
    }

    /// What MCUboot checks before swapping: the header, the TLVs and the hash.
    static func verifies(_ image: [UInt8]) -> Bool {
        guard let parsed = try? MCUbootImage(decoding: image) else { return false }
        return (try? parsed.verifyHash()) != nil
    }

    /// The image list Zephyr's `img_mgmt` reports. A slot is listed only when its
    /// header and TLVs parse (`img_mgmt_read_info`); the hash is the TLV's, not recomputed.
    /// Flags per MCUboot's swap type: during a test boot the previous image in
    /// slot 1 is the confirmed one and the running image is not.
    package var slots: [SMPImageSlot] {
        let state = snapshot
        let type = state.swapType
        var slots: [SMPImageSlot] = []
        if let loader = state.firmwareLoader {
            // The application in slot 0, the loader in slot 1: each active when it runs.
            if let image = try? MCUbootImage(decoding: state.primary) {
                slots.append(
                    SMPImageSlot(slot: 0, version: image.version.description, hash: image.hashTLV ?? [], bootable: true, confirmed: true, active: !state.inLoader))
            }
            if state.inLoader, let image = try? MCUbootImage(decoding: loader) {
                slots.append(SMPImageSlot(slot: 1, version: image.version.description, hash: image.hashTLV ?? [], bootable: true, confirmed: true, active: true))
            }
            return slots
        }
        if let image = try? MCUbootImage(decoding: state.primary) {
            slots.append(
                SMPImageSlot(
                    slot: state.activeSlot, version: image.version.description, hash: image.hashTLV ?? [],
                    bootable: true, confirmed: type != .revert, active: true))
        }
        if let secondary = state.secondary, let image = try? MCUbootImage(decoding: secondary) {
            slots.append(
                SMPImageSlot(
                    slot: 1 - state.activeSlot, version: image.version.description, hash: image.hashTLV ?? [],
                    bootable: true, pending: type == .test || type == .permanent,
                    confirmed: type == .revert, active: false, permanent: type == .permanent))
        }
        // Image 1: on an nRF5340 only its secondary slot, in the application core's flash, can be read.
        if let core = state.networkCore, core.listsRunning, let image = try? MCUbootImage(decoding: core.running) {
            slots.append(
                SMPImageSlot(image: 1, slot: 0, version: image.version.description, hash: image.hashTLV ?? [], bootable: true, confirmed: true, active: true))
        }
        if let core = state.networkCore, let secondary = core.secondary, let image = try? MCUbootImage(decoding: secondary) {
            slots.append(
                SMPImageSlot(
                    image: 1, slot: 1, version: image.version.description, hash: image.hashTLV ?? [],
                    bootable: true, pending: core.pending, confirmed: false, active: false, permanent: core.permanent))
        }
        return slots.sorted { ($0.image, $0.slot) < ($1.image, $1.slot) }
    }
}
