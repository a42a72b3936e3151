import BleotaEngine
import BleotaFleet
import Foundation

/// What can go wrong with a campaign's database, in one line each.
public enum CampaignError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL does not parse (the text says how to write it).
    case badAddress(String)
    /// The server could not be reached, refused the login, or a query failed.
    case database(String)
    /// The database's schema was migrated by a newer bleota.
    case schemaTooNew(found: Int, known: Int)
    case notFound(String)
    case exists(String)
    /// The image stored for the campaign does not hash to what the campaign names.
    case imageMismatch(String)
    /// Stages or a halt rule that cannot be carried out (the text says what to write).
    case badRollout(String)
    /// An operator's command that does not fit where the campaign stands (advance with every
    /// stage open, resume of one not halted, anything on an aborted one).
    case notNow(String)

    public var description: String {
        switch self {
        case .badAddress(let text), .database(let text), .imageMismatch(let text), .badRollout(let text), .notNow(let text): text
        case .schemaTooNew(let found, let known):
            "the campaign database is at schema version \(found), newer than this bleota knows (\(known)): use a newer bleota"
        case .notFound(let name): "no campaign named '\(name)' in this database: create it with bleota fleet campaign create, or list them with bleota fleet status"
        case .exists(let name): "a campaign named '\(name)' already exists: pick another --name, or follow it with bleota fleet status"
        }
    }
}

/// A campaign as `fleet campaign create` defines it: the image every device gets
/// (stored once, by its SHA-256), the devices, and how each device is tried.
public struct CampaignDefinition: Sendable {
    public var name: String
    /// The file name the image had, so workers prepare it as the same kind of file.
    public var imageName: String
    public var image: [UInt8]
    public var devices: [FleetDevice]
    public var protocolName: String?
    /// As given, to be parsed by each worker once it knows the devices' protocol.
    public var protocolOptions: ProtocolOptionText
    public var versionLabel: String?
    public var force: Bool
    /// Tries per device, counted across workers (a try whose worker died counts).
    public var attempts: Int
    /// Seconds before a device's second try; doubled for each try after.
    public var backoffSeconds: Double
    /// How long a claim lasts without renewal: a worker renews every third of it,
    /// so a worker that dies loses its devices to the others this long after.
    public var leaseSeconds: Double
    /// The stages the devices go out in and what halts the campaign.
    public var rollout: CampaignRollout
    /// `--from-version`: only devices that run one of these are updated (empty: any); the others
    /// end as ``CampaignDeviceState/State/otherVersion``.
    public var fromVersions: [String]

    public init(
        name: String, imageName: String, image: [UInt8], devices: [FleetDevice], protocolName: String? = nil,
        protocolOptions: ProtocolOptionText = [:], versionLabel: String? = nil, force: Bool = false, attempts: Int = 3,
        backoffSeconds: Double = 5, leaseSeconds: Double = 60, rollout: CampaignRollout = CampaignRollout(), fromVersions: [String] = []
    ) {
        self.fromVersions = fromVersions
        self.name = name
        self.imageName = imageName
        self.image = image
        self.devices = devices
        self.protocolName = protocolName
        self.protocolOptions = protocolOptions
        self.versionLabel = versionLabel
        self.force = force
        self.attempts = attempts
        self.backoffSeconds = backoffSeconds
        self.leaseSeconds = leaseSeconds
        self.rollout = rollout
    }
}

/// A stored campaign, without its devices.
public struct CampaignInfo: Sendable, Codable, Equatable {
    public var name: String
    public var imageName: String
    /// Lower-case hex.
    public var imageSHA256: String
    public var imageSize: Int
    public var protocolName: String?
    public var protocolOptions: ProtocolOptionText
    public var versionLabel: String?
    public var force: Bool
    public var attempts: Int
    public var backoffSeconds: Double
    public var leaseSeconds: Double
    public var createdAt: Date
    public var rollout: CampaignRollout
    /// Where the rollout stands now (as read: the database moves on).
    public var progress: RolloutProgress
    /// `--from-version` (empty: any version is updated).
    public var fromVersions: [String] = []
}

