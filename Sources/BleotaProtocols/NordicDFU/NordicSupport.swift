import BleotaCodec
import BleotaEngine
import BleotaLink

// What the Secure DFU and legacy DFU halves share.

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

/// An update's steps on a Nordic bootloader, which validates and activates each part at the end
/// of its transfer (Secure DFU's Execute of the last object, legacy DFU's Validate and Activate):
/// the engine's verify and activate steps are inside the transfer and show no step of their own,
/// and the device, which never says what it runs, is confirmed by its application coming back.
protocol NordicLifecycleSteps: RecordedLifecycleSteps {
    /// False for a test transfer, which activates nothing and so has nothing to confirm.
    var activates: Bool { get }
}

extension NordicLifecycleSteps {
    mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError) {
        switch action {
        case .transfer: try await recorder.enterTransfer(closing: link)
        case .verify, .activate, .fail, .probe, .finish: break
        case .reconnect(expecting: .application), .confirm: if activates { recorder.enter(step) }
        default: recorder.enter(step)
        }
    }

    /// The end of the last part activated the image.
    mutating func activate() async throws(TransferError) -> Bool { true }

    mutating func runningVersion() async throws(TransferError) -> String? { nil }

}
