// The commands' work, which needs the campaign store: built with the Campaigns trait
// (Package.swift). Without it each command says how to get it, and fails with exit 12.
#if Campaigns
import ArgumentParser
import BleotaCampaign
import BleotaCodec
import BleotaEngine
import BleotaFleet
import BleotaLink
import BleotaSystem
import Foundation
import Logging

extension CampaignLocation {
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

/// Runs `body` with the campaign database open; its errors become one-line failures.
func withCampaignStore<Result: Sendable>(
    _ location: CampaignLocation, logger: Logger,
    _ body: @Sendable (CampaignStore) async throws -> Result
) async throws -> Result {
    let address = try location.address()
    do { return try await CampaignStore.withStore(address, logger: logger, body) } catch let error as CampaignError { throw error.commandFailure }
}

extension CampaignCreateCommand {
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
        try update.checkFromVersions(protocolNamed: protocolOption.name)
        var pairs = ProtocolOptionText()
        if let name = protocolOption.name {
            let updateProtocol: any UpdateProtocol
            do { updateProtocol = try registry.named(name, orDefaultOver: []) } catch {
                throw CommandFailure(.usage, error.description)
            }
            // The image must be one this protocol takes, before any worker finds out.
            do { _ = try updateProtocol.prepareImage(ImageRequest(path: image, keyPath: nil, versionLabel: update.versionLabel)) } catch {
                throw error.commandFailure
            }
            // Parsed now so a value the protocol refuses is refused before any worker finds out;
            // the row keeps the text, which each worker parses again through its planner.
            pairs = try parsedHostOptions(update.protocolOptions, for: updateProtocol).text
        } else {
            // Each device's protocol is found by its worker, which checks the keys then.
            pairs = try keyValueOptions(
                update.protocolOptions, option: "--protocol-option", example: "bootloader-name=DfuNew",
                accepted: nil, owner: "the devices' protocol")
        }
        // A seed of its own unless given: stored, so the stages' choice can be drawn again.
        let rollout = try rolloutOptions.rollout(seed: UInt64.random(in: 1...UInt64(Int64.max)))
        do { try rollout.check(deviceCount: list.count) } catch { throw error.commandFailure }
        let definition = CampaignDefinition(
            name: location.name ?? "default", imageName: (image as NSString).lastPathComponent, image: bytes,
            devices: list, protocolName: protocolOption.name, protocolOptions: pairs, versionLabel: update.versionLabel,
            force: update.force, attempts: update.attempts, backoffSeconds: update.backoff, leaseSeconds: lease, rollout: rollout,
            fromVersions: update.fromVersions)
        let info = try await withCampaignStore(location, logger: logger) { store in try await store.create(definition) }
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(info))
        } else {
            Terminal.standardOutput.writeLine(
                "campaign '\(info.name)': \(list.count) devices, image \(info.imageName) (\(info.imageSize) bytes, sha256 \(info.imageSHA256.prefix(16))…)")
            if !rollout.stages.isEmpty {
                let sizes = rollout.effectiveStages.indices.map { index in
                    let reach = rollout.reach(ofStage: index, total: list.count) - (index == 0 ? 0 : rollout.reach(ofStage: index - 1, total: list.count))
                    return "\(rollout.effectiveStages[index].name) \(reach)"
                }
                Terminal.standardOutput.writeLine("stages: \(sizes.joined(separator: " → ")) devices, chosen with seed \(rollout.seed)")
            }
            if !update.fromVersions.isEmpty {
                Terminal.standardOutput.writeLine(
                    "updates only devices that run \(update.fromVersions.joined(separator: " or ")); the others are left alone and listed as another version's")
            }
            if let rate = rollout.rate { Terminal.standardOutput.writeLine("claims at most \(rate.text), by every worker together") }
            if let window = rollout.window { Terminal.standardOutput.writeLine("claims only between \(window.text)") }
            if let halt = rollout.halt {
                Terminal.standardOutput.writeLine(
                    "halts when \(halt.shareText) of the finished devices failed (\(halt.counting.rawValue))"
                        + (halt.after > 1 ? ", once \(halt.after) have finished" : ""))
            }
            Terminal.standardOutput.writeLine("start a worker on each host: bleota fleet worker --campaign URL --name \(info.name) --adapter hci0")
        }
    }
}

