import ArgumentParser
import BleotaCampaign
import BleotaCodec
import BleotaEngine
import BleotaFleet
import BleotaLink
import BleotaSystem
import Foundation
import Logging

/// Where a campaign is: its database and its name.
struct CampaignLocation: ParsableArguments {
    @Option(
        name: .customLong("campaign"),
        help: ArgumentHelp("The campaign database: postgresql://USER@HOST:PORT/DATABASE, or postgresql:///DATABASE?host=/socket/dir (default: $BLEOTA_CAMPAIGN).", valueName: "URL")
    )
    var url: String?

    @Option(name: .long, help: "The campaign's name (default: the only campaign in the database; create: 'default').")
    var name: String?

    func address() throws -> CampaignAddress {
        guard let text = url ?? ProcessInfo.processInfo.environment["BLEOTA_CAMPAIGN"] else {
            throw CommandFailure(.usage, "no campaign database: give --campaign postgresql://… or set BLEOTA_CAMPAIGN")
        }
        do { return try CampaignAddress(parsing: text) } catch { throw error.commandFailure }
    }
}

extension CampaignError {
    var commandFailure: CommandFailure {
        switch self {
        case .badAddress, .exists, .notFound, .badRollout: CommandFailure(.usage, description)
        case .notNow: CommandFailure(.failure, description)
        case .database, .schemaTooNew, .imageMismatch: CommandFailure(.campaignDatabase, description)
        }
    }
}

/// `bleota fleet campaign …`
struct CampaignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "Define a campaign in PostgreSQL that workers on many hosts carry out together.",
        subcommands: [CampaignCreateCommand.self, CampaignAdvanceCommand.self, CampaignResumeCommand.self, CampaignAbortCommand.self])
}

