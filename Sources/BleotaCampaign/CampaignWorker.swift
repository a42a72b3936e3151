// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import BleotaEngine
import BleotaFleet
import BleotaLink
import Logging

/// How one worker takes part in a campaign.
public struct CampaignWorkerOptions: Sendable {
    /// The adapters this host updates through.
    public var adapters: [String]
    /// Updates at once on each adapter (as ``/BleotaFleet/FleetOptions/connectionsPerAdapter``).
    public var connectionsPerAdapter: Int
    /// Transfers at once on each adapter (as ``/BleotaFleet/FleetOptions/transfersPerAdapter``).
    public var transfersPerAdapter: Int?
    /// The longest a ready device waits for a transfer place (as ``/BleotaFleet/FleetOptions/maximumTransferWait``).
    public var maximumTransferWait: Duration = FleetOptions.defaultMaximumTransferWait
    /// This worker's name in the database: unique among the campaign's workers (host:pid by default).
    public var name: String
    /// How often to look for devices when none is claimable (others' back-offs and leases run out meanwhile).
    public var poll: Duration

    public init(
        adapters: [String], connectionsPerAdapter: Int = FleetOptions.defaultConnectionsPerAdapter,
        transfersPerAdapter: Int? = FleetOptions.defaultTransfersPerAdapter, name: String, poll: Duration = .seconds(2)
    ) {
        self.adapters = adapters
        self.connectionsPerAdapter = connectionsPerAdapter
        self.transfersPerAdapter = transfersPerAdapter
        self.name = name
        self.poll = poll
    }
}

/// What one worker did, and how the campaign stood when it stopped.
public struct CampaignWorkerSummary: Sendable, Codable {
    public var worker: String
    /// Tries this worker ran, by how they ended.
    public var updated = 0
    public var skipped = 0
    /// Left alone: they run a version the campaign is not for (`--from-version`).
    public var otherVersion = 0
    public var failed = 0
    public var retried = 0
    /// Tries whose lease ran out before they ended, so their ending was not recorded.
    public var lostLeases = 0
    public var seconds = 0.0
    /// The campaign when the worker stopped.
    public var status: CampaignStatus?
    /// Stopped by Ctrl-C before the campaign finished.
    public var interrupted = false
}

/// One host's part of a campaign: claims devices while it has free connections,
/// runs each device's update (the caller's `update`, as for ``/BleotaFleet/FleetRunner``),
/// renews its leases every third of the lease while they run, records each try's
/// end, and stops when every device of the campaign is final (waiting, while other
/// workers still hold devices, in case their leases run out).
///
/// A failed try that another may cure goes back to the campaign after its back-off,
/// for any worker to take; a device is never tried by two workers at once because
/// only the lease holder's record is accepted and a device is claimable only while
/// pending.
public struct CampaignWorker: Sendable {
    public let store: CampaignStore
    public let campaign: CampaignInfo
    public let options: CampaignWorkerOptions
    public let clock: any BleotaClock
    public let stop: FleetStopSignal
    public let logger: Logger
    public let onEvent: @Sendable (FleetEvent) -> Void
    public let update: FleetRunner.Update
    /// Where the worker's counters go (`--metrics`), if anywhere.
    public let metrics: CampaignMetrics?

    public init(
        store: CampaignStore, campaign: CampaignInfo, options: CampaignWorkerOptions, clock: any BleotaClock = SystemClock(),
        stop: FleetStopSignal = FleetStopSignal(), logger: Logger, onEvent: @escaping @Sendable (FleetEvent) -> Void = { _ in },
        metrics: CampaignMetrics? = nil, update: @escaping FleetRunner.Update
    ) {
        self.store = store
        self.campaign = campaign
        self.options = options
        self.clock = clock
        self.stop = stop
        self.logger = logger
        self.onEvent = onEvent
        self.update = update
        self.metrics = metrics
    }

    enum Completion: Sendable {
        case tried(ClaimedDevice, adapter: String, attempt: FleetAttempt, seconds: Double)
        case tick
    }

    /// A device claimed and not yet recorded.
    struct Held {
        var claimed: ClaimedDevice
        var adapter: String?
    }