/// Where a campaign's rollout stands, as the database keeps it.
public struct RolloutProgress: Sendable, Codable, Equatable {
    /// The last stage open (0-based): devices of it and of the stages before may be claimed.
    public var openStage: Int
    public var stageOpenedAt: Date?
    /// Set when the failures reached the halt rule: no device is claimed until a resume.
    public var haltedAt: Date?
    public var haltReason: String?
    /// Failures count from here (the last resume), or from the start when nil.
    public var failuresCountedFrom: Date?
    /// Set by an abort: no device is claimed again.
    public var abortedAt: Date?

    public init(
        openStage: Int = 0, stageOpenedAt: Date? = nil, haltedAt: Date? = nil, haltReason: String? = nil,
        failuresCountedFrom: Date? = nil, abortedAt: Date? = nil
    ) {
        self.openStage = openStage
        self.stageOpenedAt = stageOpenedAt
        self.haltedAt = haltedAt
        self.haltReason = haltReason
        self.failuresCountedFrom = failuresCountedFrom
        self.abortedAt = abortedAt
    }

    public var isHalted: Bool { haltedAt != nil }
    public var isAborted: Bool { abortedAt != nil }
}

/// One device of a campaign as the database holds it.
public struct CampaignDeviceState: Sendable, Codable, Equatable {
    /// pending → running (leased by a worker) → updated | skipped | failed; a failed try
    /// that may be cured goes back to pending after its back-off.
    public enum State: String, Sendable, Codable, CaseIterable {
        case pending, running, updated, skipped, failed
        /// It runs a version the campaign is not for (`--from-version`), or cannot say which: left alone.
        case otherVersion = "other-version"
        /// No worker will touch the device again.
        public var isFinal: Bool { self != .pending && self != .running }
    }

    public var device: String
    public var label: String
    public var state: State
    /// Tries begun so far, by every worker.
    public var tries: Int
    /// The worker that holds it (running) or last held it.
    public var worker: String?
    public var versionBefore: String?
    public var versionAfter: String?
    public var seconds: Double
    public var bytes: Int
    public var resends: Int
    /// The last failure (of the last try, or why it failed for good).
    public var error: String?
    /// The step it happened in. In JSON also as `errorStep`, its name in 0.1.0, for one release.
    public var step: String?
    public var deviceState: String?
    /// The rollout stage it belongs to (0-based).
    public var stage: Int
    /// Bytes that went over the air to update it: fewer than ``bytes`` (the whole image's) when a
    /// delta patch or a compressed stream went.
    public var airBytes: Int = 0

    public init(
        device: String, label: String, state: State, tries: Int, worker: String?, versionBefore: String?, versionAfter: String?,
        seconds: Double, bytes: Int, resends: Int, error: String?, step: String?, deviceState: String?, stage: Int = 0
    ) {
        self.device = device
        self.label = label
        self.state = state
        self.tries = tries
        self.worker = worker
        self.versionBefore = versionBefore
        self.versionAfter = versionAfter
        self.seconds = seconds
        self.bytes = bytes
        self.resends = resends
        self.error = error
        self.step = step
        self.deviceState = deviceState
        self.stage = stage
    }

    /// A failure that left the device as it was (its old image, untouched), as against one that
    /// ended late or unknown: the two kinds a halt rule can count apart.
    public var failedCleanly: Bool {
        state == .failed && (deviceState == nil || deviceState == "old-image") && step != "lease"
    }

