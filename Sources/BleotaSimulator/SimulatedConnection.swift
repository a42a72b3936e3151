import BleotaATT
import BleotaEngine
import BleotaLink
import Synchronization

/// Counters of one simulated connection (or a whole world).
public struct LinkStatistics: Sendable, Hashable, Codable {
    public var packetsToDevice = 0
    public var bytesToDevice = 0
    public var packetsToHost = 0
    public var bytesToHost = 0
    public var lostToDevice = 0
    public var lostToHost = 0
    /// Dropped because the device's receive queue was full.
    public var droppedByDeviceBuffer = 0
    public var corrupted = 0
    public var duplicated = 0
    public var connectionEvents = 0
    public var disconnects = 0
    /// Connection updates (interval changes the host asked for) applied at their instants.
    public var connectionUpdates = 0
    /// Time the radio was busy.
    public var airTime: Duration = .zero

    public init() {}

    mutating func add(_ other: LinkStatistics) {
        packetsToDevice += other.packetsToDevice
        bytesToDevice += other.bytesToDevice
        packetsToHost += other.packetsToHost
        bytesToHost += other.bytesToHost
        lostToDevice += other.lostToDevice
        lostToHost += other.lostToHost
        droppedByDeviceBuffer += other.droppedByDeviceBuffer
        corrupted += other.corrupted
        duplicated += other.duplicated
        connectionEvents += other.connectionEvents
        disconnects += other.disconnects
        connectionUpdates += other.connectionUpdates
        airTime += other.airTime
    }
}

/// One simulated BLE connection: a host end and a device end, both ``/BleotaLink/Link``s,
/// with connection events moving packets between them under the link model.
public final class SimulatedConnection: Sendable {
    /// What the device's side sends: a packet of its half, or the Write Response its stack gives a request.
    enum DeviceOutgoing {
        case packet([UInt8])
        case writeResponse

        /// Link-layer fragments: a Write Response is its ATT opcode and L2CAP's header, 5 bytes.
        func fragments(_ model: LinkModel, tagBytes: Int) -> [Int] {
            switch self {
            case .packet(let packet): model.fragments(bytes: max(0, packet.count - tagBytes))
            case .writeResponse: [SimulatedConnection.writeResponseBytes]
            }
        }
    }

    /// An ATT Write Response on air: opcode (1) and the L2CAP header (4).
    static let writeResponseBytes = 1 + 4

    struct State {
        var hostQueue: [[UInt8]] = []
        var deviceQueue: [DeviceOutgoing] = []
        /// Fragments still to send of the packet on air, each way.
        var hostCurrent: (packet: [UInt8], fragments: [Int])?
        var deviceCurrent: (packet: DeviceOutgoing, fragments: [Int])?
        var sendWaiters: [CheckedContinuation<Void, Never>] = []
        /// A Write Request sent whose Write Response has not reached the host, and the requests waiting for it.
        var requestOutstanding = false
        var requestWaiters: [CheckedContinuation<Void, Never>] = []
        /// Packets waiting in the device's receive queue, and whether one is being processed.
        var deviceQueued = 0
        var deviceProcessing = false
        /// CPU time the device owes for packets it had to drop (see deliverToDevice).
        var dropDebt = Duration.zero
        /// Packets on air or crossing that hold a place of the device's queue: a credit-channel packet's
        /// credit, or any packet of a device whose link waits for room (``waitsForRoom(_:)``).
        var placesInFlight = 0
        var closed = false
        var reason = ""
        var statistics = LinkStatistics()
        /// The connection interval in force, and one the host asked for that no update carries yet.
        var interval: Duration
        var requestedInterval: Duration?
        /// What protects the link: unencrypted until the host pairs or uses a bond.
        var security = LinkSecurityState.unencrypted
        var pairing = PairingStatistics()
    }

    public let model: LinkModel
    let world: SimulatedWorld
    let state: Mutex<State>
    let hostInbox = Mailbox<[UInt8]>()
    let deviceInbox = Mailbox<[UInt8]>()
    let kick = Mailbox<Void>()
    public let host: HostEnd
    public let device: DeviceEnd
    let address: String

    /// Bytes of each packet that name a characteristic and cost no air time (``SimulatedPeripheral/channelTagBytes``).
    let tagBytes: Int
    /// Channels carried on an LE credit-based channel (``SimulatedPeripheral/creditChannels``).
    let creditChannels: Set<UInt8>
    /// Channels written with ATT Write Requests (``SimulatedPeripheral/requestChannels``).
    let requestChannels: Set<UInt8>
    /// Whether a packet that would find the device's queue full is dropped or waits (``SimulatedPeripheral/whenQueueFull``).
    let whenQueueFull: FullQueueHandling

