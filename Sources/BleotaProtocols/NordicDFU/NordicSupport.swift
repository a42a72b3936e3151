import BleotaCodec
import BleotaEngine
import BleotaLink

// What the Secure DFU and legacy DFU halves share.

/// Waits until the device drops `link` (it resets after a jump or an
/// activation), at most `timeout`; then closes it from this side too.
func awaitDisconnect(_ link: any Link, clock: any BleotaClock, timeout: Duration) async {
    let deadline = clock.now + timeout
    // Whatever still arrives is skipped; a timeout or the drop ends the wait.
    while deadline > clock.now, (try? await link.receive(within: deadline - clock.now, clock: clock)) != nil {}
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
    TransferError(
        .unsupported, step: .load,
        "\(bootloaders) take only real images with their init packets: give the package to measure with (bleota tune --image X.zip)")
}

/// What a simulated Nordic device runs, for `sim serve`'s and `serve`'s logs: the
/// version and the application's SHA-256 (a Nordic device cannot read its image back,
/// so scripts compare this with the package's).
func nordicRunningVersion(inBootloader: Bool, version: UInt32, application: [UInt8]?) -> String {
    guard !inBootloader, let application else { return "bootloader" }
    return "\(version) (application SHA-256 \(SHA256Digest.hash(application).hexString))"
}

extension ProtocolOption where Value == UInt16? {
    /// A Nordic SoftDevice's firmware ID: 16 bits, or `none` for no SoftDevice (nil).
    static func softDevice(_ key: String, meaning: String, default value: UInt16) -> Self {
        Self(key, meaning: meaning, default: value) { text throws(ProtocolOptionRefusal) in
            if text.lowercased() == "none" { return nil }
            return try ProtocolOption<UInt16>.parseNumber(text)
        }
    }
}