    public func run() async throws(CampaignError) -> CampaignWorkerSummary {
        var summary = CampaignWorkerSummary(worker: options.name)
        let began = clock.now
        var held: [String: Held] = [:]
        var waiting: [ClaimedDevice] = []
        var busy: [String: Int] = Dictionary(uniqueKeysWithValues: options.adapters.map { ($0, 0) })
        var unrecorded: [(ClaimedDevice, TryEnding)] = []
        var lastRenewal = clock.now
        var databaseFailures = 0
        var announcedStop = false
        /// The halt reason last said, so a halted campaign is announced once.
        var announcedHalt: String?
        /// Whether the last claim found fewer devices than it had room for: nothing more to claim now.
        var claimedAllThereWas = false
        let renewEvery = Duration.milliseconds(Int64(campaign.leaseSeconds * 1000 / 3))
        let capacity = options.adapters.count * options.connectionsPerAdapter
        let places = TransferPlaces(
            adapters: options.adapters, connectionsPerAdapter: options.connectionsPerAdapter,
            transfersPerAdapter: options.transfersPerAdapter, maximumWait: options.maximumTransferWait)
        var failure: CampaignError?

        await withTaskGroup(of: Completion.self) { group in
            var tickSet = false
            while true {
                // Cancelled (the process is going away): leave at once; the leases run out and
                // other workers take the devices.
                if Task.isCancelled { break }
                if stop.isStopped && !announcedStop {
                    announcedStop = true
                    onEvent(.stopping)
                }
                // Claim while there is room (see claimSize), then start what has an adapter slot.
                let room = capacity - held.count
                let wanted =
                    places.limitsTransfers
                    ? Self.claimSize(
                        room: room, unpromised: places.unpromisedPlaces, waiting: waiting.count,
                        spare: claimedAllThereWas
                            ? 0 : places.adaptersTransferringAtCapacity.reduce(0) { $0 + max(0, options.connectionsPerAdapter - busy[$1, default: 0]) })
                    : room
                if !stop.isStopped, wanted > 0 {
                    do {
                        let claimed = try await store.claim(campaign, worker: options.name, limit: wanted, adapters: options.adapters)
                        databaseFailures = 0
                        claimedAllThereWas = claimed.count < wanted
                        for device in claimed {
                            held[device.device.address] = Held(claimed: device, adapter: nil)
                            waiting.append(device)
                        }
                        metrics?.holding(held.count)
                    } catch {
                        databaseFailures += 1
                        logger.warning("cannot claim devices (\(databaseFailures) in a row): \(error)")
                    }
                }
                var index = 0
                while index < waiting.count {
                    let claimed = waiting[index]
                    guard let adapter = adapterFor(claimed.device, busy: busy) else {
                        index += 1
                        continue
                    }
                    waiting.remove(at: index)
                    busy[adapter, default: 0] += 1
                    held[claimed.device.address]?.adapter = adapter
                    onEvent(.started(device: claimed.device, adapter: adapter, attempt: claimed.tryNumber))
                    let turn = places.turn(on: adapter, for: claimed.device, onEvent: onEvent)
                    group.addTask { [clock, update, onEvent] in
                        let start = clock.now
                        let attempt = await update(claimed.device, adapter, turn) { event in
                            onEvent(FleetRunner.fleetEvent(event, device: claimed.device))
                        }
                        turn?.release()
                        return .tried(claimed, adapter: adapter, attempt: attempt, seconds: (clock.now - start).seconds)
                    }
                }
                // With nothing left to claim or start, a transfer alone on its adapter stays alone (its
                // link may take the shortest interval: GatedTransferTurn); a device claimed later reopens it.
                places.setOpenToNewcomers(!(stop.isStopped || (claimedAllThereWas && waiting.isEmpty)))
                if held.isEmpty && unrecorded.isEmpty {
                    if stop.isStopped { break }
                    if databaseFailures >= 5 {
                        failure = .database("the campaign database failed 5 times in a row; stopping (see the warnings above)")
                        break
                    }
                    // Nothing of ours runs: done when no device is left anywhere, or the campaign
                    // was aborted. A halted one waits for an operator's resume (or abort).
                    do {
                        let left = try await store.unfinished(campaign.name)
                        if left.aborted || (left.pending == 0 && left.running == 0) { break }
                        if left.halted != announcedHalt {
                            announcedHalt = left.halted
                            if let reason = left.halted {
                                logger.warning("campaign '\(campaign.name)' is halted (\(reason)): waiting for bleota fleet campaign resume or abort")
                            }
                        }
                    } catch {
                        databaseFailures += 1
                        logger.warning("cannot read the campaign (\(databaseFailures) in a row): \(error)")
                    }
                }
                if !tickSet {
                    tickSet = true
                    let wait = held.isEmpty ? options.poll : min(options.poll, renewEvery)
                    group.addTask { [clock] in
                        try? await clock.sleep(for: wait)
                        return .tick
                    }
                }
                guard let completion = await group.next() else { break }
                switch completion {
                case .tick:
                    tickSet = false
                case .tried(let claimed, let adapter, let attempt, let seconds):
                    busy[adapter, default: 1] -= 1
                    let ending = ending(of: attempt, claimed: claimed, seconds: seconds)
                    switch ending {
                    case .updated: summary.updated += 1
                    case .alreadyCurrent: summary.skipped += 1
                    case .otherVersion: summary.otherVersion += 1
                    case .failed(_, _, _, _, _, _, let retryAfter):
                        // ending(of:) leaves retryAfter nil when no try is left.
                        if retryAfter != nil { summary.retried += 1 } else { summary.failed += 1 }
                    }
                    if await record(claimed, ending, adapter: adapter, summary: &summary, elapsed: clock.now - began) == nil {
                        unrecorded.append((claimed, ending))
                    }
                    held[claimed.device.address] = nil
                    metrics?.holding(held.count)
                    if case .failed(let error) = attempt, case .failed(_, _, _, _, _, _, let retryAfter?) = ending {
                        onEvent(.retrying(device: claimed.device, error: error, delay: .milliseconds(Int64(retryAfter * 1000))))
                    } else {
                        onEvent(.finished(result(claimed, ending, adapter: adapter)))
                    }
                }
                // Leases: renewed every third of their length, so one missed renewal is not fatal.
                if clock.now - lastRenewal >= renewEvery {
                    lastRenewal = clock.now
                    let addresses = Array(held.keys) + unrecorded.map(\.0.device.address)
                    do {
                        let kept = try await store.renew(campaign, worker: options.name, addresses: addresses)
                        for address in addresses where !kept.contains(address) {
                            logger.warning("\(address): this worker's lease ran out; another worker may take the device, and this try's end will not be recorded")
                        }
                    } catch {
                        logger.warning("cannot renew leases: \(error)")
                    }
                    var still: [(ClaimedDevice, TryEnding)] = []
                    for (claimed, ending) in unrecorded {
                        if await record(claimed, ending, adapter: nil, summary: &summary, elapsed: clock.now - began) == nil { still.append((claimed, ending)) }
                    }
                    unrecorded = still
                }
            }
            group.cancelAll()
        }
        if let failure { throw failure }
        if Task.isCancelled { throw .database("the worker was cancelled") }
        summary.seconds = (clock.now - began).seconds
        summary.interrupted = stop.isStopped
        summary.status = try await store.status(campaign.name)
        return summary
    }