    private enum CodingKeys: String, CodingKey {
        case device, label, state, tries, worker, versionBefore, versionAfter, seconds, bytes, resends, error, step, deviceState, stage
        case airBytes
        case errorStep
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            device: try container.decode(String.self, forKey: .device), label: try container.decode(String.self, forKey: .label),
            state: try container.decode(State.self, forKey: .state), tries: try container.decode(Int.self, forKey: .tries),
            worker: try container.decodeIfPresent(String.self, forKey: .worker),
            versionBefore: try container.decodeIfPresent(String.self, forKey: .versionBefore),
            versionAfter: try container.decodeIfPresent(String.self, forKey: .versionAfter),
            seconds: try container.decode(Double.self, forKey: .seconds), bytes: try container.decode(Int.self, forKey: .bytes),
            resends: try container.decode(Int.self, forKey: .resends), error: try container.decodeIfPresent(String.self, forKey: .error),
            step: try container.decodeIfPresent(String.self, forKey: .step) ?? container.decodeIfPresent(String.self, forKey: .errorStep),
            deviceState: try container.decodeIfPresent(String.self, forKey: .deviceState),
            stage: try container.decodeIfPresent(Int.self, forKey: .stage) ?? 0)
        airBytes = try container.decodeIfPresent(Int.self, forKey: .airBytes) ?? bytes
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(device, forKey: .device)
        try container.encode(label, forKey: .label)
        try container.encode(state, forKey: .state)
        try container.encode(tries, forKey: .tries)
        try container.encodeIfPresent(worker, forKey: .worker)
        try container.encodeIfPresent(versionBefore, forKey: .versionBefore)
        try container.encodeIfPresent(versionAfter, forKey: .versionAfter)
        try container.encode(seconds, forKey: .seconds)
        try container.encode(bytes, forKey: .bytes)
        try container.encode(resends, forKey: .resends)
        try container.encodeIfPresent(error, forKey: .error)
        try container.encodeIfPresent(step, forKey: .step)
        // 0.1.0's name, kept one release for scripts that read it.
        try container.encodeIfPresent(step, forKey: .errorStep)
        try container.encodeIfPresent(deviceState, forKey: .deviceState)
        try container.encode(stage, forKey: .stage)
        try container.encode(airBytes, forKey: .airBytes)
    }
}

/// A campaign and where each of its devices stands.
public struct CampaignStatus: Sendable, Codable, Equatable {
    public var campaign: CampaignInfo
    public var devices: [CampaignDeviceState]

    public func count(_ state: CampaignDeviceState.State) -> Int { devices.count { $0.state == state } }

    /// Every device has reached updated, skipped or failed.
    public var isFinished: Bool { devices.allSatisfy(\.state.isFinal) }

    /// "200 devices: 180 updated, 5 already current, 3 failed, 10 running, 2 pending".
    public var sentence: String {
        var parts: [String] = []
        for (state, words) in [
            (CampaignDeviceState.State.updated, "updated"), (.skipped, "already current"), (.failed, "failed"),
            (.otherVersion, "another version's (left alone)"), (.running, "running"), (.pending, "pending"),
        ] where count(state) > 0 {
            parts.append("\(count(state)) \(words)")
        }
        return "\(devices.count) devices: " + (parts.isEmpty ? "none" : parts.joined(separator: ", "))
    }

    /// Devices that run the target, or were left alone as the campaign asked (`--from-version`).
    public var endedAsAsked: Int { count(.updated) + count(.skipped) + count(.otherVersion) }

    /// What went over the air to the updated devices against what their whole images are.
    public var air: AirBytes {
        let updated = devices.filter { $0.state == .updated }
        return AirBytes(
            sent: updated.reduce(0) { $0 + $1.airBytes }, whole: updated.reduce(0) { $0 + $1.bytes },
            patched: updated.count { $0.airBytes < $0.bytes })
    }
}

/// The bytes a campaign's updated devices took over the air, against their whole images (`--from-version`
/// cohorts are sent delta patches where their protocol takes one).
public struct AirBytes: Sendable, Equatable {
    /// Bytes of the streams sent: patches, compressed or whole images.
    public var sent: Int
    /// Bytes of the whole images those devices now run.
    public var whole: Int
    /// Updates whose stream was smaller than the image (a delta patch, or compressed).
    public var patched: Int
}

