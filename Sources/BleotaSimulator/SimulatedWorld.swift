import BleotaCodec
import BleotaEngine
import BleotaLink
import Synchronization

/// A device the simulator can host.
public protocol SimulatedPeripheral: AnyObject, Sendable {
    /// Address it advertises now; may change across reboots (Nordic bootloaders
    /// advertise at address + 1).
    var address: String { get async }
    var name: String { get async }
    /// Serves one connection until its link disconnects.
    func serve(_ link: any Link, world: SimulatedWorld) async
    /// Power was cut or the device rebooted: RAM is lost, flash is kept.
    func powerCycle() async
    /// Bytes at the front of each packet that name a characteristic (a
    /// ``/BleotaLink/ChannelFrame``'s channel) rather than travel on air: 1 for a
    /// protocol of several characteristics, 0 otherwise.
    var channelTagBytes: Int { get }
    /// Channels whose packets travel on an LE credit-based channel (SUOTA's image data): they
    /// wait for a credit — a free slot in the device's receive queue — instead of being dropped.
    var creditChannels: Set<UInt8> { get }
    /// Channels written with ATT Write Requests (control points): the device's stack answers each
    /// with a Write Response, and the host sends no other request until it has it.
    var requestChannels: Set<UInt8> { get }
    /// What the device demands of a link and can do to pair.
    var security: SimulatedDeviceSecurity { get }
    /// Whether a packet that finds its receive queue full is dropped or waits on the link
    /// (``/BleotaEngine/FullQueueHandling``).
    var whenQueueFull: FullQueueHandling { get }
}

extension SimulatedPeripheral {
    public var channelTagBytes: Int { 0 }
    public var creditChannels: Set<UInt8> { [] }
    public var requestChannels: Set<UInt8> { [] }
    public var security: SimulatedDeviceSecurity { .open }
    public var whenQueueFull: FullQueueHandling { .drop }
}

/// The simulated radio neighbourhood: devices, their connections, the link
/// model and faults, all on one virtual clock and one seed.
///
/// `BleotaSimulator` is how bleota is tested and demonstrated without a radio:
/// a BLE link model (PHY, connection interval, packets per connection event,
/// data length, MTU, device buffer and flash timing, faults) and simulated
/// devices that speak the same protocols as real ones, on the virtual clock of
/// a ``/BleotaLink/SimulationRuntime`` (from `BleotaLink`). The engine and protocol code
/// under test is the real `async` code, unchanged, and a seed gives one
/// byte-identical run.
public final class SimulatedWorld: Sendable {
    public enum FaultStream: String, CaseIterable, Sendable {
        case writeLoss, notificationLoss, corruption, duplication, disconnect
        /// Passkeys and comparison numbers pairing draws (not a fault, but seeded like one).
        case pairing
    }

    enum OneShotFault { case disconnect, powerLoss, reboot }

    struct Entry {
        var peripheral: any SimulatedPeripheral
        /// Not advertising (rebooting) until this time.
        var offlineUntil: Duration = .zero
        var connection: SimulatedConnection?
        var lastAddress: String
    }

    struct State {
        var entries: [Entry] = []
        var random: [FaultStream: SeededRandom]
        var bytesToDevice = 0
        var firedDisconnect = false
        var firedPowerLoss = false
        var firedReboot = false
        var firedTimedDisconnect = false
        var statistics = LinkStatistics()
        var pairing = PairingStatistics()
        var trace: [String]?
        /// The keys the host keeps with each device it paired with (the device keeps its half).
        var bonds: [ObjectIdentifier: LinkSecurityState] = [:]
        var pairingAgent: any PairingAgent = PairingPolicy.justWorks
    }

    public let runtime: SimulationRuntime
    /// The world's own tasks (connection events, device halves serving, scheduled faults),
    /// cancelled and awaited by ``shutDown()``.
    private let background = Mutex<[Task<Void, Never>]>([])
    public let model: LinkModel
    public let faults: LinkFaults
    public let seed: UInt64
    private let state: Mutex<State>

    /// The host's adapter, when it is shared with other worlds (a fleet): its connections take turns on one radio.
    public var adapter: SimulatedAdapter? { adapterSlot.withLock { $0 } }
    private let adapterSlot: Mutex<SimulatedAdapter?>

    public init(
        runtime: SimulationRuntime, model: LinkModel, faults: LinkFaults = LinkFaults(), seed: UInt64 = 1,
        adapter: SimulatedAdapter? = nil
    ) {
        self.runtime = runtime
        adapterSlot = Mutex(adapter)
        self.model = model
        self.faults = faults
        self.seed = seed
        var streams: [FaultStream: SeededRandom] = [:]
        for stream in FaultStream.allCases { streams[stream] = SeededRandom(seed: seed, stream: stream.rawValue) }
        state = Mutex(State(random: streams))
    }

    public var clock: SimulationClock { runtime.clock }

