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

    /// `boot_swap_type()`: what MCUboot will do at the next boot.
    package enum SwapType: Sendable, Equatable {
        case none, test, permanent
        /// Running a test image that was not confirmed: the next boot swaps the old one back.
        case revert
    }

    /// An upload in progress (RAM on a real device).
    package struct Upload: Sendable {
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

    package init(primary: [UInt8], slotSize: Int = 512 * 1024, decompresses: Bool = false) {
        state = Mutex(State(primary: primary, slotSize: slotSize))
        self.decompresses = decompresses
    }

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
            switch state.swapType {
            case .test, .permanent:
                let permanent = state.pendingSwap == .permanent
                state.pendingSwap = nil
                guard let secondary = state.secondary, Self.verifies(secondary) else {
                    // boot_validate_slot: a pending image that fails validation is scrambled.
                    state.secondary = nil
                    return "the secondary image does not verify: erased it, kept the primary"
                }
                state.secondary = state.primary
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
        if let image = try? MCUbootImage(decoding: state.primary) {
            slots.append(
                SMPImageSlot(
                    slot: 0, version: image.version.description, hash: image.hashTLV ?? [],
                    bootable: true, confirmed: type != .revert, active: true))
        }
        if let secondary = state.secondary, let image = try? MCUbootImage(decoding: secondary) {
            slots.append(
                SMPImageSlot(
                    slot: 1, version: image.version.description, hash: image.hashTLV ?? [],
                    bootable: true, pending: type == .test || type == .permanent,
                    confirmed: type == .revert, active: false, permanent: type == .permanent))
        }
        return slots
    }
}