    /// The host's controller, when its radio is shared with other connections.
    let adapter: SimulatedAdapter?
    /// What the device demands of the link and can do to pair.
    let deviceSecurity: SimulatedDeviceSecurity
    /// The device, for the bond the world keeps with it.
    let peripheral: ObjectIdentifier

    init(
        model: LinkModel, world: SimulatedWorld, address: String, tagBytes: Int = 0, creditChannels: Set<UInt8> = [],
        requestChannels: Set<UInt8> = [], adapter: SimulatedAdapter? = nil, deviceSecurity: SimulatedDeviceSecurity = .open,
        whenQueueFull: FullQueueHandling = .drop, peripheral: ObjectIdentifier? = nil
    ) {
        self.deviceSecurity = deviceSecurity
        self.whenQueueFull = whenQueueFull
        self.peripheral = peripheral ?? ObjectIdentifier(world)
        self.model = model
        self.world = world
        self.state = Mutex(State(interval: model.connectionInterval))
        self.adapter = adapter
        self.address = address
        self.tagBytes = tagBytes
        self.creditChannels = tagBytes > 0 ? creditChannels : []
        self.requestChannels = tagBytes > 0 ? requestChannels : []
        // The host learns the MTU, not the link layer's fragment size: it sizes its writes as over BlueZ.
        let parameters = LinkParameters(
            maximumPayload: model.maximumPayload + tagBytes, preferredPayload: ATTLimits.fullFragmentValue(mtu: model.attMTU) + tagBytes,
            description: "sim:\(address)")
        host = HostEnd(parameters: parameters)
        device = DeviceEnd(parameters: parameters)
        host.connection = self
        device.connection = self
    }

    public var statistics: LinkStatistics { state.withLock { $0.statistics } }
    /// What protects the link now.
    public var security: LinkSecurityState { state.withLock { $0.security } }
    public var pairingStatistics: PairingStatistics { state.withLock { $0.pairing } }
    public var isClosed: Bool { state.withLock { $0.closed } }
    /// The connection interval in force now (the model's, until the host has it changed).
    public var connectionInterval: Duration { state.withLock { $0.interval } }

    /// The host (central) asks for another interval: an LE Connection Update, applied at an instant
    /// ``/BleotaLink/LEConnectionInterval/eventsBeforeInstant`` events after the next event; while one
    /// is under way a newer request waits for it to end, and only the newest is kept. Out-of-range
    /// intervals are ignored, as a controller refuses them.
    func requestInterval(_ interval: Duration) {
        guard LEConnectionInterval.allowed.contains(interval) else { return }
        state.withLock { $0.requestedInterval = interval }
        kick.put(())
    }

    /// Ends the connection: both ends' waits end with `disconnected`.
    func close(_ reason: String) {
        let waiters: [CheckedContinuation<Void, Never>]? = state.withLock { state in
            guard !state.closed else { return nil }
            state.closed = true
            state.reason = reason
            state.statistics.disconnects += 1
            defer {
                state.sendWaiters = []
                state.requestWaiters = []
            }
            return state.sendWaiters + state.requestWaiters
        }
        guard let waiters else { return }
        adapter?.connectionClosed(ObjectIdentifier(self))
        for waiter in waiters { waiter.resume() }
        hostInbox.close()
        deviceInbox.close()
        kick.close()
        world.connectionClosed(self)
    }

    // MARK: Sending

