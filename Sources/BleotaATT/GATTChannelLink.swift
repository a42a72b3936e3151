import BleotaLink
import Synchronization

/// A protocol's several characteristics (``GATTChannel``) as one
/// ``/BleotaLink/ChannelLink`` on the host side: a packet's channel picks the
/// characteristic, written with or without response as the channel says;
/// notifications and indications come back as packets of their channel, and
/// so does the value of a read; the directory query is
/// answered from what discovery found. As a byte ``/BleotaLink/Link`` it
/// takes and gives ``/BleotaLink/ChannelFrame``s.
public final class GATTChannelLink: MessageCarryingLink {
    public let client: GATTClient
    public let parameters: LinkParameters
    /// Channel number → the characteristic found for it.
    let handles: [UInt8: (channel: GATTChannel, valueHandle: UInt16)]
    let runner: Task<Void, Never>?
    /// Answers made on this side (directory, write results), returned before what the bearer brings.
    private let local = Mailbox<ChannelMessage>()
    /// Reads under way in the background.
    private let reads = BackgroundTasks()
    /// Write Requests waiting for their Write Responses, and why the first that failed did.
    private let requests = BackgroundTasks()
    private let requestFailure = Mutex<String?>(nil)
    /// The protocol's credit-based channel, when it has one and this host can open it.
    let creditRoute: CreditChannelRoute?
    let openCreditChannel: (@Sendable (UInt16) async throws(LinkError) -> any Link)?
    private let creditLink = Mutex<(any Link)?>(nil)

    /// Call after the MTU exchange and the subscriptions; `found` maps each channel present to its value handle.
    /// `openCreditChannel` connects to a PSM on the same device (for `creditRoute`).
    public init(
        client: GATTClient, found: [(GATTChannel, UInt16)], mtu: Int, description: String, runner: Task<Void, Never>? = nil,
        creditRoute: CreditChannelRoute? = nil, openCreditChannel: (@Sendable (UInt16) async throws(LinkError) -> any Link)? = nil
    ) {
        self.client = client
        var handles: [UInt8: (GATTChannel, UInt16)] = [:]
        for (channel, handle) in found { handles[channel.number] = (channel, handle) }
        self.handles = handles
        self.runner = runner
        // Only where the device publishes its PSM and this host can open the channel.
        if let creditRoute, openCreditChannel != nil, handles[creditRoute.psmChannel] != nil {
            self.creditRoute = creditRoute
            self.openCreditChannel = openCreditChannel
        } else {
            self.creditRoute = nil
            self.openCreditChannel = nil
        }
        // The channel byte is not sent: a packet may carry a whole ATT payload after it.
        parameters = LinkParameters(
            maximumPayload: ATTLimits.largestValue(mtu: mtu) + 1, preferredPayload: ATTLimits.fullFragmentValue(mtu: mtu) + 1,
            acknowledgedWrites: false, description: description)
    }

    /// Finds `channels` among a device's services and characteristics (subscribing to those that
    /// notify or indicate) and makes the link; channels the device lacks are simply absent.
    public static func open(
        client: GATTClient, channels: [GATTChannel], mtu: Int, description: String,
        runner: Task<Void, Never>? = nil, creditRoute: CreditChannelRoute? = nil,
        openCreditChannel: (@Sendable (UInt16) async throws(LinkError) -> any Link)? = nil
    ) async throws(ATTBearerError) -> GATTChannelLink {
        let services = try await client.discoverPrimaryServices()
        var found: [(GATTChannel, UInt16)] = []
        for service in services where channels.contains(where: { $0.service == service.uuid }) {
            let characteristics = try await client.discoverCharacteristics(service)
            for channel in channels where channel.service == service.uuid {
                guard let characteristic = characteristics.first(where: { $0.uuid == channel.characteristic }) else { continue }
                switch channel.update {
                case .none: break
                case .notify: try await client.subscribe(characteristic, afresh: true)
                case .indicate: try await client.subscribe(characteristic, indications: true, afresh: true)
                }
                found.append((channel, characteristic.valueHandle))
            }
        }
        return GATTChannelLink(
            client: client, found: found, mtu: mtu, description: description, runner: runner,
            creditRoute: creditRoute, openCreditChannel: openCreditChannel)
    }

    /// The channels this connection offers: the characteristics found, and the credit-based channel where it can be opened.
    var offeredChannels: [UInt8] {
        (Array(handles.keys) + (creditRoute.map { [$0.channel] } ?? [])).sorted()
    }

