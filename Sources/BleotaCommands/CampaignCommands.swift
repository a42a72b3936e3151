import ArgumentParser
import BleotaCampaign
import BleotaCodec
import BleotaEngine
import BleotaFleet
import BleotaLink
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

    /// The campaign to use: --name, or the database's only one.
    func resolveName(_ store: CampaignStore) async throws -> String {
        if let name { return name }
        let names = try await store.campaignNames()
        guard names.count == 1 else {
            throw CommandFailure(
                .usage,
                names.isEmpty
                    ? "the database holds no campaign: create one with bleota fleet campaign create"
                    : "the database holds \(names.count) campaigns (\(names.joined(separator: ", "))): pick one with --name")
        }
        return names[0]
    }
}

extension CampaignError {
    var commandFailure: CommandFailure {
        switch self {
        case .badAddress, .exists, .notFound: CommandFailure(.usage, description)
        case .database, .schemaTooNew, .imageMismatch: CommandFailure(.campaignDatabase, description)
        }
    }
}

/// Runs `body` with the campaign database open; its errors become one-line failures.
func withCampaignStore<Result: Sendable>(
    _ location: CampaignLocation, logger: Logger,
    _ body: @Sendable (CampaignStore) async throws -> Result
) async throws -> Result {
    let address = try location.address()
    do { return try await CampaignStore.withStore(address, logger: logger, body) } catch let error as CampaignError { throw error.commandFailure }
}