    /// Later connections go through `adapter` (a fleet moves a device between tries).
    public func use(adapter: SimulatedAdapter?) { adapterSlot.withLock { $0 = adapter } }

    /// Starts one of the world's own tasks on its runtime.
    func spawn(_ body: @escaping @Sendable () async -> Void) {
        let task = Task(executorPreference: runtime) { await body() }
        background.withLock { $0.append(task) }
    }

    /// Ends the world: cancels its tasks and waits for them, so none outlives the simulation.
    public func shutDown() async {
        let tasks = background.withLock { tasks -> [Task<Void, Never>] in
            defer { tasks = [] }
            return tasks
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    /// Starts recording every delivered packet (time in µs, direction, first
    /// byte, size, CRC-32, outcome):
    /// two runs with one seed must produce the same transcript.
    public func startTrace() { state.withLock { $0.trace = [] } }
    public var trace: [String] { state.withLock { $0.trace ?? [] } }

    func record(_ direction: String, _ packet: [UInt8], outcome: String) {
        let now = clock.now
        state.withLock { state in
            guard state.trace != nil else { return }
            let micros = now.components.seconds * 1_000_000 + now.components.attoseconds / 1_000_000_000_000
            let opcode = packet.first.map { String($0, radix: 16) } ?? "-"
            state.trace!.append("\(micros)us \(direction) op=\(opcode) len=\(packet.count) crc=\(String(CRC32.checksum(packet), radix: 16)) \(outcome)")
        }
    }

    /// Answers what pairing asks of the host's user (``/BleotaLink/PairingPolicy/justWorks`` until set).
    public var pairingAgent: any PairingAgent { state.withLock { $0.pairingAgent } }
    public func setPairingAgent(_ agent: any PairingAgent) { state.withLock { $0.pairingAgent = agent } }

    /// The bond the host keeps with `peripheral`, if it paired with it.
    func bond(for peripheral: ObjectIdentifier) -> LinkSecurityState? { state.withLock { $0.bonds[peripheral] } }
    func storeBond(_ security: LinkSecurityState, for peripheral: ObjectIdentifier) { state.withLock { $0.bonds[peripheral] = security } }

    /// Pairing totals over every connection so far.
    public var pairingStatistics: PairingStatistics {
        state.withLock { state in
            var total = state.pairing
            for entry in state.entries { if let connection = entry.connection { total.add(connection.pairingStatistics) } }
            return total
        }
    }

    /// Totals over every connection so far (closed ones included).
    public var statistics: LinkStatistics {
        state.withLock { state in
            var total = state.statistics
            for entry in state.entries { if let connection = entry.connection { total.add(connection.statistics) } }
            return total
        }
    }

    public func add(_ peripheral: any SimulatedPeripheral) async {
        let address = await peripheral.address
        state.withLock { $0.entries.append(Entry(peripheral: peripheral, lastAddress: address)) }
    }

    /// Devices advertising now.
    public func scan() async -> [(address: String, name: String)] {
        let now = clock.now
        let candidates = state.withLock { state in
            state.entries.filter { $0.offlineUntil <= now && $0.connection == nil }.map(\.peripheral)
        }
        var found: [(String, String)] = []
        for peripheral in candidates { found.append((await peripheral.address, await peripheral.name)) }
        return found
    }

    /// Connects to the device advertising as `address`, waiting up to `timeout`
    /// for it to appear (it may be rebooting).
    public func connect(to address: String, timeout: Duration) async throws(LinkError) -> SimulatedConnection.HostEnd {
        let deadline = clock.now + timeout
        while true {
            let now = clock.now
            let candidates = state.withLock { state in
                state.entries.indices.filter { state.entries[$0].offlineUntil <= now && state.entries[$0].connection == nil }
                    .map { ($0, state.entries[$0].peripheral) }
            }
            for (index, peripheral) in candidates where await peripheral.address == address {
                // Connection setup takes a few connection intervals on air.
                try? await clock.sleep(for: model.connectionInterval * 3)
                let connection = SimulatedConnection(
                    model: model, world: self, address: address, tagBytes: peripheral.channelTagBytes,
                    creditChannels: peripheral.creditChannels, requestChannels: peripheral.requestChannels, adapter: self.adapter,
                    deviceSecurity: peripheral.security, whenQueueFull: peripheral.whenQueueFull, peripheral: ObjectIdentifier(peripheral))
                let connectedAt = clock.now
                let ready = state.withLock { state -> Bool in
                    guard state.entries[index].connection == nil, state.entries[index].offlineUntil <= connectedAt else { return false }
                    state.entries[index].connection = connection
                    state.entries[index].lastAddress = address
                    return true
                }
                guard ready else { break }
                let eventClock = self.clock
                spawn { await connection.runEvents(clock: eventClock) }
                spawn { await peripheral.serve(connection.device, world: self) }
                scheduleTimedDisconnect(connection)
                return connection.host
            }
            guard clock.now < deadline else {
                let advertising = await scan().map(\.address)
                throw .unreachable("no device advertising as \(address) (advertising: \(advertising.isEmpty ? "none" : advertising.joined(separator: ", ")))")
            }
            do { try await clock.sleep(for: .milliseconds(50)) } catch { throw .cancelled }
        }
    }

    private func scheduleTimedDisconnect(_ connection: SimulatedConnection) {
        guard let at = faults.disconnectAtTime else { return }
        let fire = state.withLock { state -> Bool in
            guard !state.firedTimedDisconnect else { return false }
            return true
        }
        guard fire else { return }
        let clock = self.clock
        spawn { [self] in
            try? await clock.sleep(until: at)
            let first = state.withLock { state -> Bool in
                defer { state.firedTimedDisconnect = true }
                return !state.firedTimedDisconnect
            }
            if first && !connection.isClosed { connection.close("simulated disconnect at \(at)") }
        }
    }

    func connectionClosed(_ connection: SimulatedConnection) {
        state.withLock { state in
            for index in state.entries.indices where state.entries[index].connection === connection {
                state.statistics.add(connection.statistics)
                state.pairing.add(connection.pairingStatistics)
                state.entries[index].connection = nil
            }
        }
    }

    // MARK: Faults

    func draw(_ stream: FaultStream) -> Bool {
        let probability: Double
        switch stream {
        case .writeLoss: probability = faults.writeLoss
        case .notificationLoss: probability = faults.notificationLoss
        case .corruption: probability = faults.corruption
        case .duplication: probability = faults.duplication
        case .disconnect: probability = faults.disconnectProbability
        case .pairing: probability = 0
        }
        return state.withLock { $0.random[stream]!.chance(probability) }
    }

    func drawInteger(_ stream: FaultStream, below limit: UInt64) -> UInt64 {
        state.withLock { $0.random[stream]!.next() % max(1, limit) }
    }

    /// Counts host → device bytes and says whether a one-shot fault fires now.
    func faultAfterBytesToDevice(_ count: Int, now: Duration) -> OneShotFault? {
        let fault = state.withLock { state -> OneShotFault? in
            state.bytesToDevice += count
            if let limit = faults.powerLossAfterBytes, !state.firedPowerLoss, state.bytesToDevice >= limit {
                state.firedPowerLoss = true
                return .powerLoss
            }
            if let limit = faults.rebootAfterBytes, !state.firedReboot, state.bytesToDevice >= limit {
                state.firedReboot = true
                return .reboot
            }
            if let limit = faults.disconnectAfterBytes, !state.firedDisconnect, state.bytesToDevice >= limit {
                state.firedDisconnect = true
                return .disconnect
            }
            return nil
        }
        if fault != nil { return fault }
        return draw(.disconnect) ? .disconnect : nil
    }

    /// The device behind `connection` loses power: the link drops, RAM is lost,
    /// it advertises again after its reboot time.
    func cutPower(address: String, connection: SimulatedConnection) {
        connection.close("device lost power")
        restart(connection: connection)
    }

    func rebootDevice(address: String, connection: SimulatedConnection) {
        connection.close("device rebooted")
        restart(connection: connection)
    }

    private func restart(connection: SimulatedConnection) {
        let now = clock.now
        let peripheral = state.withLock { state -> (any SimulatedPeripheral)? in
            guard let index = state.entries.firstIndex(where: { $0.lastAddress == connection.address }) else { return nil }
            state.entries[index].offlineUntil = now + model.rebootTime
            return state.entries[index].peripheral
        }
        if let peripheral { spawn { await peripheral.powerCycle() } }
    }

    /// A device that has decided to reboot in `delay` (it answers first, then
    /// resets) takes no new connection from now on: a host that drops the link
    /// and reconnects at once must not reach the firmware that is going away.
    public func goingDown(_ peripheral: any SimulatedPeripheral, in delay: Duration, extraDowntime: Duration = .zero) {
        let until = clock.now + delay + model.rebootTime + extraDowntime
        state.withLock { state in
            guard let index = state.entries.firstIndex(where: { $0.peripheral === peripheral }) else { return }
            state.entries[index].offlineUntil = max(state.entries[index].offlineUntil, until)
        }
    }

    /// A device reboots itself (after ENTER_BOOTLOADER or ACTIVATE): its link
    /// drops and it is gone for its reboot time.
    /// `extraDowntime` adds to the model's reboot time (an MCUboot swap, say).
    public func reboot(_ peripheral: any SimulatedPeripheral, extraDowntime: Duration = .zero) async {
        let now = clock.now
        let connection = state.withLock { state -> SimulatedConnection? in
            guard let index = state.entries.firstIndex(where: { $0.peripheral === peripheral }) else { return nil }
            state.entries[index].offlineUntil = now + model.rebootTime + extraDowntime
            return state.entries[index].connection
        }
        connection?.close("device rebooted")
        await peripheral.powerCycle()
    }
}
