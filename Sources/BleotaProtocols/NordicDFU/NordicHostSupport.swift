import BleotaEngine
import BleotaLink

// What the Secure DFU and legacy DFU host halves share.

/// Waits until the device drops `link` (it resets after a jump or an
/// activation), at most `timeout`; then closes it from this side too.
func awaitDisconnect(_ link: any Link, clock: any BleotaClock, timeout: Duration) async {
    let deadline = clock.now + timeout
    while deadline > clock.now {
        do {
            _ = try await withDeadline(deadline - clock.now, clock: clock) { try await link.receive() }
        } catch {
            break
        }
    }
    await link.close()
}

extension PreparedImage {
    /// The package's last part alone (its application): what `tune` measures a Nordic bootloader with.
    func lastPartAlone() throws(TransferError) -> PreparedImage {
        guard let last = parts.last else { throw TransferError(.badInput, step: .load, "the package has no parts") }
        return PreparedImage(parts: [last], version: version, summary: summary)
    }
}

/// Why a Nordic bootloader cannot be measured with test bytes.
func realImageRequired(_ bootloaders: String) -> TransferError {
    TransferError(.unsupported, step: .load,
                  "\(bootloaders) take only real images with their init packets: give the package to measure with (bleota tune --image X.zip)")
}