    /// Queues a packet of the host's. A Write Request waits first until no other is outstanding: ATT
    /// allows one at a time (Core v5.4, Vol 3, Part F, §3.3.2), and Write Commands pass it.
    func enqueueFromHost(_ packet: [UInt8]) async throws(LinkError) {
        if isOnRequestChannel(packet) { await takeRequestTurn() }
        while true {
            let outcome: Int = state.withLock { state in
                if state.closed { return 2 }
                let occupied = state.hostQueue.count + (state.hostCurrent == nil ? 0 : 1)
                if occupied < model.hostQueue {
                    state.hostQueue.append(packet)
                    return 0
                }
                return 1
            }
            switch outcome {
            case 0:
                kick.put(())
                return
            case 2:
                throw .disconnected(state.withLock { $0.reason })
            default:
                await withCheckedContinuation { continuation in
                    let resumeNow = state.withLock { state -> Bool in
                        if state.closed { return true }
                        state.sendWaiters.append(continuation)
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
        }
    }

    /// Waits until no Write Request is outstanding, then holds the turn until its Write Response arrives.
    private func takeRequestTurn() async {
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state -> Bool in
                if state.closed { return true }
                guard state.requestOutstanding else {
                    state.requestOutstanding = true
                    return true
                }
                state.requestWaiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// A Write Response reached the host: the next waiting request may go.
    private func requestAnswered() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.requestWaiters.isEmpty else {
                state.requestOutstanding = false
                return nil
            }
            return state.requestWaiters.removeFirst()
        }
        next?.resume()
    }

    func enqueueFromDevice(_ packet: [UInt8]) throws(LinkError) {
        let closed = state.withLock { state -> Bool in
            if state.closed { return true }
            state.deviceQueue.append(.packet(packet))
            return false
        }
        if closed { throw .disconnected(state.withLock { $0.reason }) }
        kick.put(())
    }

    // MARK: Connection events

    /// Runs connection events until the connection closes.
    func runEvents(clock: any BleotaClock) async {
        var interval = model.connectionInterval
        // On a shared adapter the controller places the anchor between its other connections'.
        var anchor = adapter?.placeAnchor(for: ObjectIdentifier(self), after: clock.now, interval: interval) ?? clock.now
        /// A connection update under way: its instant (an anchor of the old interval, the first of the new) and interval.
        var update: (instant: Duration, interval: Duration)?
        while !isClosed {
            let idle = state.withLock { $0.hostQueue.isEmpty && $0.deviceQueue.isEmpty && $0.hostCurrent == nil && $0.deviceCurrent == nil }
            if idle {
                // Nothing to carry: wait for data, then resume at the next anchor.
                guard (try? await kick.take()) != nil else { return }
                while kick.poll() != nil {}
                let now = clock.now
                if anchor < now {
                    let missed = Int(((now - anchor) / interval).rounded(.up))
                    anchor += interval * missed
                }
            } else {
                while kick.poll() != nil {}
            }
            if update == nil,
                let wanted = state.withLock({ state in
                    defer { state.requestedInterval = nil }
                    return state.requestedInterval
                }), wanted != interval
            {
                update = (anchor + interval * LEConnectionInterval.eventsBeforeInstant, wanted)
            }
            if let pending = update, anchor >= pending.instant {
                // Both sides switch at the instant, an anchor of the old interval (missed ones included:
                // the instant counts events whether or not they carried data).
                interval = pending.interval
                update = nil
                state.withLock { state in
                    state.interval = interval
                    state.statistics.connectionUpdates += 1
                }
                adapter?.intervalChanged(ObjectIdentifier(self), anchor: anchor, interval: interval)
                // A request that came while this one was under way starts its own update.
                if state.withLock({ $0.requestedInterval != nil }) { kick.put(()) }
            }
            do { try await clock.sleep(until: anchor) } catch { return }
            if isClosed { return }
            // On a shared adapter the event waits for the radio and gets its share of the interval. The
            // event is planned and its air time booked at once, so no other connection's event can
            // take the same time while this one waits for its start.
            var start = anchor
            var budget = interval
            if let adapter {
                guard let slot = adapter.slot(for: ObjectIdentifier(self), at: anchor, interval: interval) else {
                    anchor += interval
                    continue
                }
                (start, budget) = slot
            }
            var plan = runOneEvent(budget: budget, pairLimit: model.packetsPerEvent)
            adapter?.used(from: start, for: plan.duration)
            if start > anchor {
                do { try await clock.sleep(until: start) } catch { return }
            }
            var used = Duration.zero
            var pairs = 0
            event: while true {
                // Each packet reaches the other side when its last fragment has been
                // received, not at the end of the event: a device starts on the first
                // packet of a long event while the rest are still on air.
                for completion in plan.completions {
                    do { try await clock.sleep(until: start + used + completion.at) } catch { return }
                    let delivered: Bool
                    switch completion.packet {
                    case .toDevice(let packet): delivered = deliverToDevice(packet, clock: clock)
                    case .toHost(.packet(let packet)): delivered = deliverToHost(packet)
                    case .toHost(.writeResponse):
                        requestAnswered()
                        delivered = true
                    }
                    guard delivered else {
                        used += plan.duration
                        break event
                    }
                }
                used += plan.duration
                pairs += plan.pairs
                do { try await clock.sleep(until: start + used) } catch { return }
                // A device that holds its link (and is alone on its radio: a shared adapter books an event
                // once, at its start) does not acknowledge the packet it has no room for, and the central
                // sends it again in the next pair of the same event: each such pair costs its air time, and
                // the first one the device has room for crosses (Core v5.4, Vol 6, Part B, §4.5.9).
                guard adapter == nil, let held = plan.heldBack, pairs < model.packetsPerEvent else { break }
                let refused = model.pairTime(payload: held)
                guard used + refused <= budget else { break }
                used += refused
                pairs += 1
                state.withLock { $0.statistics.airTime += refused }
                do { try await clock.sleep(until: start + used) } catch { return }
                plan = runOneEvent(budget: budget - used, pairLimit: model.packetsPerEvent - pairs, continuing: true)
            }
            do { try await clock.sleep(until: start + used) } catch { return }
            // Packets that finished transmitting free host queue space.
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                defer { state.sendWaiters = [] }
                return state.sendWaiters
            }
            for waiter in waiters { waiter.resume() }
            anchor += interval
        }
    }

    /// An upper-layer packet whose last fragment has crossed, and when in the event.
    struct Completion {
        enum Packet {
            case toDevice([UInt8])
            case toHost(DeviceOutgoing)
        }
        var at: Duration
        var packet: Packet
    }

    /// One event's plan, or the rest of one's after a refused pair: how long it takes, which
    /// upper-layer packets complete and when (from its own start), the pairs it used, and the first
    /// fragment of a packet held back for want of room on a link that holds (``waitsForRoom(_:)``).
    struct EventPlan {
        var duration: Duration
        var completions: [Completion]
        var pairs: Int
        var heldBack: Int?
    }

    /// Plans one event, or (`continuing`) what is left of one after a pair the device refused:
    /// which fragments go each way within `budget` and `pairLimit` pairs, how long it takes, which
    /// upper-layer packets complete and when.
    private func runOneEvent(budget: Duration, pairLimit: Int, continuing: Bool = false) -> EventPlan {
        state.withLock { state in
            var time = Duration.zero
            var pairs = 0
            var completions: [Completion] = []
            var heldBack: Int?
            while pairs < pairLimit {
                if state.hostCurrent == nil, let next = state.hostQueue.first {
                    // A credit-based channel's SDU leaves only with a credit: a free slot in the device's
                    // queue (credits come back as the device takes packets off it; the credit packet's own
                    // air time is not modelled). On a link that holds, every packet waits so: the device's
                    // link layer would not acknowledge it, and `runEvents` plans the rest of the event after
                    // each refused pair, so a place freed during the event is used in it.
                    let waits = waitsForRoom(next)
                    let occupied = state.deviceQueued + (state.deviceProcessing ? 1 : 0) + state.placesInFlight
                    let fragments = model.fragments(bytes: max(0, next.count - tagBytes))
                    if !waits || occupied < model.deviceBuffer {
                        state.hostQueue.removeFirst()
                        if waits { state.placesInFlight += 1 }
                        state.hostCurrent = (next, fragments)
                    } else if whenQueueFull == .hold {
                        heldBack = fragments.first ?? 0
                    }
                }
                if state.deviceCurrent == nil, !state.deviceQueue.isEmpty {
                    let packet = state.deviceQueue.removeFirst()
                    state.deviceCurrent = (packet, packet.fragments(model, tagBytes: tagBytes))
                }
                let central = state.hostCurrent?.fragments.first ?? 0
                let peripheral = state.deviceCurrent?.fragments.first ?? 0
                if central == 0 && peripheral == 0 && (pairs > 0 || continuing) { break }
                let cost = model.pairTime(payload: central, response: peripheral)
                if time + cost > budget { break }
                time += cost
                pairs += 1
                if central > 0 {
                    state.hostCurrent!.fragments.removeFirst()
                    if state.hostCurrent!.fragments.isEmpty {
                        // Received when its air time ends, at the start of the pair.
                        completions.append(
                            Completion(
                                at: time - cost + model.airTime(payload: central), packet: .toDevice(state.hostCurrent!.packet)))
                        state.hostCurrent = nil
                    }
                }
                if peripheral > 0 {
                    state.deviceCurrent!.fragments.removeFirst()
                    if state.deviceCurrent!.fragments.isEmpty {
                        completions.append(
                            Completion(
                                at: time - LinkModel.interFrameSpace, packet: .toHost(state.deviceCurrent!.packet)))
                        state.deviceCurrent = nil
                    }
                }
                if central == 0 && peripheral == 0 { break }
            }
            if !continuing { state.statistics.connectionEvents += 1 }
            state.statistics.airTime += time
            return EventPlan(duration: time, completions: completions, pairs: pairs, heldBack: state.hostCurrent == nil ? heldBack : nil)
        }
    }

    /// Whether `packet` goes on air only when the device's queue has room for it: every packet where
    /// the device's firmware holds the link (``/BleotaEngine/FullQueueHandling/hold``), else a credit channel's.
    private func waitsForRoom(_ packet: [UInt8]) -> Bool {
        if whenQueueFull == .hold { return true }
        guard let channel = packet.first else { return false }
        return creditChannels.contains(channel)
    }

    private func isOnRequestChannel(_ packet: [UInt8]) -> Bool {
        guard let channel = packet.first else { return false }
        return requestChannels.contains(channel)
    }

    /// One packet arriving at the device, through the world's faults; false once the connection is gone.
    private func deliverToDevice(_ packet: [UInt8], clock: any BleotaClock) -> Bool {
        if waitsForRoom(packet) { state.withLock { $0.placesInFlight -= 1 } }
        guard !isClosed else { return false }
        if isOnRequestChannel(packet) {
            // The device's stack answers a Write Request as it takes it, whatever its firmware then
            // makes of the value (Nordic's SoftDevice does, for a characteristic without
            // authorisation); ATT's answer is never lost, as the link layer resends until it crosses.
            state.withLock { $0.deviceQueue.append(.writeResponse) }
            kick.put(())
        }
        state.withLock { state in
            state.statistics.packetsToDevice += 1
            state.statistics.bytesToDevice += packet.count
        }
        if refusesForSecurity() {
            world.record(">", packet, outcome: "insufficient-security")
            return true
        }
        if let fault = world.faultAfterBytesToDevice(packet.count, now: clock.now) {
            apply(fault)
            return false
        }
        guard !world.draw(.writeLoss) else {
            state.withLock { $0.statistics.lostToDevice += 1 }
            world.record(">", packet, outcome: "lost")
            return true
        }
        let delivered = world.draw(.corruption) ? corrupt(packet) : packet
        let copies = world.draw(.duplication) ? 2 : 1
        if copies == 2 { state.withLock { $0.statistics.duplicated += 1 } }
        for copy in 0..<copies {
            // A packet that waited for room holds its place: its slot was kept for it (a duplicate's was not).
            let reserved = copy == 0 && waitsForRoom(packet)
            world.record(">", delivered, outcome: enqueueAtDevice(delivered, reserved: reserved) ? "ok" : "buffer-full")
        }
        return true
    }

    /// One packet arriving at the host, through the world's faults; false once the connection is gone.
    private func deliverToHost(_ packet: [UInt8]) -> Bool {
        guard !isClosed else { return false }
        state.withLock { state in
            state.statistics.packetsToHost += 1
            state.statistics.bytesToHost += packet.count
        }
        guard !world.draw(.notificationLoss) else {
            state.withLock { $0.statistics.lostToHost += 1 }
            world.record("<", packet, outcome: "lost")
            return true
        }
        let delivered = world.draw(.corruption) ? corrupt(packet) : packet
        world.record("<", delivered, outcome: "ok")
        hostInbox.put(delivered)
        if world.draw(.duplication) {
            state.withLock { $0.statistics.duplicated += 1 }
            hostInbox.put(delivered)
        }
        return true
    }

    /// Puts a packet in the device's receive queue, or drops it when the queue is full (unless
    /// `reserved`: a credit kept its slot).
    private func enqueueAtDevice(_ packet: [UInt8], reserved: Bool = false) -> Bool {
        let accepted = state.withLock { state -> Bool in
            let occupied = state.deviceQueued + (state.deviceProcessing ? 1 : 0)
            guard reserved || occupied < model.deviceBuffer else {
                state.statistics.droppedByDeviceBuffer += 1
                // The device's stack still takes the packet off the controller and runs it up to the
                // full queue before dropping it: that costs a packet's processing, stalling the drain.
                state.dropDebt += model.deviceProcessingPerPacket
                return false
            }
            state.deviceQueued += 1
            return true
        }
        if accepted { deviceInbox.put(packet) }
        return accepted
    }

    private func corrupt(_ packet: [UInt8]) -> [UInt8] {
        guard !packet.isEmpty else { return packet }
        var copy = packet
        let bit = Int(world.drawInteger(.corruption, below: UInt64(packet.count * 8)))
        copy[bit / 8] ^= UInt8(1 << (bit % 8))
        state.withLock { $0.statistics.corrupted += 1 }
        return copy
    }

    private func apply(_ fault: SimulatedWorld.OneShotFault) {
        switch fault {
        case .disconnect: close("simulated disconnect")
        case .powerLoss: world.cutPower(address: address, connection: self)
        case .reboot: world.rebootDevice(address: address, connection: self)
        }
    }

    /// The next packet of one direction; a closed inbox means the link is gone.
    func take(from inbox: Mailbox<[UInt8]>) async throws(LinkError) -> [UInt8] {
        do {
            guard let packet = try await inbox.take() else {
                throw LinkError.disconnected(state.withLock { $0.reason })
            }
            return packet
        } catch let error as LinkError { throw error } catch { throw .cancelled }
    }

    // MARK: Ends

    /// The host's end: what the engine gets. Its security is raised by pairing with the
    /// world's ``SimulatedWorld/pairingAgent`` answering (``/BleotaLink/LinkSecurityControl``).
    public final class HostEnd: ConnectionIntervalControl, LinkSecurityControl, @unchecked Sendable {
        public let parameters: LinkParameters
        var connection: SimulatedConnection?
        init(parameters: LinkParameters) { self.parameters = parameters }

        public func send(_ packet: [UInt8]) async throws(LinkError) {
            guard packet.count <= parameters.maximumPayload else {
                throw .payloadTooLarge(size: packet.count, maximum: parameters.maximumPayload)
            }
            guard let connection else { throw .disconnected("connection gone") }
            try await connection.enqueueFromHost(packet)
        }

        public func receive() async throws(LinkError) -> [UInt8] {
            guard let connection else { throw .disconnected("connection gone") }
            return try await connection.take(from: connection.hostInbox)
        }

        public func close() async { connection?.close("closed by the host") }

        public var statistics: LinkStatistics { connection?.statistics ?? LinkStatistics() }

        public var openingConnectionInterval: Duration { connection?.model.connectionInterval ?? .zero }
        public var connectionInterval: Duration { connection?.connectionInterval ?? .zero }
        public func requestConnectionInterval(_ interval: Duration) { connection?.requestInterval(interval) }

        public var security: LinkSecurityState {
            get async { connection?.security ?? .unencrypted }
        }

        public func raiseSecurity(to level: SecurityLevel) async throws(PairingError) -> LinkSecurityState {
            guard let connection else { throw .linkLost("connection gone") }
            return try await connection.pair(to: level)
        }

        /// Whether the world keeps a bond with this link's device.
        var holdsBond: Bool { connection.map { $0.world.bond(for: $0.peripheral) != nil } ?? false }

        /// Subscribes to the device's notifications, which a device that demands security refuses until the link has it.
        public func subscribe() async throws(SecurityShortfall) {
            guard let connection else { return }
            try await connection.subscribe()
        }

        public var pairingStatistics: PairingStatistics { connection?.pairingStatistics ?? PairingStatistics() }
    }

    /// The device's end: what a simulated device's firmware gets.
    public final class DeviceEnd: Link, @unchecked Sendable {
        public let parameters: LinkParameters
        var connection: SimulatedConnection?
        init(parameters: LinkParameters) { self.parameters = parameters }

        public func send(_ packet: [UInt8]) async throws(LinkError) {
            guard packet.count <= parameters.maximumPayload else {
                throw .payloadTooLarge(size: packet.count, maximum: parameters.maximumPayload)
            }
            guard let connection else { throw .disconnected("connection gone") }
            try connection.enqueueFromDevice(packet)
        }

        /// Taking the next packet frees the slot of the one just processed.
        public func receive() async throws(LinkError) -> [UInt8] {
            guard let connection else { throw .disconnected("connection gone") }
            let debt = connection.state.withLock { state -> Duration in
                defer { state.dropDebt = .zero }
                return state.dropDebt
            }
            if debt > .zero { try? await connection.world.clock.sleep(for: debt) }
            connection.state.withLock { $0.deviceProcessing = false }
            let packet = try await connection.take(from: connection.deviceInbox)
            connection.state.withLock { state in
                state.deviceQueued -= 1
                state.deviceProcessing = true
            }
            return packet
        }

        public func close() async { connection?.close("closed by the device") }
    }
}
