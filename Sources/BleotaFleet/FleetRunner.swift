import BleotaEngine
import BleotaLink
import Synchronization

/// One try at one device, as the caller's update function reports it.
public enum FleetAttempt: Sendable {
    case updated(UpdateReport)
    /// The device already runs the target version: nothing was sent.
    case alreadyCurrent(version: String)
    /// The device runs a version the update is not for (`--from-version`), or cannot say which:
    /// nothing was sent, and no try will change that. `reason` says which version, and why.
    case otherVersion(version: String?, reason: String)
    case failed(TransferError)
}

/// How a fleet runs: which adapters, how many connections each, how often a device is tried.
public struct FleetOptions: Sendable, Hashable {
    /// The adapters to spread devices over (hci0, hci1; simulated ones by name).
    public var adapters: [String]
    /// Updates running at once on one adapter, each on its own connection. A controller holds
    /// only a few connections (many 4–8), and every connection shares its radio: how many of
    /// them transfer at once is ``transfersPerAdapter``; the rest only connect, reboot and
    /// confirm, and more of them add connection setup and supervision risk, not speed.
    public var connectionsPerAdapter: Int
    /// Transfers running at once on one adapter, or nil for as many as its connections. The
    /// other connections get devices ready meanwhile (connected, in their bootloader) or finish
    /// them (verify, activate, confirm), so the transfers follow one another without the radio
    /// waiting for reboots (``TransferGate``).
    public var transfersPerAdapter: Int?
    /// The longest a ready device waits for a transfer place before it transfers beside the others
    /// (``GatedTransferTurn/maximumWait``).
    public var maximumTransferWait: Duration = Self.defaultMaximumTransferWait
    /// Tries per device before it is reported failed.
    public var attempts: Int
    /// The pause before a device's second try; it doubles for each try after.
    public var backoff: Duration
    /// The least time between two starts on one adapter, so its links do not connect, reboot
    /// and transfer in step (in step they leave the radio idle together and contend together).
    public var startSpacing: Duration

    /// Two transferring and two getting ready or finishing: with 256 KiB–1 MiB images a device
    /// spends 1.5 s beside its transfer connecting, rebooting and confirming, which a second spare
    /// connection covers (`bleota-bench --only fleet`: 3 connections 79.6 %, 4 84.7 %, 5 82.6 % of
    /// the air time at 256 KiB).
    public static let defaultConnectionsPerAdapter = 4
    /// On the air-time model two busy links fill an adapter's radio (10 packets of 244 bytes per
    /// 15 ms interval on `2m-dle`), three leave 10 % of it idle and one 20 %
    /// (`protocols/link-model.md`, "Several connections on one adapter").
    public static let defaultTransfersPerAdapter = 2
    /// Half of the 120 s after which Nordic's Secure DFU bootloader gives up on an idle connection.
    public static let defaultMaximumTransferWait = Duration.seconds(60)
    /// Whether a device queued for a transfer place moves to another adapter where one is free
    /// and no device is left to start (the end of a fleet; devices that name their adapter stay).
    /// Without it an adapter that was given one device more, or a slow one, transfers alone at
    /// the end while others idle. The move ends the try before any byte is sent and starts it
    /// again on the other adapter, as a retry after a lost link would, without counting a try.
    public var movesQueuedDevices = true

    public init(
        adapters: [String], connectionsPerAdapter: Int = Self.defaultConnectionsPerAdapter,
        transfersPerAdapter: Int? = Self.defaultTransfersPerAdapter, attempts: Int = 3,
        backoff: Duration = .seconds(5), startSpacing: Duration = .zero
    ) {
        self.adapters = adapters
        self.connectionsPerAdapter = connectionsPerAdapter
        self.transfersPerAdapter = transfersPerAdapter
        self.attempts = attempts
        self.backoff = backoff
        self.startSpacing = startSpacing
    }
}

/// Ctrl-C for a fleet: once set, no device starts; running ones finish their update.
public final class FleetStopSignal: Sendable {
    private let stopped = Mutex(false)
    public init() {}
    public func stop() { stopped.withLock { $0 = true } }
    public var isStopped: Bool { stopped.withLock { $0 } }
}