/// `bleota fleet campaign …`
struct CampaignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "Define a campaign in PostgreSQL that workers on many hosts carry out together.",
        subcommands: [CampaignCreateCommand.self])
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
    @OptionGroup var protocolOption: ProtocolOption
    @OptionGroup var update: FleetUpdateOptions

    @Option(
        name: .long,
        help: ArgumentHelp("The devices: one address a line, CSV with a 'device' column (and adapter, protocol, label, option:KEY), or a JSON array.", valueName: "FILE"))
    var devices: String

    @Option(
        name: .customLong("lease"),
        help: "How long a worker's claim on a device lasts unless renewed, in seconds or with a unit (5…3600 s, default 60 s); a dead worker's devices go to others after it.",
        transform: TimeArgument.parse)
    var leaseTime = TimeArgument(seconds: 60)
    var lease: Double { leaseTime.seconds() }

    @Argument(help: "The image every device gets.") var image: String

    func validate() throws {
        _ = try leaseTime.checkedSeconds(option: "--lease", range: 5...3600)
    }

    func run() async throws {
        let logger = global.makeLogger("bleota.campaign")
        let text: String
        do { text = String(decoding: try InputFile.read(devices, limit: 16 << 20), as: UTF8.self) } catch {
            throw CommandFailure(.badInput, error.description)  // it names the file
        }
        let list: [FleetDevice]
        do { list = try FleetDeviceList.parse(text, file: devices) } catch { throw CommandFailure(.badInput, error.description) }
        for device in list {
            guard let address = DeviceAddress(argument: device.address) else {
                throw CommandFailure(.badInput, "\(devices): '\(device.address)' is not a device address: use ble://, udp:// or serial://")
            }
            if case .simulator = try address.kind() {
                throw CommandFailure(
                    .badInput,
                    "\(devices): \(device.address) is a sim:// device, which lives inside one process: serve simulated devices to every worker with bleota sim serve --devices N and list them as udp://HOST:PORT"
                )
            }
        }
        let bytes: [UInt8]
        do { bytes = try InputFile.read(image, limit: 1 << 30) } catch { throw CommandFailure(.badInput, error.description) }
        let registry = CommandContext.registry
        var pairs: [String: String] = [:]
        if let name = protocolOption.name {
            guard let updateProtocol = registry.named(name) else {
                throw CommandFailure(.usage, "--protocol '\(name)' is not a protocol bleota knows: use one of \(registry.names.joined(separator: ", "))")
            }
            // The image must be one this protocol takes, before any worker finds out.
            do { _ = try updateProtocol.prepareImage(ImageRequest(path: image, keyPath: nil, versionLabel: update.versionLabel)) } catch {
                throw error.commandFailure
            }
            pairs = try keyValueOptions(
                update.protocolOptions, option: "--protocol-option", example: "bootloader-name=DfuNew",
                accepted: updateProtocol.hostOptions.map(\.key), owner: updateProtocol.identity.displayName)
        } else {
            // Each device's protocol is found by its worker, which checks the keys then.
            pairs = try keyValueOptions(
                update.protocolOptions, option: "--protocol-option", example: "bootloader-name=DfuNew",
                accepted: nil, owner: "the devices' protocol")
        }
        let definition = CampaignDefinition(
            name: location.name ?? "default", imageName: (image as NSString).lastPathComponent, image: bytes,
            devices: list, protocolName: protocolOption.name, protocolOptions: pairs, versionLabel: update.versionLabel,
            force: update.force, attempts: update.attempts, backoffSeconds: update.backoff, leaseSeconds: lease)
        let info = try await withCampaignStore(location, logger: logger) { store in try await store.create(definition) }
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(info))
        } else {
            Terminal.standardOutput.writeLine(
                "campaign '\(info.name)': \(list.count) devices, image \(info.imageName) (\(info.imageSize) bytes, sha256 \(info.imageSHA256.prefix(16))…)")
            Terminal.standardOutput.writeLine("start a worker on each host: bleota fleet worker --campaign URL --name \(info.name) --adapter hci0")
        }
    }
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

    func validate() throws {
        _ = try pollTime.checkedSeconds(option: "--poll", range: 0.1...60)
        if Set(adapters).count != adapters.count { throw ValidationError("--adapter names an adapter twice: give each once") }
        if let workerName, workerName.isEmpty { throw ValidationError("--worker-name is empty: give a name, or leave it out for HOST:PID") }
    }

    func run() async throws {
        let logger = global.makeLogger("bleota.worker")
        let name = workerName ?? "\(ProcessInfo.processInfo.hostName):\(getpid())"
        let adapterNames = adapters.isEmpty ? ["hci0"] : adapters
        let display = runOptions.display(devices: [], json: global.json)
        let stop = FleetStopSignal()
        TemporaryPaths.interceptNextInterrupt {
            stop.stop()
            display.note("stopping: no new device is claimed; running ones finish (Ctrl-C again ends at once)")
        }
        defer { TemporaryPaths.stopInterceptingInterrupts() }
        let timeouts = runOptions.timeouts
        let options = CampaignWorkerOptions(
            adapters: adapterNames, connectionsPerAdapter: runOptions.connections,
            transfersPerAdapter: runOptions.transfers, name: name,
            poll: .milliseconds(Int64(poll * 1000)))
        let location = self.location
        let json = global.json
        let summary = try await withCampaignStore(location, logger: logger) { store in
            let campaign = try await store.info(try await location.resolveName(store))
            let bytes = try await store.image(of: campaign)
            // The image as a file of this process (the protocols prepare images from files), under
            // its own name so it is read as the same kind of file; removed at exit, signals included.
            let image = try ImageSpool(bytes: bytes, name: campaign.imageName)
            defer { image.remove() }
            let planner = FleetPlanner(
                image: image.path, versionLabel: campaign.versionLabel,
                protocolOptions: campaign.protocolOptions.map { "\($0.key)=\($0.value)" }.sorted(),
                explicit: campaign.protocolName, timeout: timeouts.connect, imageStore: imageStoreOption.store, logger: logger)
            logger.notice("worker \(name) joins campaign '\(campaign.name)' with \(adapterNames.joined(separator: ", "))")
            let logs = try runOptions.deviceLogs(devices: [], clock: SystemClock())
            let worker = CampaignWorker(
                store: store, campaign: campaign, options: options, stop: stop, logger: logger,
                onEvent: runOptions.handler(display, logs),
                update: planner.realDeviceUpdate(timeouts: timeouts, force: campaign.force, logs: logs))
            let summary = try await worker.run()
            if summary.updated > 0 { await planner.keepImages() }
            return summary
        }
        if json {
            struct Line: Codable {
                var event = "summary"
                var worker: CampaignWorkerSummary
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Line(worker: summary), pretty: false))
        }
        guard let status = summary.status else { return }
        let mine =
            "worker \(summary.worker): \(summary.updated) updated, \(summary.skipped) already current, \(summary.failed) failed, \(summary.retried) left for another try"
            + (summary.lostLeases > 0 ? ", \(summary.lostLeases) lost their lease" : "") + " in \(Int(summary.seconds.rounded())) s"
        if !json { Terminal.standardError.writeLine(mine) }
        guard status.isFinished else {
            if !json { Terminal.standardOutput.writeLine("stopped; campaign '\(status.campaign.name)': \(status.sentence)") }
            return
        }
        let succeeded = status.count(.updated) + status.count(.skipped)
        if succeeded == status.devices.count {
            if !json { Terminal.standardOutput.writeLine("campaign '\(status.campaign.name)' done: \(status.sentence)") }
            return
        }
        throw CommandFailure(succeeded == 0 ? .fleetNone : .fleetPartial, "campaign '\(status.campaign.name)' done: \(status.sentence)")
    }
}