extension FleetWorkerCommand {
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
        let metricsAt = try metricsEndpoint
        let summary = try await withCampaignStore(location, logger: logger) { store in
            let campaign = try await store.info(try await location.resolveName(store))
            let bytes = try await store.image(of: campaign)
            // The image as a file of this process (the protocols prepare images from files), under
            // its own name so it is read as the same kind of file; removed at exit, signals included.
            let image = try ImageSpool(bytes: bytes, name: campaign.imageName)
            defer { image.remove() }
            let planner = FleetPlanner(
                image: image.path, versionLabel: campaign.versionLabel,
                protocolOptions: campaign.protocolOptions.pairs,
                explicit: campaign.protocolName, timeout: timeouts.connect, imageStore: imageStoreOption.store,
                fromVersions: campaign.fromVersions, logger: logger)
            logger.notice("worker \(name) joins campaign '\(campaign.name)' with \(adapterNames.joined(separator: ", "))")
            let logs = try runOptions.deviceLogs(devices: [], clock: SystemClock())
            var counters: CampaignMetrics?
            var endpoint: MetricsEndpoint?
            if let (host, port) = metricsAt {
                let metrics = CampaignMetrics(campaign: campaign.name, worker: name)
                do { endpoint = try MetricsEndpoint(host: host, port: port, metrics: metrics, logger: logger) } catch {
                    throw CommandFailure(.usage, "--metrics \(host):\(port): \(error): pick a free port, or 0 for any")
                }
                counters = metrics
                let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(endpoint!.port)/metrics"
                if json {
                    struct Line: Codable {
                        var event = "metrics"
                        var url: String
                    }
                    Terminal.standardOutput.writeLine(try JSONOutput.string(Line(url: url), pretty: false))
                } else {
                    Terminal.standardError.writeLine("metrics for Prometheus: \(url)")
                }
            }
            let serving = endpoint.map { endpoint in Task { await endpoint.run() } }
            defer {
                endpoint?.stop()
                serving?.cancel()
            }
            let worker = CampaignWorker(
                store: store, campaign: campaign, options: options, stop: stop, logger: logger,
                onEvent: runOptions.handler(display, logs), metrics: counters,
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
            + (summary.otherVersion > 0 ? ", \(summary.otherVersion) of another version left alone" : "")
            + (summary.lostLeases > 0 ? ", \(summary.lostLeases) lost their lease" : "") + " in \(Int(summary.seconds.rounded())) s"
        if !json { Terminal.standardError.writeLine(mine) }
        if status.campaign.progress.isAborted {
            let succeeded = status.count(.updated) + status.count(.skipped)
            throw CommandFailure(succeeded == 0 ? .fleetNone : .fleetPartial, "campaign '\(status.campaign.name)' aborted: \(status.sentence)")
        }
        guard status.isFinished else {
            if !json { Terminal.standardOutput.writeLine("stopped; campaign '\(status.campaign.name)': \(status.sentence)") }
            return
        }
        let succeeded = status.count(.updated) + status.count(.skipped)
        if status.endedAsAsked == status.devices.count {
            if !json { Terminal.standardOutput.writeLine("campaign '\(status.campaign.name)' done: \(status.sentence)") }
            return
        }
        throw CommandFailure(succeeded == 0 ? .fleetNone : .fleetPartial, "campaign '\(status.campaign.name)' done: \(status.sentence)")
    }
}

extension FleetStatusCommand {
    func run() async throws {
        let logger = global.makeLogger("bleota.campaign")
        let location = self.location
        let withTries = tries
        let json = global.json
        if watch {
            let every = interval.duration()
            try await withCampaignStore(location, logger: logger) { store in
                let name = try await location.resolveName(store)
                var pace = CampaignPace()
                let started = ContinuousClock.now
                let redraw = Terminal.standardOutput.isInteractive && !json
                while true {
                    let status = try await store.status(name)
                    pace.observe(finished: status.devices.count(where: \.state.isFinal), of: status.devices.count, at: ContinuousClock.now - started)
                    if json {
                        Terminal.standardOutput.writeLine(
                            try JSONOutput.string(
                                StatusDocument(
                                    campaign: status.campaign, stages: status.stages, devices: status.devices, tries: nil,
                                    devicesPerMinute: pace.perMinute, etaSeconds: pace.etaSeconds),
                                pretty: false))
                    } else {
                        let lines = Self.lines(status, records: []) + [pace.sentence]
                        Terminal.standardOutput.write((redraw ? "\u{1B}[H\u{1B}[2J" : "") + lines.joined(separator: "\n") + "\n" + (redraw ? "" : "\n"))
                    }
                    if status.isFinished || status.campaign.progress.isAborted { return }
                    try await Task.sleep(for: every)
                }
            }
            return
        }
        let (status, records) = try await withCampaignStore(location, logger: logger) { store in
            let name = try await location.resolveName(store)
            return (try await store.status(name), withTries ? try await store.tries(name) : [])
        }
        if json {
            Terminal.standardOutput.writeLine(
                try JSONOutput.string(
                    StatusDocument(campaign: status.campaign, stages: status.stages, devices: status.devices, tries: withTries ? records : nil)))
            return
        }
        for line in Self.lines(status, records: records) { Terminal.standardOutput.writeLine(line) }
    }