/// Updates many devices at once: each with its own update (the caller's
/// `update` function: a protocol's host half on its own connection), at most
/// ``FleetOptions/connectionsPerAdapter`` at a time per adapter, failed tries
/// retried after a back-off that doubles, a device that already runs the
/// target left alone. One device that hangs or fails holds only its own slot.
///
/// Structured: every device's try is a child task of ``run()``, and back-off
/// waits are timers in the same group, so nothing outlives the run.
public struct FleetRunner: Sendable {
    /// One try at `device` through `adapter`: the host half it makes is given `transferTurn`
    /// (``/BleotaEngine/HostContext/transferTurn``; nil when transfers are not limited apart from
    /// connections), and reports its events to `onEvent`.
    public typealias Update =
        @Sendable (
            _ device: FleetDevice, _ adapter: String, _ transferTurn: GatedTransferTurn?,
            _ onEvent: @escaping @Sendable (UpdateEvent) -> Void
        ) async -> FleetAttempt

    public let devices: [FleetDevice]
    public let options: FleetOptions
    public let clock: any BleotaClock
    public let stop: FleetStopSignal
    public let onEvent: @Sendable (FleetEvent) -> Void
    public let update: Update

    public init(
        devices: [FleetDevice], options: FleetOptions, clock: any BleotaClock, stop: FleetStopSignal = FleetStopSignal(),
        onEvent: @escaping @Sendable (FleetEvent) -> Void = { _ in }, update: @escaping Update
    ) {
        self.devices = devices
        self.options = options
        self.clock = clock
        self.stop = stop
        self.onEvent = onEvent
        self.update = update
    }

    /// Where each device stands between tries.
    struct Pending {
        var index: Int
        var attempt: Int
        var notBefore: Duration
        /// Withdrawn from another adapter's queue for a transfer place: goes where a place is free.
        var moved = false
    }

    /// The running totals of one device over its tries.
    struct Tally {
        var attempts = 0
        var seconds = 0.0
        var bytes = 0
        var resends = 0
        var versionBefore: String?
        /// The last try's failure, for a device stopped while it waited for another try.
        var lastError: TransferError?
    }

    enum Completion: Sendable {
        case tried(index: Int, adapter: String, attempt: FleetAttempt, seconds: Double, tryNumber: Int, withdrawn: Bool)
        case timer
        /// A transfer place was given back with no one waiting for it.
        case placeFreed
    }