/// `bleota fleet status --campaign URL`
struct FleetStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Print a campaign: every device's state, tries, worker, versions and last error.",
        discussion: "With --json the campaign, its devices and (with --tries) every try as one JSON document.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var location: CampaignLocation

    @Flag(name: .long, help: "Also list every try (worker, start, end, outcome).")
    var tries = false

    func run() async throws {
        let logger = global.makeLogger("bleota.campaign")
        let location = self.location
        let withTries = tries
        let (status, records) = try await withCampaignStore(location, logger: logger) { store in
            let name = try await location.resolveName(store)
            return (try await store.status(name), withTries ? try await store.tries(name) : [])
        }
        if global.json {
            struct Document: Codable {
                var campaign: CampaignInfo
                var devices: [CampaignDeviceState]
                var tries: [TryRecord]?
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Document(campaign: status.campaign, devices: status.devices, tries: withTries ? records : nil)))
            return
        }
        let info = status.campaign
        var lines = [
            "campaign '\(info.name)': image \(info.imageName) (sha256 \(info.imageSHA256.prefix(16))…), \(info.attempts) tries per device, lease \(Int(info.leaseSeconds)) s"
        ]
        let width = max(6, status.devices.map(\.label.count).max() ?? 6)
        func pad(_ text: String, _ count: Int) -> String { text.count >= count ? text : text + String(repeating: " ", count: count - text.count) }
        lines.append(pad("device", width) + "  " + pad("state", 8) + "  tries  " + pad("worker", 20) + "  " + pad("version", 17) + "  result")
        for device in status.devices {
            let versions = device.versionBefore.map { before in "\(before) → \(device.versionAfter ?? "?")" } ?? ""
            let result = device.error.map { "\(device.step ?? "?"): \($0)" } ?? (device.state.isFinal ? String(format: "%.1f s, %d bytes", device.seconds, device.bytes) : "")
            lines.append(
                pad(device.label, width) + "  " + pad(device.state.rawValue, 8) + "  " + pad(String(device.tries), 5) + "  "
                    + pad(device.worker ?? "", 20) + "  " + pad(versions, 17) + "  " + result)
        }
        for record in records {
            lines.append("try \(record.tryNumber) of \(record.device) by \(record.worker): \(record.outcome ?? "running")" + (record.error.map { " (\($0))" } ?? ""))
        }
        lines.append(status.sentence)
        for line in lines { Terminal.standardOutput.writeLine(line) }
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