/// One stage of a campaign as its devices stand.
public struct StageSummary: Sendable, Codable, Equatable {
    public var name: String
    /// Devices of this stage alone.
    public var devices: Int
    public var finished: Int
    public var failed: Int
    /// Whether its devices may be claimed.
    public var open: Bool
}

extension CampaignStatus {
    /// Every stage, in order, with its devices' counts.
    public var stages: [StageSummary] {
        campaign.rollout.effectiveStages.enumerated().map { index, stage in
            let mine = devices.filter { $0.stage == index }
            return StageSummary(
                name: stage.name, devices: mine.count, finished: mine.count(where: \.state.isFinal),
                failed: mine.count { $0.state == .failed }, open: index <= campaign.progress.openStage)
        }
    }

    /// Where the rollout stands, in a line: "stage 2 of 4 (5%): 38 of 40 finished, 2 failed; …".
    public var rolloutSentence: String {
        let progress = campaign.progress
        if let aborted = progress.abortedAt { return "aborted at \(aborted.formatted(.iso8601)): no device is claimed again" }
        if let halted = progress.haltedAt {
            return "halted at \(halted.formatted(.iso8601)): \(progress.haltReason ?? "the halt rule was reached"); "
                + "resume with bleota fleet campaign resume --name \(campaign.name), or abort"
        }
        var limits: [String] = []
        if let rate = campaign.rollout.rate { limits.append("at most \(rate.text)") }
        if let window = campaign.rollout.window { limits.append("claims only between \(window.text)") }
        let limitText = limits.isEmpty ? "" : "; " + limits.joined(separator: ", ")
        let all = stages
        guard all.count > 1 else { return limits.isEmpty ? "" : String(limitText.dropFirst(2)) }
        let index = min(progress.openStage, all.count - 1)
        let stage = all[index]
        var text = "stage \(index + 1) of \(all.count) (\(stage.name)): \(stage.finished) of \(stage.devices) finished, \(stage.failed) failed"
        if index + 1 < all.count {
            let next = all[index + 1]
            let stageDone = all.prefix(index + 1).allSatisfy { $0.finished == $0.devices }
            switch campaign.rollout.stageWait {
            case .operatorAdvance:
                text += stageDone ? "; \(next.name) waits for bleota fleet campaign advance" : "; then \(next.name), by bleota fleet campaign advance"
            case .seconds(let wait):
                text += "; \(next.name) opens \(Int(wait.rounded())) s after this stage finishes"
            case .none:
                text += "; \(next.name) opens when this stage finishes"
            }
        }
        return text + limitText
    }
}

/// A device a worker has claimed: it holds the lease until it records the try's end.
public struct ClaimedDevice: Sendable, Equatable {
    public var device: FleetDevice
    /// 1 for the device's first try, counted across workers.
    public var tryNumber: Int
    /// The row of `bleota.tries` that records this try.
    public var tryID: Int64
    /// The rollout stage the device belongs to (0-based).
    public var stage: Int = 0
}

/// How one try ended, as a worker records it.
public enum TryEnding: Sendable, Equatable {
    /// `bytes`: the whole image's; `airBytes`: what went over the air (a patch's, when one went).
    case updated(versionBefore: String?, versionAfter: String?, seconds: Double, bytes: Int, resends: Int, airBytes: Int)
    /// The device already ran the target; nothing was sent.
    case alreadyCurrent(version: String, seconds: Double)
    /// It runs a version the campaign is not for (`--from-version`; nil: it cannot say): nothing was sent.
    case otherVersion(version: String?, reason: String, seconds: Double)
    /// `retryAfter` nil: the device has failed for good (no tries left, or a failure no retry cures).
    case failed(error: String, step: String, deviceState: String?, seconds: Double, bytes: Int, resends: Int, retryAfter: Double?)
}
