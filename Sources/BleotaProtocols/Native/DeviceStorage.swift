import BleotaCodec
import BleotaEngine
import Synchronization

/// What a device keeps in flash: survives reboots and power loss.
///
/// Two image slots (active, staging) like every serious bootloader, so a failed
/// or interrupted update never touches the running image; the staging slot's
/// received byte ranges, keyed by the image hash, so a later connection
/// resumes; and a small file store. The simulator's devices and `bleota serve`
/// keep one of these per device.
package final class DeviceStorage: Sendable {
    package struct Staging: Sendable {
        package var start: NativeMessage.Start
        package var bytes: [UInt8]
        package var held: RangeSet
        /// Pages a test transfer has "erased": it is paced like a firmware write but writes nothing.
        package var testPages: Set<Int> = []
        /// Set only by a successful verify of exactly these bytes; cleared by any write.
        package var verified = false
    }

    package struct State: Sendable {
        package var activeImage: [UInt8]
        package var activeVersion: String
        package var slotSize: Int
        /// Partial or complete uploads, one per target (firmware, file), kept for resume.
        package var staging: [NativeMessage.Target: Staging] = [:]
        package var files: [String: [UInt8]] = [:]
        /// Set by ENTER_BOOTLOADER so the next boot stays in the bootloader.
        package var bootToBootloader = false
        /// Flash pages of the staging slot erased since its transfer began.
        package var erasedPages = Set<Int>()
        package var activations = 0
    }

    private let state: Mutex<State>

    package init(activeImage: [UInt8] = [], activeVersion: String = "1.0.0", slotSize: Int = 1 << 20) {
        state = Mutex(State(activeImage: activeImage, activeVersion: activeVersion, slotSize: slotSize))
    }

    package func withState<T: Sendable>(_ body: (inout State) throws -> T) rethrows -> T {
        try state.withLock { try body(&$0) }
    }

    package var snapshot: State { state.withLock { $0 } }
}
