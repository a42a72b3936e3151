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
        /// The device runs a version the update is not for (`--from-version`): left alone, on purpose.
        case otherVersion = "other-version"
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
    /// Bytes that went over the air for the update (a delta patch or a compressed stream is fewer
    /// than ``bytes``, the whole image's); nil when nothing was sent.
    public var airBytes: Int?
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
        case device, label, adapter, outcome, versionBefore, versionAfter, seconds, bytes, resends, attempts, airBytes
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
        airBytes = try container.decodeIfPresent(Int.self, forKey: .airBytes)
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
        try container.encodeIfPresent(airBytes, forKey: .airBytes)
        try container.encodeIfPresent(error, forKey: .error)
        try container.encodeIfPresent(code, forKey: .code)
        try container.encodeIfPresent(step, forKey: .step)
        // 0.1.0's name, kept one release for scripts that read it.
        try container.encodeIfPresent(step, forKey: .errorStep)
        try container.encodeIfPresent(deviceState, forKey: .deviceState)
    }

    /// Updated or already current: the device runs the target.
    public var succeeded: Bool { outcome == .updated || outcome == .skipped }
    /// Ended as it should have: it runs the target, or another version's device was left alone.
    public var endedAsAsked: Bool { succeeded || outcome == .otherVersion }
}

/// What a whole fleet run came to.
public struct FleetSummary: Sendable, Codable, Equatable {
    public var devices: Int
    public var updated: Int
    public var skipped: Int
    public var failed: Int
    public var notStarted: Int
    /// Devices left alone because they run a version the update is not for (`--from-version`).
    public var otherVersion: Int
    public var seconds: Double
    /// Image bytes delivered to devices that were updated.
    public var bytes: Int
    /// Bytes that went over the air to them: fewer than ``bytes`` where patches or compression went.
    public var airBytes: Int
    public var interrupted: Bool

    public init(results: [DeviceResult], seconds: Double, interrupted: Bool) {
        devices = results.count
        updated = results.count { $0.outcome == .updated }
        skipped = results.count { $0.outcome == .skipped }
        failed = results.count { $0.outcome == .failed }
        notStarted = results.count { $0.outcome == .notStarted }
        otherVersion = results.count { $0.outcome == .otherVersion }
        self.seconds = seconds
        let updates = results.filter { $0.outcome == .updated }
        bytes = updates.reduce(0) { $0 + $1.bytes }
        airBytes = updates.reduce(0) { $0 + ($1.airBytes ?? $1.bytes) }
        self.interrupted = interrupted
    }

    /// Every device runs the target, but those another version's (`--from-version`) left alone.
    public var allSucceeded: Bool { updated + skipped + otherVersion == devices }
    /// Not one device runs the target (of those the update was for).
    public var noneSucceeded: Bool { updated + skipped == 0 && otherVersion < devices }

    /// "98 of 100 devices run the target (95 updated, 3 already did), 2 failed, in 412 s".
    public var sentence: String {
        var parts = ["\(updated + skipped) of \(devices) devices run the target (\(updated) updated, \(skipped) already did)"]
        if failed > 0 { parts.append("\(failed) failed") }
        if otherVersion > 0 { parts.append("\(otherVersion) run another version (not --from-version), left alone") }
        if notStarted > 0 { parts.append("\(notStarted) not started (stopped)") }
        var text = parts.joined(separator: ", ") + ", in \(Int(seconds.rounded())) s"
        if let air = Self.airSentence(air: airBytes, whole: bytes) { text += "; " + air }
        return text
    }

    /// "412 KiB over the air for 2.9 MiB of whole images (14 %)", when less went than whole images would be; nil otherwise.
    public static func airSentence(air: Int, whole: Int) -> String? {
        guard whole > 0, air < whole else { return nil }
        let share = Double(air) * 100 / Double(whole)
        return "\(ByteCount.text(air)) over the air for \(ByteCount.text(whole)) of whole images (\(share < 1 ? "<1" : String(Int(share.rounded()))) %)"
    }
}