/// `bleota fleet campaign create IMAGE --devices FILE --campaign URL --name NAME`
struct CampaignCreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Store an image and its devices as a campaign; `bleota fleet worker` on each host then carries it out.",
        discussion: """
            The database's bleota schema is created or migrated first (docs/fleet.md, "Fleet campaigns across hosts"). The image is \
            stored once, by its SHA-256; every device starts pending. Devices must be reachable from the workers' \
            hosts (ble://, udp://, serial://): a sim:// device lives inside one process (serve simulated devices to \
            every worker with bleota sim serve --devices N).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var location: CampaignLocation
    @OptionGroup var protocolOption: ProtocolChoice
    @OptionGroup var update: FleetUpdateOptions

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The devices: one address a line, CSV with a 'device' column (and adapter, protocol, label, passkey, bonded, option:KEY), or a JSON array.", valueName: "FILE"))
    var devices: String

    @Option(
        name: .customLong("lease"),
        help: "How long a worker's claim on a device lasts unless renewed, in seconds or with a unit (5…3600 s, default 60 s); a dead worker's devices go to others after it.",
        transform: TimeArgument.parse)
    var leaseTime = TimeArgument(seconds: 60)
    var lease: Double { leaseTime.seconds() }

    @OptionGroup var rolloutOptions: RolloutOptions

    @Argument(help: "The image every device gets.") var image: String

    func validate() throws {
        _ = try leaseTime.checkedSeconds(option: "--lease", range: 5...3600)
        _ = try rolloutOptions.rollout(seed: 0)
    }
}

/// How a campaign goes out: `--stage`, `--stage-wait`, `--seed` and the halt rule.
struct RolloutOptions: ParsableArguments {
    @Option(
        name: .customLong("stage"),
        help: ArgumentHelp(
            "A stage of the rollout, in order (repeatable): NAME=SIZE or SIZE, a device count or a share of the list, counting the stages before it (canary=10, 5%, 25%, 100%); the last reaches every device. Devices are chosen at random from --seed.",
            valueName: "STAGE"))
    var stages: [String] = []

    @Option(
        name: .customLong("stage-wait"),
        help: ArgumentHelp(
            "When the next stage opens after one finishes: a time (30m, 2h; default 0: at once), or 'manual' for bleota fleet campaign advance.",
            valueName: "TIME|manual"))
    var stageWait: String?

    @Option(
        name: .long,
        help: ArgumentHelp("What the stages' choice of devices is drawn from (default: a random seed, printed and stored with the campaign).", valueName: "N"))
    var seed: UInt64?

    @Option(
        name: .customLong("halt-when-failed"),
        help: ArgumentHelp("Stop claiming devices on every host once this share of the finished devices has failed (5%).", valueName: "SHARE"))
    var haltWhenFailed: String?

    @Option(name: .customLong("halt-after"), help: ArgumentHelp("Finished devices before --halt-when-failed applies (default 1).", valueName: "N"))
    var haltAfter: Int?

    @Option(
        name: .customLong("halt-on"),
        help: ArgumentHelp("Which failures --halt-when-failed counts: any, clean (old image, untouched) or late (late or unknown).", valueName: "KIND"))
    var haltOn: String?

    @Option(
        name: .long,
        help: ArgumentHelp("Devices claimed at most per minute or hour, by every worker together (20/min, 100/h).", valueName: "N/min|N/h"))
    var rate: String?

    @Option(
        name: .long,
        help: ArgumentHelp("Claim devices only between these times of day (02:00-05:00; 22:00-02:00 runs past midnight), in --time-zone.", valueName: "HH:MM-HH:MM"))
    var window: String?

    @Option(
        name: .customLong("time-zone"),
        help: ArgumentHelp("The time zone --window is read in, stored with the campaign (default: this host's, $TZ).", valueName: "ZONE"))
    var timeZone: String?

    /// The rollout these options describe; a one-line error for any that cannot be carried out.
    func rollout(seed fallback: UInt64) throws -> CampaignRollout {
        do throws(CampaignError) {
            let stageList = try stages.map { (text) throws(CampaignError) in try CampaignRollout.Stage(parsing: text) }
            var wait = CampaignRollout.StageWait.none
            if let stageWait {
                if stageWait == "manual" {
                    wait = .operatorAdvance
                } else {
                    guard let time = TimeArgument(argument: stageWait) else {
                        throw .badRollout("--stage-wait '\(stageWait)' is neither a time nor 'manual': write 30m, 2h or manual")
                    }
                    wait = time.seconds() > 0 ? .seconds(time.seconds()) : .none
                }
                if stageList.count < 2 { throw .badRollout("--stage-wait needs two or more --stage: there is no stage after the first to wait for") }
            }
            var halt: CampaignRollout.HaltRule?
            if let haltWhenFailed {
                var kind = CampaignRollout.FailureKind.any
                if let haltOn {
                    guard let named = CampaignRollout.FailureKind(rawValue: haltOn) else {
                        throw .badRollout("--halt-on '\(haltOn)' is not a kind of failure: write any, clean or late")
                    }
                    kind = named
                }
                if let haltAfter, haltAfter < 1 { throw .badRollout("--halt-after \(haltAfter) is below 1: give the finished devices to wait for, 1 or more") }
                halt = CampaignRollout.HaltRule(failedShare: try CampaignRollout.HaltRule.share(parsing: haltWhenFailed), after: haltAfter ?? 1, counting: kind)
            } else if haltAfter != nil || haltOn != nil {
                throw .badRollout("--halt-after and --halt-on qualify --halt-when-failed: give it too (--halt-when-failed 5%)")
            }
            let claimRate = try rate.map { (text) throws(CampaignError) in try CampaignRollout.ClaimRate(parsing: text) }
            var claimWindow: CampaignRollout.ClaimWindow?
            if let window {
                let zone = timeZone ?? TimeZone.current.identifier
                guard TimeZone(identifier: zone) != nil else {
                    throw .badRollout("--time-zone '\(zone)' is not a time zone: give an IANA name, as Europe/Berlin or UTC")
                }
                claimWindow = try CampaignRollout.ClaimWindow(parsing: window, zone: zone)
            } else if timeZone != nil {
                throw .badRollout("--time-zone says how --window is read: give --window too (--window 02:00-05:00)")
            }
            return CampaignRollout(stages: stageList, stageWait: wait, seed: seed ?? fallback, halt: halt, rate: claimRate, window: claimWindow)
        } catch {
            throw ValidationError(error.description)
        }
    }
}

/// `bleota fleet campaign advance`
struct CampaignAdvanceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "advance",
        abstract: "Open a campaign's next stage now, whether or not the stages open so far have finished.",
        discussion: """
            For stages that wait for an operator (--stage-wait manual), or to open one before its wait is over. \
            Two operators advancing at once open one stage: the second is told it was opened already (exit 1). \
            Exit status: 0 opened, 1 not now (every stage open, halted, aborted, or opened by another), 2 usage, 12 the database failed.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var location: CampaignLocation

    @Option(
        name: .customLong("from-stage"),
        help: ArgumentHelp("The stage (1, 2, …) you saw open: nothing changes if another has opened the next already (default: the one open now).", valueName: "N"))
    var fromStage: Int?

    func validate() throws {
        if let fromStage, fromStage < 1 { throw ValidationError("--from-stage \(fromStage) is below 1: stages count from 1") }
    }
}