    /// Runs every device to an end; returns one result per device, in the list's order.
    public func run() async -> (results: [DeviceResult], summary: FleetSummary) {
        let began = clock.now
        var pending = devices.indices.map { Pending(index: $0, attempt: 1, notBefore: began) }
        var results = [DeviceResult?](repeating: nil, count: devices.count)
        var tallies = [Tally](repeating: Tally(), count: devices.count)
        var busy: [String: Int] = Dictionary(uniqueKeysWithValues: options.adapters.map { ($0, 0) })
        var lastStart: [String: Duration] = [:]
        let freed = Mailbox<Bool>()
        let placeFreed: @Sendable () -> Void = { freed.put(true) }
        let places = TransferPlaces(
            adapters: options.adapters, connectionsPerAdapter: options.connectionsPerAdapter,
            transfersPerAdapter: options.transfersPerAdapter, maximumWait: options.maximumTransferWait,
            onPlaceFree: options.movesQueuedDevices ? placeFreed : nil)
        /// The turns of tries started after a move, until they end: one not yet holding a place is on its way to one.
        var movedTurns: [Int: GatedTransferTurn] = [:]
        var announcedStop = false
        await withTaskGroup(of: Completion.self) { group in
            var running = 0
            var timerSet = false
            var listening = false
            while true {
                if stop.isStopped && !announcedStop {
                    announcedStop = true
                    onEvent(.stopping)
                }
                // Start what may start now.
                if !stop.isStopped {
                    let now = clock.now
                    var index = 0
                    while index < pending.count {
                        let item = pending[index]
                        let spaced = busy.filter { adapter, _ in lastStart[adapter].map { now - $0 < options.startSpacing } ?? false }
                        let preferred = item.moved ? places.adaptersWithFreePlaces : []
                        guard item.notBefore <= now,
                            let adapter = adapterFor(
                                devices[item.index], busy: busy.merging(spaced.mapValues { _ in Int.max }) { $1 },
                                preferring: preferred)
                        else {
                            index += 1
                            continue
                        }
                        pending.remove(at: index)
                        busy[adapter, default: 0] += 1
                        lastStart[adapter] = now
                        running += 1
                        let device = devices[item.index]
                        onEvent(.started(device: device, adapter: adapter, attempt: item.attempt))
                        let turn = places.turn(on: adapter, for: device, movable: options.movesQueuedDevices, onEvent: onEvent)
                        if item.moved, let turn { movedTurns[item.index] = turn }
                        group.addTask { [clock, update, onEvent] in
                            let start = clock.now
                            let attempt = await update(device, adapter, turn) { event in
                                onEvent(Self.fleetEvent(event, device: device))
                            }
                            // A try that ended inside its transfer step (a failure) gives its place back here.
                            turn?.release()
                            let elapsed = clock.now - start
                            return .tried(
                                index: item.index, adapter: adapter, attempt: attempt,
                                seconds: elapsed.seconds, tryNumber: item.attempt, withdrawn: turn?.wasWithdrawn ?? false)
                        }
                    }
                    // Nothing can start now: a place free on one adapter goes to a device queued at another.
                    if options.movesQueuedDevices, pending.allSatisfy({ $0.notBefore > now }) {
                        let onTheirWay = movedTurns.values.filter { !$0.isHeld }.count
                        var free = places.freePlaces - onTheirWay
                        while free > 0, places.withdrawFromLongestQueue() { free -= 1 }
                    }
                    if options.movesQueuedDevices, !listening, places.limitsTransfers {
                        listening = true
                        group.addTask {
                            _ = try? await freed.take()
                            return .placeFreed
                        }
                    }
                }
                // With no device left to start, a transfer alone on its adapter stays alone (its link may
                // take the shortest interval: GatedTransferTurn).
                places.setOpenToNewcomers(!(pending.isEmpty || stop.isStopped))
                if running == 0 && (pending.isEmpty || stop.isStopped) { break }
                // Wake for the earliest back-off or spacing, unless a timer is already set.
                let spacingEnds = lastStart.values.map { $0 + options.startSpacing }.filter { $0 > clock.now }.min()
                let wakes = (pending.map(\.notBefore).filter { $0 > clock.now } + (pending.isEmpty ? [] : [spacingEnds].compactMap { $0 })).min()
                if !timerSet, !stop.isStopped, let next = wakes {
                    timerSet = true
                    group.addTask { [clock] in
                        try? await clock.sleep(until: next)
                        return .timer
                    }
                }
                guard let completion = await group.next() else { break }
                switch completion {
                case .timer:
                    timerSet = false
                case .placeFreed:
                    listening = false
                    while freed.poll() != nil {}
                case .tried(let index, let adapter, let attempt, let seconds, let tryNumber, let withdrawn):
                    running -= 1
                    busy[adapter, default: 1] -= 1
                    movedTurns[index] = nil
                    let device = devices[index]
                    tallies[index].seconds += seconds
                    if withdrawn, case .failed = attempt, !stop.isStopped {
                        // Not a failure: the same try starts again at once where a place is free.
                        onEvent(.note(device: device, text: "moves from \(adapter): a transfer place is free on another adapter"))
                        pending.insert(Pending(index: index, attempt: tryNumber, notBefore: clock.now, moved: true), at: 0)
                        continue
                    }
                    tallies[index].attempts += 1
                    switch attempt {
                    case .updated(let report):
                        tallies[index].bytes += report.bytes
                        tallies[index].resends += report.statistics.packetsResent
                        let tally = tallies[index]
                        var result = DeviceResult(
                            device: device, adapter: adapter, outcome: .updated,
                            versionBefore: tally.versionBefore ?? report.versionBefore, versionAfter: report.versionAfter,
                            seconds: tally.seconds, bytes: tally.bytes, resends: tally.resends, attempts: tally.attempts)
                        result.airBytes = report.streamBytes
                        results[index] = result
                        onEvent(.finished(result))
                    case .alreadyCurrent(let version):
                        let tally = tallies[index]
                        let result = DeviceResult(
                            device: device, adapter: adapter, outcome: .skipped, versionBefore: version, versionAfter: version,
                            seconds: tally.seconds, attempts: tally.attempts)
                        results[index] = result
                        onEvent(.finished(result))
                    case .otherVersion(let version, let reason):
                        let tally = tallies[index]
                        var result = DeviceResult(
                            device: device, adapter: adapter, outcome: .otherVersion, versionBefore: version, versionAfter: version,
                            seconds: tally.seconds, attempts: tally.attempts)
                        result.error = reason
                        results[index] = result
                        onEvent(.finished(result))
                    case .failed(let error):
                        tallies[index].lastError = error
                        let tally = tallies[index]
                        if tally.attempts < options.attempts, Self.worthRetrying(error), !stop.isStopped {
                            let delay = options.backoff * (1 << min(10, tally.attempts - 1))
                            onEvent(.retrying(device: device, error: error, delay: delay))
                            pending.append(Pending(index: index, attempt: tally.attempts + 1, notBefore: clock.now + delay))
                        } else {
                            let result = DeviceResult(
                                device: device, adapter: adapter, outcome: .failed, versionBefore: tally.versionBefore,
                                seconds: tally.seconds, bytes: tally.bytes, resends: tally.resends,
                                attempts: tally.attempts, error: error)
                            results[index] = result
                            onEvent(.finished(result))
                        }
                    }
                }
            }
            group.cancelAll()
        }
        // Devices the stop caught before their first try are not started; one waiting for another try
        // ends with its last failure.
        for index in devices.indices where results[index] == nil {
            let tally = tallies[index]
            let result =
                if let error = tally.lastError {
                    DeviceResult(
                        device: devices[index], adapter: nil, outcome: .failed, versionBefore: tally.versionBefore, seconds: tally.seconds,
                        bytes: tally.bytes, resends: tally.resends, attempts: tally.attempts, error: error)
                } else {
                    DeviceResult(device: devices[index], adapter: nil, outcome: .notStarted, seconds: tally.seconds, attempts: tally.attempts)
                }
            results[index] = result
            onEvent(.finished(result))
        }
        let final = results.compactMap { $0 }
        let elapsed = clock.now - began
        let seconds = elapsed.seconds
        return (final, FleetSummary(results: final, seconds: seconds, interrupted: stop.isStopped))
    }