    /// Records a try's end; true when recorded, false when the lease was lost, nil when the database failed.
    func record(
        _ claimed: ClaimedDevice, _ ending: TryEnding, adapter: String?, summary: inout CampaignWorkerSummary, elapsed: Duration
    ) async -> Bool? {
        do {
            let recorded = try await store.record(campaign, worker: options.name, claimed: claimed, ending: ending)
            if !recorded {
                summary.lostLeases += 1
                logger.warning("\(claimed.device.address): this worker's lease ran out before the try ended; its ending is not recorded")
            }
            if let metrics {
                switch ending {
                case _ where !recorded: metrics.ended(.leaseLost, stage: claimed.stage, bytes: 0, sent: 0, elapsed: elapsed)
                case .updated(_, _, _, let bytes, _, let sent): metrics.ended(.updated, stage: claimed.stage, bytes: bytes, sent: sent, elapsed: elapsed)
                case .alreadyCurrent: metrics.ended(.skipped, stage: claimed.stage, bytes: 0, sent: 0, elapsed: elapsed)
                case .otherVersion: metrics.ended(.otherVersion, stage: claimed.stage, bytes: 0, sent: 0, elapsed: elapsed)
                case .failed(_, _, _, _, let bytes, _, let retryAfter):
                    metrics.ended(retryAfter == nil ? .failed : .retried, stage: claimed.stage, bytes: bytes, sent: bytes, elapsed: elapsed)
                }
            }
            return recorded
        } catch {
            logger.warning("\(claimed.device.address): cannot record the try's end yet: \(error)")
            return nil
        }
    }

