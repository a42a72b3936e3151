import ArgumentParser
import BleotaATT
import BleotaBlueZ
import BleotaCodec
import BleotaEngine
import BleotaFleet
import BleotaLink
import BleotaSimulator
import BleotaSystem
import Foundation
import Logging
import Synchronization

/// `bleota fleet …`: many devices at once.
struct FleetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet",
        abstract: "Update many devices at once, spread over several adapters, or over many hosts from a PostgreSQL campaign.",
        subcommands: [FleetFlashCommand.self, CampaignCommand.self, FleetWorkerCommand.self, FleetStatusCommand.self]
    )
}

/// `bleota fleet flash IMAGE --devices FILE`: every listed device updated, several at a time per adapter.
struct FleetFlashCommand: AsyncParsableCommand, StreamsJSONLines {
    static let configuration = CommandConfiguration(
        commandName: "flash",
        abstract: "Flash one image to every device of a list, several at a time on each adapter.",
        discussion: """
            Each device runs its own update (the same steps as bleota flash), at most --connections at a \
            time on each --adapter; a failed try is retried after a back-off that doubles (--attempts, --backoff); \
            a device that already runs the image's version is left alone unless --force. On a terminal a live \
            table shows every device; --json prints one JSON line per event and a summary line; --report writes \
            each device's result (CSV or JSON). Ctrl-C stops starting devices and lets running ones finish; a \
            second Ctrl-C ends at once. Exit status: 0 when every device runs the image, 10 when some do, 11 \
            when none does (bleota --help lists the others).
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var protocolOption: ProtocolChoice
    @OptionGroup var update: FleetUpdateOptions
    @OptionGroup var runOptions: FleetRunOptions
    @OptionGroup var imageStore: ImageStoreOption

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The devices: one address a line, CSV with a 'device' column (and adapter, protocol, label, passkey, bonded, option:KEY), or a JSON array.", valueName: "FILE"))
    var devices: String?

    @Option(name: .customLong("scan-name"), help: "Instead of --devices: every device a scan sees whose advertised name contains this.")
    var scanName: String?

    @Option(name: .customLong("scan-service"), help: "Instead of --devices: every device a scan sees advertising this service UUID.")
    var scanService: String?

    // Unconditional: an RSSI is negative, and `--min-rssi -70` must not read -70 as an option.
    @Option(name: .customLong("min-rssi"), parsing: .unconditional, help: "With a scan: only devices heard at least this strongly (dBm, e.g. -70).")
    var minimumRSSI: Int?

    @Option(
        name: .customLong("scan-seconds"), help: "With a scan: how long to scan, on the first --adapter, in seconds or with a unit (1…120 s, e.g. 2s; default 5).",
        transform: TimeArgument.parse)
    var scanTime: TimeArgument?
    var scanSeconds: Double { scanTime?.seconds() ?? 5 }

    @Option(
        name: .customLong("scan-older-than"),
        help: ArgumentHelp(
            "With a scan: devices that advertise this version or newer (manufacturer data, protocols/advertised-version.md) are not connected to and are reported as already current; devices that advertise none are updated as usual.",
            valueName: "VERSION"))
    var scanOlderThan: String?

    @Option(
        name: .customLong("adapter"),
        help: ArgumentHelp("An adapter to use (repeatable): hci0, hci1, …; for sim:// devices, names of simulated adapters (default: one, sim0).", valueName: "NAME"))
    var adapters: [String] = []

    @Option(name: .long, help: ArgumentHelp("Write every device's result here: .csv or .json (written whole, atomically).", valueName: "FILE"))
    var report: String?

    @Flag(
        name: .customLong("keep-adapters"),
        help:
            "Never move a device queued for a transfer place to another adapter that has one free (by default, once no device is left to start, such a device moves; a device whose list row names its adapter never moves)."
    )
    var keepAdapters = false

    @Argument(help: "The image every device gets.") var image: String

    func validate() throws {
        let scanning = scanName != nil || scanService != nil
        guard (devices != nil) != scanning else {
            throw ValidationError(
                devices == nil
                    ? "no devices: give --devices FILE, or --scan-name/--scan-service to find them"
                    : "--devices and a scan filter exclude each other: give one")
        }
        if minimumRSSI != nil, !scanning { throw ValidationError("--min-rssi filters a scan: add --scan-name or --scan-service") }
        if scanOlderThan != nil, !scanning { throw ValidationError("--scan-older-than filters a scan: add --scan-name or --scan-service") }
        if let scanOlderThan, !scanOlderThan.allSatisfy({ $0.isNumber || $0 == "." || $0 == "+" }) || scanOlderThan.first?.isNumber != true {
            throw ValidationError("--scan-older-than '\(scanOlderThan)' is not a version: write e.g. 2.1.0")
        }
        if let scanService, BluetoothUUID(scanService) == nil {
            throw ValidationError("--scan-service '\(scanService)' is not a UUID: write 16 bits (FEF5) or 128 bits")
        }
        if let scanTime { _ = try scanTime.checkedSeconds(option: "--scan-seconds", range: 1...120) }
        if let report, FleetReport.Format(path: report) == nil {
            throw ValidationError("--report \(report): name a .csv or .json file")
        }
        if Set(adapters).count != adapters.count { throw ValidationError("--adapter names an adapter twice: give each once") }
    }

    func run() async throws {
        let logger = global.makeLogger("bleota.fleet")
        if let report { try checkOutputPath(report) }
        let list: [FleetDevice]
        let source: String
        var advertisedCurrent: [String: String] = [:]
        if let devices {
            source = devices
            let text: String
            do { text = String(decoding: try InputFile.read(devices, limit: 16 << 20), as: UTF8.self) } catch {
                throw CommandFailure(.badInput, error.description)  // it names the file
            }
            do { list = try FleetDeviceList.parse(text, file: devices) } catch { throw CommandFailure(.badInput, error.description) }
        } else {
            source = "the scan"
            (list, advertisedCurrent) = try await scannedDevices()
        }
        let devices = source
        let addresses = try list.map { device throws -> DeviceAddress in
            // A bad address is named with the line of the list that gives it, not as a --device.
            guard let address = DeviceAddress(argument: device.address), address.problem == nil else {
                let problem = DeviceAddress(argument: device.address)?.problem ?? "'\(device.address)' is not a device address: use sim://, ble://, udp:// or serial://"
                throw CommandFailure(.badInput, FleetListError(file: devices, at: device.listedAt, problem).description)
            }
            return address
        }
        let simulated = try addresses.map { address throws -> Bool in
            if case .simulator = try address.kind() { return true }
            return false
        }
        guard Set(simulated).count == 1 else {
            throw CommandFailure(.usage, "\(devices) mixes simulated and real devices: a fleet is all sim:// or all real")
        }
        let adapterNames = adapters.isEmpty ? [simulated[0] ? "sim0" : "hci0"] : adapters
        for device in list {
            if let fixed = device.adapter, !adapterNames.contains(fixed) {
                throw CommandFailure(.usage, "\(device.label) names adapter \(fixed), which is not among --adapter \(adapterNames.joined(separator: ", ")): add --adapter \(fixed)")
            }
        }
        var fleetOptions = FleetOptions(
            adapters: adapterNames, connectionsPerAdapter: runOptions.connections,
            transfersPerAdapter: runOptions.transfers, attempts: update.attempts,
            backoff: .milliseconds(Int64(update.backoff * 1000)))
        fleetOptions.movesQueuedDevices = !keepAdapters
        let options = fleetOptions
        // Every device's protocol and the image prepared for it (once per protocol). Simulated devices
        // and devices given --protocol are planned now; a real device whose protocol must be found by
        // scanning or connecting is planned in its own first try, so one that is not there fails alone
        // (and is retried) instead of stopping the fleet before it starts.
        try update.checkFromVersions(protocolNamed: protocolOption.name)
        let planner = FleetPlanner(
            image: image, versionLabel: update.versionLabel, protocolOptions: update.protocolOptions, explicit: protocolOption.name,
            timeout: runOptions.timeouts.connect, imageStore: imageStore.store, fromVersions: update.fromVersions, logger: logger)
        for (device, address) in zip(list, addresses) where simulated[0] || (device.protocolName ?? protocolOption.name) != nil {
            _ = try await planner.plan(device, address: address)
        }
        let addressOf = Dictionary(uniqueKeysWithValues: zip(list.map(\.address), addresses))
        let display = runOptions.display(devices: list, json: global.json)
        let stop = FleetStopSignal()
        TemporaryPaths.interceptNextInterrupt {
            stop.stop()
            display.note("stopping: no new device starts; running ones finish (Ctrl-C again ends at once)")
        }
        defer { TemporaryPaths.stopInterceptingInterrupts() }
        let timeouts = runOptions.timeouts
        let force = update.force
        let outcome: (results: [DeviceResult], summary: FleetSummary)
        if simulated[0] {
            outcome = try await SimulationRuntime.run(maximumVirtualTime: .seconds(7 * 24 * 3600)) { runtime in
                let fleet = SimulatedFleet(runtime: runtime, adapterNames: adapterNames)
                var members: [String: (SimulatedFleet.Member, FleetPlan)] = [:]
                for device in list {
                    let plan = try await planner.plan(device, address: addressOf[device.address]!)
                    guard case .simulator(let parsed) = try plan.address.kind() else { continue }
                    members[device.address] = (try await fleet.add(parsed, protocol: plan.updateProtocol, description: device.address), plan)
                }
                let known = members
                let logs = try runOptions.deviceLogs(devices: list, clock: runtime.clock)
                let runner = FleetRunner(
                    devices: list, options: options, clock: runtime.clock, stop: stop,
                    onEvent: runOptions.handler(display, logs)
                ) { device, adapter, turn, onEvent in
                    guard let (member, plan) = known[device.address] else {
                        return .failed(TransferError(.badInput, step: .load, "no plan for \(device.address)"))
                    }
                    member.use(adapter: fleet.adapters[adapter])
                    let pairing = device.pairingPolicy
                    member.world.setPairingAgent(pairing)
                    let deviceLogger = logs?.logger(for: device, base: logger) ?? logger
                    do {
                        return try await recoveringSilentDrops(
                            member.connector, clock: runtime.clock, pairing: pairing, description: device.address, logger: deviceLogger
                        ) { connector, clock in
                            try await plan.tryUpdate(
                                connector: connector, clock: clock, timeouts: timeouts, logger: deviceLogger, turn: turn, force: force,
                                onEvent: onEvent)
                        }
                    } catch let failure as PairingError {
                        return .failed(FleetPlanner.pairingFailure(device, failure))
                    } catch let failure as TransferError {
                        return .failed(failure)
                    } catch {
                        return .failed(TransferError(.linkLost, step: .connect, "\(error)"))
                    }
                }
                let outcome = await runner.run()
                for (member, _) in known.values { await member.world.shutDown() }
                return outcome
            }
        } else {
            let clock = SystemClock()
            let logs = try runOptions.deviceLogs(devices: list, clock: clock)
            let realUpdate = planner.realDeviceUpdate(timeouts: timeouts, force: force, logs: logs)
            let current = advertisedCurrent
            let runner = FleetRunner(
                devices: list, options: options, clock: clock, stop: stop,
                onEvent: runOptions.handler(display, logs)
            ) { device, adapter, turn, onEvent in
                // It told the scan it runs the version or newer: nothing to connect for.
                if let version = current[device.address] { return .alreadyCurrent(version: version) }
                return await realUpdate(device, adapter, turn, onEvent)
            }
            outcome = await runner.run()
        }
        display.finish(outcome.summary)
        if outcome.summary.updated > 0 { await planner.keepImages() }
        if let report {
            let text: String
            switch FleetReport.Format(path: report)! {
            case .csv: text = FleetReport.csv(outcome.results)
            case .json: text = try FleetReport.json(outcome.results, summary: outcome.summary)
            }
            try writeFileAtomically(Array(text.utf8), to: report)
        }
        if outcome.summary.allSucceeded { return }
        throw CommandFailure(outcome.summary.noneSucceeded ? .fleetNone : .fleetPartial, outcome.summary.sentence)
    }
}

extension FleetFlashCommand {
    /// The devices a scan on the first adapter sees that match the scan options, strongest first,
    /// and among them those that advertise `--scan-older-than`'s version or newer, by address, with
    /// the version they advertise (reported as already current, never connected to).
    func scannedDevices() async throws -> (devices: [FleetDevice], advertisedCurrent: [String: String]) {
        let adapter = adapters.first ?? "hci0"
        _ = try requireBluetooth(adapter: adapter)
        let selection = ScanSelection(
            filter: ScanFilter(name: scanName, service: scanService.flatMap(BluetoothUUID.init)),
            minimumRSSI: minimumRSSI, olderThan: scanOlderThan.map(MCUbootImage.Version.init(parsing:)))
        let seen: [Advertisement]
        do {
            seen = try await Scanner.scan(adapter: adapter, duration: .milliseconds(Int64(scanSeconds * 1000)), filter: selection.filter)
        } catch {
            throw CommandFailure(.bluetoothUnavailable, "cannot scan with \(adapter): \(error)")
        }
        let (chosen, current) = selection.choose(seen)
        if let scanOlderThan, !current.isEmpty {
            Terminal.standardError.writeLine(
                "\(current.count) device\(current.count == 1 ? "" : "s") advertise \(scanOlderThan) or newer: not connected to, reported as already current")
        }
        guard !chosen.isEmpty || !current.isEmpty else {
            throw CommandFailure(
                .linkLost, "a \(Int(scanSeconds)) s scan on \(adapter) saw no device matching the filter: check that the devices advertise, or scan longer (--scan-seconds)")
        }
        func device(_ advertisement: Advertisement) -> FleetDevice {
            FleetDevice(
                address: "ble://\(advertisement.address)" + (advertisement.addressType == "random" ? "?type=random" : ""),
                label: advertisement.localName.map { "\($0) \(advertisement.address)" })
        }
        let advertisedCurrent = Dictionary(current.map { (device($0).address, $0.version ?? "") }, uniquingKeysWith: { first, _ in first })
        return (chosen.map(device) + current.map(device), advertisedCurrent)
    }
}

/// How each device of a fleet (or a campaign) is updated and tried: the options
/// `fleet flash` and `fleet campaign create` share.
struct FleetUpdateOptions: ParsableArguments {
    @Option(name: .long, help: "Tries per device before it is reported failed (1…10); in a campaign counted across workers, a try whose worker died included.")
    var attempts: Int = 3

    // Unconditional, so `--backoff -1` is reported as out of range rather than as a missing value.
    @Option(
        name: .customLong("backoff"), parsing: .unconditional,
        help: "Time before a device's second try, in seconds or with a unit (500ms; 0…3600 s, default 5 s); doubled for each try after.", transform: TimeArgument.parse)
    var backoffTime = TimeArgument(seconds: 5)
    var backoff: Double { backoffTime.seconds() }

    @Flag(name: .long, help: "Update devices that already run the image's version too.")
    var force = false

    @Option(name: .customLong("protocol-option"), help: ArgumentHelp("A key of the protocol's host half for every device (repeatable).", valueName: "KEY=VALUE"))
    var protocolOptions: [String] = []

    @Option(name: .customLong("version-label"), help: "The version every device must report after the update, when the image carries none.")
    var versionLabel: String?

    @Option(
        name: .customLong("from-version"),
        help: ArgumentHelp(
            "Update only devices that run this version (repeatable): others are left alone and listed as another version's. Needs a protocol that reads the running version before sending (bleota protocols: 'update only given versions').",
            valueName: "VERSION"))
    var fromVersions: [String] = []

    func validate() throws {
        guard (1...10).contains(attempts) else { throw ValidationError("--attempts \(attempts) is out of range: use 1…10") }
        for version in fromVersions where version.isEmpty || version.contains(where: \.isWhitespace) || version.contains(",") {
            throw ValidationError("--from-version '\(version)' is not a version: give one a time, as --from-version 1.2.0 --from-version 1.3.0")
        }
        _ = try backoffTime.checkedSeconds(option: "--backoff", range: 0...3600)
    }
}

extension FleetUpdateOptions {
    /// `--from-version` with a `--protocol` that cannot read the running version before it sends is
    /// refused before any device is touched (without `--protocol`, each device is told apart alone).
    func checkFromVersions(protocolNamed name: String?) throws {
        guard !fromVersions.isEmpty, let name, let updateProtocol = CommandContext.registry.named(name),
            !updateProtocol.capabilities.contains(.versionCohort)
        else { return }
        throw CommandFailure(
            .usage,
            "--from-version needs each device's version before anything is sent, which \(name) devices do not report: leave out --from-version, or use a protocol that can (bleota protocols: 'update only given versions')"
        )
    }
}

/// How one host runs its part of a fleet: the options `fleet flash` and `fleet worker` share.
struct FleetRunOptions: ParsableArguments {
    @Option(name: .long, help: "Updates at once on each adapter, each on its own connection (1…16; default 4: two transferring, two getting ready or finishing beside them).")
    var connections: Int = FleetOptions.defaultConnectionsPerAdapter

    @Option(
        name: .long,
        help:
            "Of those, transfers at once on each adapter (1…16; default 2: two busy links fill a controller's radio, more share it worse; the others connect, reboot and confirm meanwhile). A value ≥ --connections lets every update transfer when ready."
    )
    var transfers: Int = FleetOptions.defaultTransfersPerAdapter

    @Option(
        name: .customLong("connect-timeout"),
        help: "Time to wait for a device to connect or come back after a reboot, in seconds or with a unit (500ms; 0.1…3600 s, default 10 s).", transform: TimeArgument.parse)
    var connectTime = TimeArgument(seconds: 10)
    var connectTimeout: Double { connectTime.seconds() }

    @Flag(name: .long, help: "No live table (the summary and errors still print).")
    var quiet = false

    @Option(
        name: .customLong("log-dir"),
        help: ArgumentHelp(
            "Write one log per device here (created if missing): its tries, steps, progress, notes, failures and its update's messages down to debug level, as they happen.",
            valueName: "DIR"))
    var logDirectory: String?

    func validate() throws {
        guard (1...16).contains(connections) else { throw ValidationError("--connections \(connections) is out of range: use 1…16") }
        guard (1...16).contains(transfers) else { throw ValidationError("--transfers \(transfers) is out of range: use 1…16") }
        _ = try connectTime.checkedSeconds(option: "--connect-timeout", range: 0.1...3600)
    }

    /// A device gets --connect-timeout to connect, and at least 30 s to come back after a reboot.
    var timeouts: StepTimeouts {
        StepTimeouts(connect: .milliseconds(Int64(connectTimeout * 1000)), reboot: .milliseconds(Int64(max(connectTimeout, 30) * 1000)))
    }

    /// The per-device logs of --log-dir, or nil without it.
    func deviceLogs(devices: [FleetDevice], clock: any BleotaClock) throws -> FleetDeviceLogs? {
        guard let logDirectory else { return nil }
        do { return try FleetDeviceLogs(directory: logDirectory, devices: devices, clock: clock) } catch {
            throw CommandFailure(.badInput, "--log-dir \(logDirectory): cannot create the directory (\(error.localizedDescription)): give a writable path")
        }
    }

    /// The fleet's event handler: the display, and each device's log when there are logs.
    func handler(_ display: FleetDisplay, _ logs: FleetDeviceLogs?) -> @Sendable (FleetEvent) -> Void {
        guard let logs else { return display.handle }
        return { event in
            logs.record(event)
            display.handle(event)
        }
    }

    /// The live table on a terminal unless --quiet or --json.
    func display(devices: [FleetDevice], json: Bool) -> FleetDisplay {
        FleetDisplay(devices: devices, json: json, live: !quiet && !json && Terminal.standardError.isInteractive)
    }
}

/// Plans each device of a fleet once: its protocol (from --protocol, the list, the address, the image
/// or the device), the image prepared for that protocol (once per protocol) and its host options.
actor FleetPlanner {
    let image: String
    let versionLabel: String?
    let protocolOptions: [String]
    let explicit: String?
    let timeout: Duration
    /// The images flashed before: each device gets a delta patch against the one it runs, where its
    /// protocol sends patches and the store holds that image (protocols/delta.md).
    let imageStore: ImageStore?
    /// `--from-version`: only devices running one of these are sent the image (empty: any).
    let fromVersions: [String]
    let logger: Logger
    private var plans: [String: FleetPlan] = [:]
    private var prepared: [String: PreparedImage] = [:]

    init(
        image: String, versionLabel: String?, protocolOptions: [String], explicit: String?, timeout: Duration, imageStore: ImageStore? = nil,
        fromVersions: [String] = [], logger: Logger
    ) {
        self.fromVersions = fromVersions
        self.image = image
        self.versionLabel = versionLabel
        self.protocolOptions = protocolOptions
        self.explicit = explicit
        self.timeout = timeout
        self.imageStore = imageStore
        self.logger = logger
    }

    /// After devices were updated: a copy of each image prepared for a protocol that sends patches,
    /// for the next fleet's. A copy that cannot be kept is a warning.
    func keepImages() {
        guard let imageStore else { return }
        for image in prepared.values where image.deltaBase != nil {
            guard let bytes = image.wholeInMemory else { continue }
            do { try imageStore.add(bytes) } catch {
                Terminal.standardError.writeLine("warning: \(error): the next fleet sends whole images")
            }
        }
    }

    /// One try at a real device (ble://, udp://, serial://) through `adapter`: its plan (found out, if need be,
    /// through that adapter: scans and connections on one adapter at a time, not all on the default one),
    /// a session, and the update.
    nonisolated func realDeviceUpdate(timeouts: StepTimeouts, force: Bool, logs: FleetDeviceLogs?) -> FleetRunner.Update {
        { [planLogger = logger] device, adapter, turn, onEvent in
            let logger = logs?.logger(for: device, base: planLogger) ?? planLogger
            do {
                guard let listed = DeviceAddress(argument: device.address) else {
                    return .failed(TransferError(.badInput, step: .connect, "'\(device.address)' is not a device address: use ble://, udp:// or serial://"))
                }
                let plan = try await self.plan(device, address: listed, probingThrough: try listed.through(adapter: adapter))
                let address = try plan.address.through(adapter: adapter)
                let pairing = self.pairing(for: device, at: address)
                // Over BLE the session recovers a connect gone unanswered as `flash` does (silent drops).
                let session = try await address.session(protocol: plan.updateProtocol, logger: logger, pairing: pairing) { connector, clock in
                    try await plan.tryUpdate(
                        connector: connector, clock: clock, timeouts: timeouts, logger: logger, turn: turn, force: force, onEvent: onEvent)
                }
                return session.value
            } catch let failure as CommandFailure where failure.transferError != nil && failure.status != .pairingFailed {
                // The try's own failure (a connect gone unanswered, not cured by a raised link), as it was.
                return .failed(failure.transferError!)
            } catch let failure as CommandFailure where failure.status == .pairingFailed {
                return .failed(TransferError(.pairingFailed, step: .connect, failure.message + Self.listHint))
            } catch let failure as CommandFailure {
                // A usage or input mistake is not cured by trying again; a device not reached may be.
                let code: TransferError.Code = [.usage, .badInput].contains(failure.status) ? .badInput : .linkLost
                return .failed(TransferError(code, step: .connect, failure.message))
            } catch {
                return .failed(TransferError(.linkLost, step: .connect, "\(error)"))
            }
        }
    }

    /// Every device's pairing answers met so far, by Bluetooth address: each connection's agent
    /// carries them all, since the adapter's one agent answers whichever device pairs.
    private let pairings = Mutex<[String: PairingPolicy]>([:])

    /// The agent for one connection to `device`: its own answers, and every other device's.
    nonisolated func pairing(for device: FleetDevice, at address: DeviceAddress) -> any PairingAgent {
        guard case .ble(let target)? = try? address.kind() else { return device.pairingPolicy }
        let key = target.address.description
        let table = pairings.withLock { table in
            table[key] = device.pairingPolicy
            return table
        }
        return PerDevicePairing(device: key, policies: table)
    }

    /// What a fleet's pairing failure says: exit 13's reason, and where a fleet gives the answer.
    static func pairingFailure(_ device: FleetDevice, _ failure: PairingError) -> TransferError {
        TransferError(.pairingFailed, step: .connect, "\(device.address): \(failure)" + (failure == .noBond ? "" : listHint))
    }

    static let listHint = " (in a fleet: the device list's passkey column, or bonded=yes for a device paired before)"

    /// The plan for `device` at `address`; a protocol found by asking the device is asked through `probingThrough`.
    func plan(_ device: FleetDevice, address: DeviceAddress, probingThrough probe: DeviceAddress? = nil) async throws -> FleetPlan {
        if let plan = plans[device.address] { return plan }
        let updateProtocol = try await (probe ?? address).resolveProtocol(
            explicit: device.protocolName ?? explicit, image: ImageFiles.probe(image), needs: .flash,
            timeout: timeout, logger: logger)
        if prepared[updateProtocol.name] == nil {
            var image: PreparedImage
            do { image = try updateProtocol.prepareImage(ImageRequest(path: self.image, keyPath: nil, versionLabel: versionLabel)) } catch {
                throw error.commandFailure
            }
            if let imageStore, updateProtocol.capabilities.contains(.deltaFlash) {
                image.deltaBase = DeltaBase(origin: .store(imageStore), policy: .auto)
            }
            image.fromVersions = fromVersions
            prepared[updateProtocol.name] = image
        }
        let pairs = protocolOptions + device.protocolOptions.pairs
        let hostOptions = try parsedHostOptions(pairs, for: updateProtocol)
        let plan = FleetPlan(device: device, address: address, updateProtocol: updateProtocol, image: prepared[updateProtocol.name]!, hostOptions: hostOptions)
        plans[device.address] = plan
        return plan
    }
}

/// One device of a fleet as the command prepared it: its protocol, image and options.
struct FleetPlan: Sendable {
    var device: FleetDevice
    var address: DeviceAddress
    var updateProtocol: any UpdateProtocol
    var image: PreparedImage
    var hostOptions: ProtocolOptions

    /// One try through `connector`, the same for a simulated and a real fleet: the update
    /// (``attempt(_:force:)``); a pairing that failed reported as such, however the protocol worded
    /// its failure (exit 13's reason); and a connect whose requests went unanswered thrown, so that
    /// the silent-drop recovery around it (`recoveringSilentDrops`, as `flash` has) may connect
    /// again on a raised link.
    func tryUpdate(
        connector: any DeviceConnector, clock: any BleotaClock, timeouts: StepTimeouts, logger: Logger, turn: (any TransferTurn)?,
        force: Bool, onEvent: @escaping @Sendable (UpdateEvent) -> Void
    ) async throws -> FleetAttempt {
        let context = HostContext(
            protocolName: updateProtocol.name, connector: connector, clock: clock, timeouts: timeouts, logger: logger,
            options: hostOptions, transferTurn: turn, onEvent: onEvent)
        let attempt = await attempt(updateProtocol.makeHost(context), force: force)
        guard case .failed(let error) = attempt else { return attempt }
        if let failure = (connector as? any SecurityRaisingConnector)?.security.failure {
            return .failed(FleetPlanner.pairingFailure(device, failure))
        }
        if error.code == .timeout, error.step == .connect { throw error }
        return attempt
    }

    /// One try: the version the device runs first (where the protocol can say), then the update.
    func attempt(_ host: any ProtocolHost, force: Bool) async -> FleetAttempt {
        if !force, updateProtocol.capabilities.contains(.imageState),
            let state = try? await host.imageState(nil), let active = state.active, active.version == image.version
        {
            // Running the target but not confirmed: an update was cut off after its activation
            // (a killed worker, a lost link). Confirming is that update's last step; updating
            // again would swap the image a second time.
            if !active.confirmed && !active.permanent, updateProtocol.flashModes.contains(.testAndConfirm) {
                do throws(TransferError) { _ = try await host.imageState(.confirm(hash: nil)) } catch { return .failed(error) }
            }
            return .alreadyCurrent(version: active.version)
        }
        if !image.fromVersions.isEmpty, !updateProtocol.capabilities.contains(.versionCohort) {
            // Which version it runs is said only once the update is under way: left alone.
            return .otherVersion(
                version: nil,
                reason: "\(updateProtocol.name) devices do not say which version they run before an update, so --from-version cannot be checked: the device was left alone")
        }
        let mode = updateProtocol.flashModes.first ?? .testAndConfirm
        do throws(TransferError) { return .updated(try await host.flash(image, mode: mode)) } catch {
            if error.code == .otherVersion {
                guard case .oldImage(let running) = error.outcome, running != DeviceOutcome.unnamedOldImage else {
                    return .otherVersion(version: nil, reason: error.message)
                }
                return .otherVersion(version: running, reason: error.message)
            }
            return .failed(error)
        }
    }
}