    /// One SDU on the credit-based channel, opened at the first one (the device listens only once the
    /// protocol asked it to) on the PSM it publishes. The channel carries a byte stream (SUOTA's device
    /// appends each SDU to the image), so a payload longer than the device's receive MTU, which the
    /// host learns only once the channel is open, goes as several SDUs.
    private func sendOnCreditChannel(_ payload: ArraySlice<UInt8>, route: CreditChannelRoute) async throws(LinkError) {
        var link = creditLink.withLock { $0 }
        if link == nil {
            guard let (_, psmHandle) = handles[route.psmChannel], let open = openCreditChannel else {
                throw .disconnected("the device publishes no PSM for its credit-based channel")
            }
            let value: [UInt8]
            do { value = try await client.read(psmHandle) } catch { throw .disconnected("cannot read the device's PSM: \(error)") }
            guard value.count >= 2 else { throw .disconnected("the device's PSM value has \(value.count) bytes, not 2") }
            let psm = UInt16(value[0]) | UInt16(value[1]) << 8
            let opened = try await open(psm)
            creditLink.withLock { $0 = opened }
            link = opened
        }
        let largest = max(1, link!.parameters.maximumPayload)
        var start = payload.startIndex
        while start < payload.endIndex {
            let end = min(payload.endIndex, start + largest)
            try await link!.send(Array(payload[start..<end]))
            start = end
        }
    }

    public func send(_ message: ChannelMessage) async throws(LinkError) {
        let number: UInt8
        let payload: ArraySlice<UInt8>
        switch message {
        case .directoryQuery:
            local.put(.directory(offeredChannels))
            return
        case .read(let channel):
            try read(channel)
            return
        case .packet(let channel, let bytes): (number, payload) = (channel, bytes)
        // Answers are the device's to give: nothing to write.
        case .directory, .writeResult: return
        }
        if let route = creditRoute, number == route.channel {
            try await sendOnCreditChannel(payload, route: route)
            return
        }
        guard let (channel, handle) = handles[number] else {
            throw .disconnected("the device has no characteristic for channel \(number)")
        }
        guard payload.count <= parameters.maximumPayload - 1 else {
            throw .payloadTooLarge(size: payload.count, maximum: parameters.maximumPayload - 1)
        }
        try throwIfARequestFailed()
        do {
            switch channel.write {
            case .request:
                try await writeRequest(Array(payload), to: handle, channel: number)
                try throwIfARequestFailed()
            case .answeredRequest:
                // The Write Response, or the Error Response's code, is the device's answer.
                do {
                    try await client.write(handle, Array(payload))
                    local.put(.writeResult(channel: number, code: 0))
                } catch {
                    guard case .peer(let code, _, _) = error else { throw error }
                    local.put(.writeResult(channel: number, code: code.rawValue))
                }
            case .command: try await client.writeWithoutResponse(handle, Array(payload))
            case .none: throw LinkError.disconnected("channel \(number) (\(channel.characteristic)) is not writable")
            }
        } catch let error as LinkError {
            throw error
        } catch {
            throw .disconnected("\(error)")
        }
    }

    /// Writes a Write Request and returns once it has gone to the link; its Write Response is
    /// waited for in the background. ATT allows one request at a time but lets Write Commands
    /// pass a waiting one (Core v5.4, Vol 3, Part F, §3.3.2; BlueZ's `att.c` sends them at
    /// once), so a protocol's data may follow its control-point request in the same connection
    /// event instead of an event later. Requests stay in order: the next one waits in the
    /// bearer until this one is answered, and the caller waits for it to go. A request the
    /// device refuses, or that gets no answer, ends the bearer, so the next send or receive
    /// says why.
    private func writeRequest(_ value: [UInt8], to handle: UInt16, channel number: UInt8) async throws(LinkError) {
        let sent = Mailbox<Void>()
        let client = self.client
        requests.start(on: client.bearer.clock.taskExecutor) { [self] in
            do {
                try await client.write(handle, value, whenSent: { sent.put(()) })
            } catch {
                let reason = "the device did not take a write on channel \(number): \(error)"
                requestFailure.withLock { $0 = $0 ?? reason }
                await client.bearer.close(reason)
            }
            sent.put(())
        }
        do { _ = try await sent.take() } catch { throw .cancelled }
    }

    private func throwIfARequestFailed() throws(LinkError) {
        if let reason = requestFailure.withLock({ $0 }) { throw .disconnected(reason) }
    }

    /// Reads `number` in the background: ATT holds back requests, not commands, so writes without
    /// response go on while the read is outstanding, and its value arrives after them (a host
    /// pacing a stream by reads keeps one in flight). The value joins the notifications the
    /// bearer queues, as one of this characteristic, so ``receiveMessage()`` waits for both in
    /// order. A read that fails leaves no answer; a dropped bearer is what receiving reports.
    private func read(_ number: UInt8) throws(LinkError) {
        guard let (channel, handle) = handles[number] else {
            throw .disconnected("the device has no characteristic for channel \(number)")
        }
        guard channel.readable else { throw .disconnected("channel \(number) (\(channel.characteristic)) is not readable") }
        let client = self.client
        reads.start(on: client.bearer.clock.taskExecutor) {
            if let value = try? await client.read(handle) { client.bearer.incoming.put(.handleValueNotification(handle: handle, value: value)) }
        }
    }

