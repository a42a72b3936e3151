import BleotaEngine

/// How one device's part of a fleet update ended.
public struct DeviceResult: Sendable, Codable, Equatable {
    public enum Outcome: String, Sendable, Codable {
        /// The update ran and the device runs the new image.
        case updated
        /// The device already ran the target version (without `--force`).
        case skipped
        /// Every try failed; `error` says where and why, `deviceState` what the device runs.
        case failed
        /// The fleet was stopped (Ctrl-C) before this device was started.
        case notStarted = "not-started"
    }

    public var device: String
    public var label: String
    public var adapter: String?
    public var outcome: Outcome
    public var versionBefore: String?
    public var versionAfter: String?
    public var seconds: Double
    public var bytes: Int
    public var resends: Int
    public var attempts: Int
    /// A failure's keys are those of every command's failure (README, "JSON and units"): `error`,
    /// `code`, `step`, `deviceState`. The run's exit status is the fleet's.
    public var error: String?
    /// The failure's kind (``/BleotaEngine/TransferError/Code``), as `code` in a command's failure.
    public var code: String?
    /// The step the failure happened in. In JSON also as `errorStep`, its name in 0.1.0, for one release.
    public var step: String?
    /// After a failure: what the device runs (old-image, in-bootloader, unknown, …), when known.
    public var deviceState: String?

    public init(
        device: FleetDevice, adapter: String?, outcome: Outcome, versionBefore: String? = nil, versionAfter: String? = nil,
        seconds: Double = 0, bytes: Int = 0, resends: Int = 0, attempts: Int = 0, error: TransferError? = nil
    ) {
        self.device = device.address
        label = device.label
        self.adapter = adapter
        self.outcome = outcome
        self.versionBefore = versionBefore
        self.versionAfter = versionAfter
        self.seconds = seconds
        self.bytes = bytes
        self.resends = resends
        self.attempts = attempts
        self.error = error?.message
        code = error?.code.rawValue
        step = error?.step.rawValue
        deviceState = error?.outcome?.name
    }

    private enum CodingKeys: String, CodingKey {
        case device, label, adapter, outcome, versionBefore, versionAfter, seconds, bytes, resends, attempts
        case error, code, step, deviceState
        case errorStep
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        device = try container.decode(String.self, forKey: .device)
        label = try container.decode(String.self, forKey: .label)
        adapter = try container.decodeIfPresent(String.self, forKey: .adapter)
        outcome = try container.decode(Outcome.self, forKey: .outcome)
        versionBefore = try container.decodeIfPresent(String.self, forKey: .versionBefore)
        versionAfter = try container.decodeIfPresent(String.self, forKey: .versionAfter)
        seconds = try container.decode(Double.self, forKey: .seconds)
        bytes = try container.decode(Int.self, forKey: .bytes)
        resends = try container.decode(Int.self, forKey: .resends)
        attempts = try container.decode(Int.self, forKey: .attempts)
        error = try container.decodeIfPresent(String.self, forKey: .error)
        code = try container.decodeIfPresent(String.self, forKey: .code)
        step = try container.decodeIfPresent(String.self, forKey: .step) ?? container.decodeIfPresent(String.self, forKey: .errorStep)
        deviceState = try container.decodeIfPresent(String.self, forKey: .deviceState)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(device, forKey: .device)
        try container.encode(label, forKey: .label)
        try container.encodeIfPresent(adapter, forKey: .adapter)
        try container.encode(outcome, forKey: .outcome)
        try container.encodeIfPresent(versionBefore, forKey: .versionBefore)
        try container.encodeIfPresent(versionAfter, forKey: .versionAfter)
        try container.encode(seconds, forKey: .seconds)
        try container.encode(bytes, forKey: .bytes)
        try container.encode(resends, forKey: .resends)
        try container.encode(attempts, forKey: .attempts)
        try container.encodeIfPresent(error, forKey: .error)
        try container.encodeIfPresent(code, forKey: .code)
        try container.encodeIfPresent(step, forKey: .step)
        // 0.1.0's name, kept one release for scripts that read it.
        try container.encodeIfPresent(step, forKey: .errorStep)
        try container.encodeIfPresent(deviceState, forKey: .deviceState)
    }

    /// Updated or already current: the device runs the target.
    public var succeeded: Bool { outcome == .updated || outcome == .skipped }
}

/// What a whole fleet run came to.
public struct FleetSummary: Sendable, Codable, Equatable {
    public var devices: Int
    public var updated: Int
    public var skipped: Int
    public var failed: Int
    public var notStarted: Int
    public var seconds: Double
    /// Image bytes delivered to devices that were updated.
    public var bytes: Int
    public var interrupted: Bool

    public init(results: [DeviceResult], seconds: Double, interrupted: Bool) {
        devices = results.count
        updated = results.count { $0.outcome == .updated }
        skipped = results.count { $0.outcome == .skipped }
        failed = results.count { $0.outcome == .failed }
        notStarted = results.count { $0.outcome == .notStarted }
        self.seconds = seconds
        bytes = results.filter { $0.outcome == .updated }.reduce(0) { $0 + $1.bytes }
        self.interrupted = interrupted
    }

    /// Every device runs the target.
    public var allSucceeded: Bool { updated + skipped == devices }
    /// Not one device runs the target.
    public var noneSucceeded: Bool { updated + skipped == 0 }

    /// "98 of 100 devices run the target (95 updated, 3 already did), 2 failed, in 412 s".
    public var sentence: String {
        var parts = ["\(updated + skipped) of \(devices) devices run the target (\(updated) updated, \(skipped) already did)"]
        if failed > 0 { parts.append("\(failed) failed") }
        if notStarted > 0 { parts.append("\(notStarted) not started (stopped)") }
        return parts.joined(separator: ", ") + ", in \(Int(seconds.rounded())) s"
    }
}