    /// `fleet status --json`: the campaign, its stages, its devices and (`--tries`) its tries;
    /// with `--watch` also the rate and ETA.
    struct StatusDocument: Codable {
        var campaign: CampaignInfo
        var stages: [StageSummary]
        var devices: [CampaignDeviceState]
        var tries: [TryRecord]?
        var devicesPerMinute: Double?
        var etaSeconds: Double?
    }

    /// The status as text: the campaign, a row a device, the tries, each stage, the counts and
    /// where the rollout stands.
    static func lines(_ status: CampaignStatus, records: [TryRecord]) -> [String] {
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
        let stages = status.stages
        if stages.count > 1 {
            for (index, stage) in stages.enumerated() {
                lines.append(
                    "stage \(index + 1) \(stage.name): \(stage.devices) devices, \(stage.finished) finished, \(stage.failed) failed"
                        + (stage.open ? "" : ", not open"))
            }
        }
        lines.append(status.sentence)
        let air = status.air
        if let sentence = FleetSummary.airSentence(air: air.sent, whole: air.whole) {
            lines.append("\(sentence); \(air.patched) of \(status.count(.updated)) updates went as delta patches or compressed")
        }
        let rollout = status.rolloutSentence
        if !rollout.isEmpty { lines.append(rollout) }
        return lines
    }
}

extension CampaignAdvanceCommand {
    func run() async throws {
        let seen = fromStage.map { $0 - 1 }
        try await runOperatorCommand(location, global) { store, name in try await store.advance(name, from: seen) }
    }
}

extension CampaignResumeCommand {
    func run() async throws {
        try await runOperatorCommand(location, global) { store, name in try await store.resume(name) }
    }
}

extension CampaignAbortCommand {
    func run() async throws {
        try await runOperatorCommand(location, global) { store, name in try await store.abort(name) }
    }
}

/// An operator's command on the campaign `location` names: its one change, then its line.
func runOperatorCommand(
    _ location: CampaignLocation, _ global: GlobalOptions,
    _ change: @escaping @Sendable (CampaignStore, String) async throws -> CampaignStore.OperatorResult
) async throws {
    let result = try await withCampaignStore(location, logger: global.makeLogger("bleota.campaign")) { store in
        try await change(store, try await location.resolveName(store))
    }
    try printOperatorResult(result, json: global.json)
}

/// An operator command's line, or with `--json` the campaign as it now stands.
func printOperatorResult(_ result: CampaignStore.OperatorResult, json: Bool) throws {
    if json {
        Terminal.standardOutput.writeLine(try JSONOutput.string(result.info))
    } else {
        Terminal.standardOutput.writeLine(result.sentence)
    }
}
#else
/// Why a campaign command cannot run in this build, and how to get one that can.
let campaignsNotBuilt = CommandFailure(
    .campaignDatabase,
    "this bleota was built without fleet campaigns (they need PostgreSQL's client): rebuild with swift build --traits Campaigns")

extension CampaignCreateCommand {
    func run() async throws { throw campaignsNotBuilt }
}

extension FleetWorkerCommand {
    func run() async throws { throw campaignsNotBuilt }
}

extension FleetStatusCommand {
    func run() async throws { throw campaignsNotBuilt }
}

extension CampaignAdvanceCommand {
    func run() async throws { throw campaignsNotBuilt }
}

extension CampaignResumeCommand {
    func run() async throws { throw campaignsNotBuilt }
}

extension CampaignAbortCommand {
    func run() async throws { throw campaignsNotBuilt }
}
#endif