    public func receiveMessage() async throws(LinkError) -> ChannelMessage {
        while true {
            if let answer = local.poll() { return answer }
            let pdu: ATTPDU?
            do { pdu = try await client.bearer.incoming.take() } catch { throw .cancelled }
            guard let pdu else { throw .disconnected(await client.bearer.closeReason ?? "ATT bearer closed") }
            switch pdu {
            case .handleValueNotification(let handle, let value), .handleValueIndication(let handle, let value):
                if let number = channel(of: handle) { return .packet(number, value) }
            case .multipleHandleValueNotification(let entries):
                for entry in entries {
                    if let number = channel(of: entry.handle) { return .packet(number, entry.value) }
                }
            default:
                continue
            }
        }
    }

    private func channel(of handle: UInt16) -> UInt8? {
        handles.first { $0.value.valueHandle == handle }?.key
    }

    /// How many of the protocol's channels the device offers.
    public var channelCount: Int { offeredChannels.count }

    public func close() async {
        local.close()
        // A request's Write Response is awaited before the bearer goes, so a last request (an
        // activation) is surely on the device; a device that never answers costs at most this.
        await requests.settle(within: .seconds(2), clock: client.bearer.clock)
        if let link = creditLink.withLock({ $0 }) { await link.close() }
        await client.bearer.close("closed by the host")
        await reads.finish()
        await runner?.value
    }
}

/// The device side of ``GATTChannelLink`` for `bleota serve`: each channel a
/// characteristic of the GATT server; writes arrive as packets of their
/// channel, and a packet sent on a channel is notified or indicated (as the
/// client subscribed) on its characteristic.
public final class GATTPeripheralChannelLink: MessageCarryingLink {
    public let server: GATTServer
    public let bearer: ATTBearer
    let valueHandles: [UInt8: UInt16]
    let inbox: Mailbox<ChannelMessage>
    let answers: WriteAnswers

    init(server: GATTServer, bearer: ATTBearer, valueHandles: [UInt8: UInt16], inbox: Mailbox<ChannelMessage>, answers: WriteAnswers) {
        self.server = server
        self.bearer = bearer
        self.valueHandles = valueHandles
        self.inbox = inbox
        self.answers = answers
    }

    public var parameters: LinkParameters {
        LinkParameters(maximumPayload: ATTLimits.largestValue(mtu: bearer.currentMTU) + 1, description: "gatt-server")
    }

    /// Adds `channels` to `server`, grouped into their services, and returns a function that makes the link for a client's bearer.
    /// `values` are the readable channels' values at the start; `liveValue`, when given, is asked
    /// at every read (a count the device keeps changing, SUOTA's MEM_INFO).
    public static func addChannels(
        _ channels: [GATTChannel], to server: GATTServer, values: [UInt8: [UInt8]] = [:],
        liveValue: (@Sendable (UInt8) async -> [UInt8]?)? = nil
    ) -> @Sendable (ATTBearer) async -> GATTPeripheralChannelLink {
        let inbox = Mailbox<ChannelMessage>()
        let answers = WriteAnswers()
        var valueHandles: [UInt8: UInt16] = [:]
        var services: [BluetoothUUID] = []
        for channel in channels where !services.contains(channel.service) { services.append(channel.service) }
        for service in services {
            let members = channels.filter { $0.service == service }
            let definitions = members.map { channel in
                var properties: CharacteristicProperties = []
                switch channel.write {
                case .request, .answeredRequest: properties.insert(.write)
                case .command: properties.insert(.writeWithoutResponse)
                case .none: break
                }
                switch channel.update {
                case .none: break
                case .notify: properties.insert(.notify)
                case .indicate: properties.insert(.indicate)
                }
                if channel.readable { properties.insert(.read) }
                let number = channel.number
                var reader: (@Sendable () async -> [UInt8]?)?
                if channel.readable, let liveValue {
                    reader = { await liveValue(number) }
                }
                // A read-only channel is read from the database (or the device's live value); only written ones reach the device half.
                guard channel.write != .none else {
                    return CharacteristicDefinition(uuid: channel.characteristic, properties: properties, value: values[number] ?? [], onRead: reader)
                }
                guard channel.write != .answeredRequest else {
                    // The Write Response waits for the device half's answer, which decides it.
                    return CharacteristicDefinition(
                        uuid: channel.characteristic, properties: properties, value: values[number] ?? [],
                        onWriteRequest: { value in
                            inbox.put(.packet(number, value))
                            return await answers.next(for: number)
                        }, onRead: reader)
                }
                return CharacteristicDefinition(
                    uuid: channel.characteristic, properties: properties, value: values[number] ?? [],
                    onWrite: { value in inbox.put(.packet(number, value)) }, onRead: reader)
            }
            let handles = server.addService(service, characteristics: definitions)
            for (channel, handle) in zip(members, handles) { valueHandles[channel.number] = handle }
        }
        let found = valueHandles
        return { bearer in GATTPeripheralChannelLink(server: server, bearer: bearer, valueHandles: found, inbox: inbox, answers: answers) }
    }