/// `bleota fleet campaign resume`
struct CampaignResumeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Let a halted campaign go on: claims start again, and failures count afresh from now.",
        discussion: "Exit status: 0 resumed, 1 not halted (or aborted), 2 usage, 12 the database failed.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var location: CampaignLocation
}

/// `bleota fleet campaign abort`
struct CampaignAbortCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abort",
        abstract: "Stop a campaign for good: no device is claimed again; updates under way finish and are recorded.",
        discussion: "Workers end once their running updates are recorded. Exit status: 0 aborted, 1 aborted already, 2 usage, 12 the database failed.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var location: CampaignLocation
}

/// `bleota fleet worker --campaign URL`: this host's part of a campaign.
struct FleetWorkerCommand: AsyncParsableCommand, StreamsJSONLines {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Carry out a campaign with this host's adapters, beside workers on other hosts, until every device is done.",
        discussion: """
            The worker claims pending devices (SELECT … FOR UPDATE SKIP LOCKED: never one another worker holds), \
            updates them like fleet flash, renews its lease on each every third of --lease, and writes each \
            result back. A worker that dies loses its devices to the others when their leases run out; the lost \
            try counts as one of the device's tries, and a device found already running the image (its update \
            ended after the activation) is confirmed, not updated again. It ends when every device of the \
            campaign is updated, skipped or failed. Ctrl-C stops claiming and lets running updates finish. \
            Exit status: 0 when every device runs the image, 10 some do, 11 none does, 12 the database failed.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var location: CampaignLocation
    @OptionGroup var runOptions: FleetRunOptions

    @Option(
        name: .customLong("adapter"), help: ArgumentHelp("An adapter of this host to use (repeatable; default hci0; for udp:// and serial:// devices any name).", valueName: "NAME")
    )
    var adapters: [String] = []

    @Option(name: .customLong("worker-name"), help: "This worker's name in the campaign (default HOST:PID); unique among its workers.")
    var workerName: String?

    @Option(
        name: .customLong("poll"), help: "Time between looks for claimable devices while none is, in seconds or with a unit (500ms; 0.1…60 s, default 2 s).",
        transform: TimeArgument.parse)
    var pollTime = TimeArgument(seconds: 2)
    var poll: Double { pollTime.seconds() }

    @OptionGroup var imageStoreOption: ImageStoreOption

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Serve this worker's counters for Prometheus at http://HOST:PORT/metrics (127.0.0.1:9464; port 0 picks one, printed).",
            valueName: "HOST:PORT"))
    var metrics: String?

    /// `--metrics` as host and port.
    var metricsEndpoint: (host: String, port: UInt16)? {
        get throws {
            guard let metrics else { return nil }
            let host: Substring
            let port: Substring
            if metrics.hasPrefix("["), let close = metrics.firstIndex(of: "]") {
                host = metrics[metrics.index(after: metrics.startIndex)..<close]
                port = metrics[metrics.index(after: close)...].drop { $0 == ":" }
            } else if let colon = metrics.lastIndex(of: ":") {
                host = metrics[..<colon]
                port = metrics[metrics.index(after: colon)...]
            } else {
                throw ValidationError("--metrics '\(metrics)' is not HOST:PORT: write 127.0.0.1:9464 (or [::1]:9464)")
            }
            guard !host.isEmpty, let number = UInt16(port) else {
                throw ValidationError("--metrics '\(metrics)' is not HOST:PORT: write 127.0.0.1:9464 (or [::1]:9464)")
            }
            return (String(host), number)
        }
    }

    func validate() throws {
        _ = try metricsEndpoint
        _ = try pollTime.checkedSeconds(option: "--poll", range: 0.1...60)
        if Set(adapters).count != adapters.count { throw ValidationError("--adapter names an adapter twice: give each once") }
        if let workerName, workerName.isEmpty { throw ValidationError("--worker-name is empty: give a name, or leave it out for HOST:PID") }
    }
}

/// `bleota fleet status --campaign URL`
struct FleetStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Print a campaign: every device's state, tries, worker, versions and last error.",
        discussion: """
            With --json the campaign, its stages, its devices and (with --tries) every try as one JSON document. With --watch the \
            view is redrawn every --interval (on a terminal in place; --json: one document a line, with the rate and ETA) until every \
            device is done or the campaign is aborted; the rate is devices finished a minute over the last minute of looks.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var location: CampaignLocation

