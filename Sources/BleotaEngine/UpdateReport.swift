import BleotaLink

/// What an update or transfer reports as it goes: step changes, progress, notes.
public enum UpdateEvent: Sendable {
    case step(UpdateStep)
    case progress(TransferProgress)
    /// Something worth telling the user (resuming at 40 %, compression chosen, …).
    case note(String)
}

/// Per-step time limits; each is configurable because devices differ wildly
/// (a bootloader that erases its whole slot before answering START needs more).
public struct StepTimeouts: Sendable, Hashable, Codable {
    /// To find and connect to the device.
    public var connect: Duration
    /// For a response to a request (HELLO, START, VERIFY, …).
    public var response: Duration
    /// For the device to come back after a reboot.
    public var reboot: Duration
    /// For VERIFY, which hashes the whole image on the device.
    public var verify: Duration
    /// Times a request is sent before giving up (a request or its answer can be lost).
    public var attempts: Int

    public init(
        connect: Duration = .seconds(10), response: Duration = .seconds(2),
        reboot: Duration = .seconds(30), verify: Duration = .seconds(30), attempts: Int = 5
    ) {
        self.connect = connect
        self.response = response
        self.reboot = reboot
        self.verify = verify
        self.attempts = attempts
    }
}

/// The summary `--json` prints after a transfer; field names are a contract.
public struct UpdateReport: Sendable, Codable, Equatable {
    public var operation: String
    public var device: String
    public var bytes: Int
    public var streamBytes: Int
    public var compressed: Bool
    /// True when the stream was a delta patch against the image the device ran (absent otherwise).
    public var delta: Bool?
    public var packetSize: Int
    /// Link time of the transfer step alone, seconds.
    public var transferSeconds: Double
    /// Link time of the whole operation, seconds.
    public var totalSeconds: Double
    /// Image bytes per second of transfer time.
    public var goodput: Double
    public var statistics: TransferStatistics
    public var stepSeconds: [String: Double]
    public var tuning: TransferTuning
    public var versionBefore: String?
    public var versionAfter: String?
    /// Filled in by the caller when it knows the link model (simulator): bytes/s the link allows.
    public var linkCapacity: Double?
    /// Filled in by the caller when the device itself is slower than its link (simulator): bytes/s it can write.
    public var deviceCapacity: Double?
    public var linkModel: String?
    /// "native" or "smp".
    public var protocolName = "native"
    /// Filled in by the caller for real links when a PHY or interval was asked for.
    public var connection: ConnectionSettings?
    /// Filled in by the caller when the link was encrypted: the level reached and how.
    public var security: LinkSecurityState?

    public init(
        operation: String, device: String, bytes: Int, streamBytes: Int, compressed: Bool, packetSize: Int,
        transferSeconds: Double, totalSeconds: Double, statistics: TransferStatistics,
        stepSeconds: [String: Double], tuning: TransferTuning
    ) {
        self.operation = operation
        self.device = device
        self.bytes = bytes
        self.streamBytes = streamBytes
        self.compressed = compressed
        self.packetSize = packetSize
        self.transferSeconds = transferSeconds
        self.totalSeconds = totalSeconds
        self.goodput = transferSeconds > 0 ? Double(bytes) / transferSeconds : 0
        self.statistics = statistics
        self.stepSeconds = stepSeconds
        self.tuning = tuning
    }
}

extension Duration {
    /// Seconds as a Double, for reports.
    public var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