    /// How a try's attempt is recorded: a failure another try may cure comes back after the back-off.
    func ending(of attempt: FleetAttempt, claimed: ClaimedDevice, seconds: Double) -> TryEnding {
        switch attempt {
        case .updated(let report):
            return .updated(
                versionBefore: report.versionBefore, versionAfter: report.versionAfter, seconds: seconds,
                bytes: report.bytes, resends: report.statistics.packetsResent, airBytes: report.streamBytes)
        case .alreadyCurrent(let version):
            return .alreadyCurrent(version: version, seconds: seconds)
        case .otherVersion(let version, let reason):
            return .otherVersion(version: version, reason: reason, seconds: seconds)
        case .failed(let error):
            let retry = FleetRunner.worthRetrying(error) && claimed.tryNumber < campaign.attempts
            let delay = campaign.backoffSeconds * Double(1 << min(10, claimed.tryNumber - 1))
            return .failed(
                error: error.message, step: error.step.rawValue, deviceState: error.outcome?.name, seconds: seconds,
                bytes: 0, resends: 0, retryAfter: retry ? delay : nil)
        }
    }

    func result(_ claimed: ClaimedDevice, _ ending: TryEnding, adapter: String?) -> DeviceResult {
        switch ending {
        case .updated(let before, let after, let seconds, let bytes, let resends, let sent):
            var result = DeviceResult(
                device: claimed.device, adapter: adapter, outcome: .updated, versionBefore: before, versionAfter: after,
                seconds: seconds, bytes: bytes, resends: resends, attempts: claimed.tryNumber)
            result.airBytes = sent
            return result
        case .otherVersion(let version, let reason, let seconds):
            var result = DeviceResult(
                device: claimed.device, adapter: adapter, outcome: .otherVersion, versionBefore: version, versionAfter: version,
                seconds: seconds, attempts: claimed.tryNumber)
            result.error = reason
            return result
        case .alreadyCurrent(let version, let seconds):
            return DeviceResult(
                device: claimed.device, adapter: adapter, outcome: .skipped, versionBefore: version, versionAfter: version,
                seconds: seconds, attempts: claimed.tryNumber)
        case .failed(let error, let step, let deviceState, let seconds, _, _, _):
            var result = DeviceResult(device: claimed.device, adapter: adapter, outcome: .failed, seconds: seconds, attempts: claimed.tryNumber)
            result.error = error
            result.step = step
            result.deviceState = deviceState
            return result
        }
    }

    /// How many devices a worker with limited transfer places claims now: one for each place no
    /// transfer is on or on its way to (`unpromised`, less the devices claimed and not yet started),
    /// and one for each `spare` connection of an adapter whose places all transfer, so that a device
    /// is ready when a transfer ends — at most `room`, the free connections.
    ///
    /// The caller gives no spare connections when its last claim found fewer devices than it asked
    /// for. Devices are then scarce (a stage smaller than the workers' connections, or a stage's
    /// end), and claiming for spare connections would take devices that then wait for this worker's
    /// places while other workers' places stand idle. The benchmark found this: a stage of 90
    /// devices over 200 transfer places took two rounds of transfers, its first worker to look
    /// having claimed 75 for its 50 places.
    static func claimSize(room: Int, unpromised: Int, waiting: Int, spare: Int) -> Int {
        max(0, min(room, unpromised - waiting + spare))
    }

    func adapterFor(_ device: FleetDevice, busy: [String: Int]) -> String? {
        FleetRunner.adapter(for: device, among: options.adapters, busy: busy, limit: options.connectionsPerAdapter)
    }
}
#endif