    @Flag(name: .long, help: "Also list every try (worker, start, end, outcome).")
    var tries = false

    @Flag(
        name: .long,
        help: "Redraw the status every --interval until the campaign is done or aborted: stage, counts, rate and ETA, halt reason (--json: one document a line).")
    var watch = false

    @Option(
        name: .long, help: "Time between redraws with --watch, in seconds or with a unit (0.5…3600 s, default 2 s).",
        transform: TimeArgument.parse)
    var interval = TimeArgument(seconds: 2)

    func validate() throws {
        _ = try interval.checkedSeconds(option: "--interval", range: 0.5...3600)
        if tries && watch { throw ValidationError("--tries lists every try once: leave it out of --watch") }
    }
}

/// A campaign's image as a file of this worker: written under its own name in a directory
/// only this process uses, removed when the worker ends (SIGINT, SIGTERM and SIGHUP
/// included). A directory left by a worker that was killed outright is removed by the
/// next worker that starts on the host.
struct ImageSpool: Sendable {
    let directory: String
    let path: String
    let cleanup: TemporaryPaths

    static let prefix = "bleota-worker-"

    init(bytes: [UInt8], name: String) throws {
        let base = FileManager.default.temporaryDirectory.path
        Self.removeAbandoned(in: base)
        directory = (base as NSString).appendingPathComponent("\(Self.prefix)\(getpid())")
        let safeName = name.isEmpty || name.contains("/") ? "image.bin" : name
        path = (directory as NSString).appendingPathComponent(safeName)
        cleanup = TemporaryPaths.removingOnExit([path, directory])
        do {
            try? FileManager.default.removeItem(atPath: directory)
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { throw CocoaError(.fileWriteUnknown) }
        } catch {
            cleanup.removeNow()
            throw CommandFailure(.failure, "cannot write the campaign's image under \(base): \(error.localizedDescription)")
        }
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
        cleanup.keep()
    }

    /// Removes spools whose worker process no longer exists.
    static func removeAbandoned(in base: String) {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: base) else { return }
        for entry in entries where entry.hasPrefix(prefix) {
            guard let pid = Int32(entry.dropFirst(prefix.count)), pid != getpid(), kill(pid, 0) != 0, errno == ESRCH else { continue }
            try? FileManager.default.removeItem(atPath: (base as NSString).appendingPathComponent(entry))
        }
    }
}