    public func send(_ message: ChannelMessage) async throws(LinkError) {
        let number: UInt8
        let payload: ArraySlice<UInt8>
        switch message {
        case .writeResult(let channel, let code):
            // A write's answer becomes its Write Response (or Error Response).
            answers.put(code, for: channel)
            return
        case .packet(let channel, let bytes): (number, payload) = (channel, bytes)
        // The directory is the GATT database itself: the client discovers it; reads are the server's.
        case .directoryQuery, .directory, .read: return
        }
        guard let handle = valueHandles[number] else { return }
        do {
            guard try await server.notify(handle, value: Array(payload), on: bearer) else {
                throw LinkError.disconnected("the client has not subscribed to channel \(number)")
            }
        } catch let error as LinkError { throw error } catch { throw .disconnected("\(error)") }
    }

    public func receiveMessage() async throws(LinkError) -> ChannelMessage {
        do {
            guard let message = try await inbox.take() else { throw LinkError.disconnected("GATT server closed") }
            return message
        } catch let error as LinkError { throw error } catch { throw .cancelled }
    }

    /// Hands the device half a packet that arrived outside GATT: an SDU of the protocol's
    /// credit-based channel (``CreditChannelRoute``), on `channel`.
    public func deliver(_ sdu: [UInt8], on channel: UInt8) { inbox.put(.packet(channel, sdu)) }

    public func close() async {
        inbox.close()
        answers.close()
        await bearer.close("closed by the device")
    }
}

/// The device half's answers to writes on answered channels, waited for by
/// the GATT server before it sends the Write Response. ATT allows one request
/// at a time, so one answer is outstanding at most; a device half that goes
/// away (a reboot) leaves the write taken, as a device acknowledges a write
/// before it resets.
final class WriteAnswers: Sendable {
    private let codes = Mailbox<(channel: UInt8, code: UInt8)>()

    func put(_ code: UInt8, for channel: UInt8) { codes.put((channel, code)) }

    /// The answer to the write just delivered on `channel`: nil for taken, or the error code.
    func next(for channel: UInt8) async -> ATTErrorCode? {
        while let answer = try? await codes.take() {
            guard answer.channel == channel else { continue }
            return answer.code == 0 ? nil : ATTErrorCode(rawValue: answer.code)
        }
        return nil
    }

    func close() { codes.close() }
}

extension Mailbox<[UInt8]> {
    /// The next value a client wrote to a GATT server's characteristic (how ``GATTPeripheralLink`` reads its writes).
    func nextWrite() async throws(LinkError) -> [UInt8] {
        do {
            guard let packet = try await take() else { throw LinkError.disconnected("GATT server closed") }
            return packet
        } catch let error as LinkError { throw error } catch { throw .cancelled }
    }
}

/// Tasks a link starts and owns (background reads): each forgotten when it
/// ends, the rest cancelled and waited for when the link closes, so none
/// outlives the link.
final class BackgroundTasks: Sendable {
    private struct State {
        var tasks: [UInt64: Task<Void, Never>] = [:]
        var next: UInt64 = 0
    }
    private let state = Mutex(State())

    /// Starts `work` on `executor` (the simulation's, under one; the global one otherwise).
    func start(on executor: (any TaskExecutor)?, _ work: @escaping @Sendable () async -> Void) {
        state.withLock { state in
            state.next += 1
            let id = state.next
            state.tasks[id] = Task(executorPreference: executor) { [weak self] in
                await work()
                self?.state.withLock { _ = $0.tasks.removeValue(forKey: id) }
            }
        }
    }

    /// Waits for the tasks under way for at most `timeout`, then cancels the rest.
    func settle(within timeout: Duration, clock: any BleotaClock) async {
        let running = state.withLock { Array($0.tasks.values) }
        guard !running.isEmpty else { return }
        _ = try? await withDeadline(timeout, clock: clock) {
            for task in running { await task.value }
            return true
        }
        await finish()
    }

    func finish() async {
        let running = state.withLock { state in
            defer { state.tasks = [:] }
            return Array(state.tasks.values)
        }
        for task in running {
            task.cancel()
            await task.value
        }
    }
}