    /// The device's own adapter if it names one and it has room; else the adapter with the fewest
    /// running updates that has room; nil when none has.
    func adapterFor(_ device: FleetDevice, busy: [String: Int], preferring preferred: Set<String> = []) -> String? {
        let withRoom = options.adapters.filter { preferred.contains($0) && busy[$0, default: 0] < options.connectionsPerAdapter }
        if device.adapter == nil, !withRoom.isEmpty {
            return Self.adapter(for: device, among: withRoom, busy: busy, limit: options.connectionsPerAdapter)
        }
        return Self.adapter(for: device, among: options.adapters, busy: busy, limit: options.connectionsPerAdapter)
    }

    /// The adapter a device's try goes through: its own if it names one and that has room, else the
    /// least busy of `adapters` with room (fewer than `limit` updates); nil when none has.
    public static func adapter(for device: FleetDevice, among adapters: [String], busy: [String: Int], limit: Int) -> String? {
        if let fixed = device.adapter {
            return busy[fixed, default: 0] < limit ? fixed : nil
        }
        return adapters.filter { busy[$0, default: 0] < limit }.min { busy[$0, default: 0] < busy[$1, default: 0] }
    }

    /// A failure another try may cure: a lost link, a timeout, a transfer spoiled on the way.
    /// Not a refusal of the image, a bad input, or a device that already runs the new image.
    public static func worthRetrying(_ error: TransferError) -> Bool {
        switch error.code {
        case .deviceRefused, .badInput, .unsupported, .invalidTuning, .otherVersion, .pairingFailed: return false
        case .linkLost, .timeout, .verificationFailed, .protocolViolation, .confirmFailed: break
        }
        switch error.outcome {
        case .newImageConfirmed?, .newImageUnconfirmed?: return false
        case nil, .oldImage?, .inBootloader?, .unknown?: return true
        }
    }

    public static func fleetEvent(_ event: UpdateEvent, device: FleetDevice) -> FleetEvent {
        switch event {
        case .step(let step): return .step(device: device, step: step)
        case .note(let text): return .note(device: device, text: text)
        case .progress(let progress):
            let seconds = progress.elapsed.seconds
            return .progress(
                device: device, acknowledged: progress.bytesAcknowledged, total: progress.totalBytes,
                bytesPerSecond: seconds > 0 ? Double(progress.bytesAcknowledged) / seconds : 0, resends: progress.packetsResent)
        }
    }
}

/// The transfer places of a fleet's adapters (one ``TransferGate`` each when
/// transfers are limited below connections), shared by ``FleetRunner`` and a campaign worker.
public struct TransferPlaces: Sendable {
    let gates: [String: TransferGate]
    /// The adapters in the order given, for choices that must not depend on hashing.
    let order: [String]
    let maximumWait: Duration

    /// `onPlaceFree` is called when a place is given back with no one waiting for it (see
    /// ``TransferGate/init(capacity:onPlaceFree:)``).
    public init(
        adapters: [String], connectionsPerAdapter: Int, transfersPerAdapter: Int?, maximumWait: Duration,
        onPlaceFree: (@Sendable () -> Void)? = nil
    ) {
        self.maximumWait = maximumWait
        order = adapters
        if let transfers = transfersPerAdapter, transfers < connectionsPerAdapter {
            gates = Dictionary(uniqueKeysWithValues: adapters.map { ($0, TransferGate(capacity: transfers, onPlaceFree: onPlaceFree ?? {})) })
        } else {
            gates = [:]
        }
    }

    /// Says on every gate whether devices not yet started may still come (``TransferGate/setOpenToNewcomers(_:)``).
    public func setOpenToNewcomers(_ open: Bool) {
        for gate in gates.values { gate.setOpenToNewcomers(open) }
    }

    /// Whether transfers are limited apart from connections (there are gates).
    public var limitsTransfers: Bool { !gates.isEmpty }
    /// Places free now, over every adapter.
    public var freePlaces: Int { gates.values.reduce(0) { $0 + $1.freePlaces } }
    /// Places no transfer is on or on its way to, over every adapter (``TransferGate/unpromisedPlaces``).
    public var unpromisedPlaces: Int { gates.values.reduce(0) { $0 + $1.unpromisedPlaces } }
    /// The adapters whose every place holds a transfer (``TransferGate/allPlacesTransferring``).
    public var adaptersTransferringAtCapacity: [String] { order.filter { gates[$0]?.allPlacesTransferring == true } }
    /// The adapters with a place free now.
    public var adaptersWithFreePlaces: Set<String> { Set(gates.filter { $0.value.freePlaces > 0 }.keys) }

    /// Sends the newest movable device queued at the adapter with the most of them to start again
    /// elsewhere; false when no device may move.
    @discardableResult
    public func withdrawFromLongestQueue() -> Bool {
        let queues = order.compactMap { name in gates[name].map { (name: name, movable: $0.movableWaiters) } }.filter { $0.movable > 0 }
        guard let longest = queues.max(by: { $0.movable < $1.movable }) else { return false }
        return gates[longest.name]?.withdrawNewestWaiter() ?? false
    }

    /// A try's turn on `adapter` (nil when transfers are not limited), reporting `queued` for `device`
    /// when it has to wait. `movable`: a device not tied to its adapter may be withdrawn to another.
    public func turn(
        on adapter: String, for device: FleetDevice, movable: Bool = false,
        onEvent: @escaping @Sendable (FleetEvent) -> Void
    ) -> GatedTransferTurn? {
        gates[adapter].map { gate in
            GatedTransferTurn(gate: gate, maximumWait: maximumWait, movable: movable && device.adapter == nil) { onEvent(.queued(device: device)) }
        }
    }
}
