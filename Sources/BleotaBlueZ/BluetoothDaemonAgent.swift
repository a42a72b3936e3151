import BleotaLink
import BleotaSystem
import CSDBus
import Glibc
import Logging
import Synchronization

/// Why bluetoothd's D-Bus API could not be used.
public struct BluetoothDaemonError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The system D-Bus through sd-bus, driven from this actor only (sd-bus is not
/// thread-safe) and waited on through the process's epoll reactor: method calls
/// made asynchronously, and objects exported with a plain message callback
/// (sd-bus's vtable macros do not reach Swift).
public actor SystemBus {
    /// An sd-bus message held across a suspension; its holder unreferences it.
    public struct Message: @unchecked Sendable {
        public let pointer: OpaquePointer
    }

    /// What the C callbacks reach.
    final class Inbox: @unchecked Sendable {
        let replies = Mutex<[UInt64: Result<Message, BluetoothDaemonError>]>([:])
        let replied = Mailbox<UInt64>()
    }

    /// A method call under way: its id and where its reply goes.
    final class PendingCall: @unchecked Sendable {
        let id: UInt64
        let inbox: Inbox
        init(id: UInt64, inbox: Inbox) {
            self.id = id
            self.inbox = inbox
        }
    }

    nonisolated(unsafe) let bus: OpaquePointer
    private let inbox = Inbox()
    private var pump: Task<Void, Never>?
    private var nextCall: UInt64 = 0
    private var slots: [OpaquePointer] = []

    private init(bus: OpaquePointer) { self.bus = bus }

    public static func open() async throws(BluetoothDaemonError) -> SystemBus {
        var bus: OpaquePointer?
        let opened = sd_bus_open_system(&bus)
        guard opened >= 0, let bus else {
            throw BluetoothDaemonError("cannot reach the system D-Bus: \(String(cString: strerror(-opened)))")
        }
        let system = SystemBus(bus: bus)
        await system.startPump()
        return system
    }

    /// Calls `interface.member` on `path` of `destination` with the arguments `build` appends; returns the reply,
    /// which the caller must unreference (``release(_:)``).
    public func call(
        _ destination: String, path: String, interface: String, member: String,
        build: (OpaquePointer) -> Void = { _ in }
    ) async throws(BluetoothDaemonError) -> Message {
        var message: OpaquePointer?
        guard sd_bus_message_new_method_call(bus, &message, destination, path, interface, member) >= 0, let message else {
            throw BluetoothDaemonError("cannot build \(interface).\(member)")
        }
        defer { sd_bus_message_unref(message) }
        build(message)
        nextCall += 1
        let id = nextCall
        let pending = Unmanaged.passRetained(PendingCall(id: id, inbox: inbox)).toOpaque()
        var slot: OpaquePointer?
        let sent = sd_bus_call_async(
            bus, &slot, message,
            { reply, userdata, _ in
                guard let userdata else { return 0 }
                let pending = Unmanaged<PendingCall>.fromOpaque(userdata).takeRetainedValue()
                let result: Result<Message, BluetoothDaemonError>
                if let reply, sd_bus_message_is_method_error(reply, nil) > 0 {
                    let error = sd_bus_message_get_error(reply)?.pointee
                    let name = error?.name.map { String(cString: $0) } ?? "an error"
                    let text = error?.message.map { String(cString: $0) }
                    result = .failure(BluetoothDaemonError(text.map { "\(name): \($0)" } ?? name))
                } else if let reply {
                    sd_bus_message_ref(reply)
                    result = .success(Message(pointer: reply))
                } else {
                    result = .failure(BluetoothDaemonError("no reply"))
                }
                pending.inbox.replies.withLock { $0[pending.id] = result }
                pending.inbox.replied.put(pending.id)
                return 1
            }, pending, 25_000_000)
        guard sent >= 0 else {
            Unmanaged<PendingCall>.fromOpaque(pending).release()
            throw BluetoothDaemonError("cannot call \(interface).\(member): \(String(cString: strerror(-sent)))")
        }
        defer { if let slot { sd_bus_slot_unref(slot) } }
        // sd-bus answers a call that times out itself (25 s); the deadline here only guards against a bus that stopped.
        let replied = inbox.replied
        do {
            try await withDeadline(.seconds(30), clock: SystemClock()) {
                while true {
                    guard let done = try await replied.take() else { throw BluetoothDaemonError("the bus closed") }
                    if done == id { return }
                    replied.put(done)  // another call's: leave it for its caller
                    await Task.yield()
                }
            }
        } catch {
            throw BluetoothDaemonError("no answer to \(interface).\(member)")
        }
        guard let result = inbox.replies.withLock({ $0.removeValue(forKey: id) }) else { throw BluetoothDaemonError("no reply") }
        switch result {
        case .success(let reply): return reply
        case .failure(let error): throw BluetoothDaemonError("\(interface).\(member) failed: \(error.description)")
        }
    }

    public nonisolated func release(_ message: Message) { sd_bus_message_unref(message.pointer) }

    /// Exports `path`: `handler` gets every message for it, on the bus's turn, and must not block.
    public func export(
        _ path: String, context: UnsafeMutableRawPointer,
        handler: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutablePointer<sd_bus_error>?) -> Int32
    )
        throws(BluetoothDaemonError)
    {
        var slot: OpaquePointer?
        let added = sd_bus_add_object(bus, &slot, path, handler, context)
        guard added >= 0, let slot else { throw BluetoothDaemonError("cannot export \(path): \(String(cString: strerror(-added)))") }
        slots.append(slot)
    }

    /// Sends `message` (a reply built by the caller).
    public func send(_ message: Message) { _ = sd_bus_send(bus, message.pointer, nil) }

    public func close() {
        pump?.cancel()
        inbox.replied.close()
        for slot in slots { sd_bus_slot_unref(slot) }
        slots = []
        let fd = sd_bus_get_fd(bus)
        if fd >= 0 { DescriptorReactor.shared.forget(fd) }
        sd_bus_flush_close_unref(bus)
    }

    private func startPump() {
        pump = Task { [weak self] in
            while !Task.isCancelled, let self {
                guard await self.turn() else { return }
            }
        }
    }

    /// Processes what is waiting, then waits (on the reactor) for the bus's descriptor or its next timeout.
    private func turn() async -> Bool {
        while true {
            let processed = sd_bus_process(bus, nil)
            if processed < 0 { return false }
            if processed == 0 { break }
        }
        let fd = sd_bus_get_fd(bus)
        guard fd >= 0 else { return false }
        let writable = Int32(sd_bus_get_events(bus)) & Int32(POLLOUT) != 0
        var until: UInt64 = .max
        _ = sd_bus_get_timeout(bus, &until)
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowMicroseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
        let wait: Duration = until == .max ? .seconds(1) : .microseconds(Int64(min(1_000_000, until > nowMicroseconds ? until - nowMicroseconds : 0)))
        do {
            try await withDeadline(wait, clock: SystemClock()) { try await DescriptorReactor.shared.wait(fd, writable: writable) }
        } catch is DeadlineExceeded {
            return true
        } catch {
            return !Task.isCancelled
        }
        return true
    }
}

/// Appending and reading D-Bus arguments without sd-bus's variadic calls.
enum BusArguments {
    static func append(_ message: OpaquePointer, objectPath: String) {
        _ = objectPath.withCString { sd_bus_message_append_basic(message, CChar(UInt8(ascii: "o")), $0) }
    }

    static func append(_ message: OpaquePointer, string: String) {
        _ = string.withCString { sd_bus_message_append_basic(message, CChar(UInt8(ascii: "s")), $0) }
    }

    /// An empty `a{sv}` (options).
    static func appendEmptyOptions(_ message: OpaquePointer) {
        _ = sd_bus_message_open_container(message, CChar(UInt8(ascii: "a")), "{sv}")
        _ = sd_bus_message_close_container(message)
    }

    static func readString(_ message: OpaquePointer, type: Character = "s") -> String? {
        var value: UnsafePointer<CChar>?
        guard sd_bus_message_read_basic(message, CChar(UInt8(ascii: type.asciiValue.map { Unicode.Scalar($0) } ?? "s")), &value) >= 0,
            let value
        else { return nil }
        return String(cString: value)
    }

    static func readUInt32(_ message: OpaquePointer) -> UInt32? {
        var value: UInt32 = 0
        return sd_bus_message_read_basic(message, CChar(UInt8(ascii: "u")), &value) >= 0 ? value : nil
    }
}

/// bleota's pairing agent for bluetoothd: an `org.bluez.Agent1` object on the
/// system bus, registered as the default agent (BlueZ `doc/org.bluez.Agent.rst`),
/// which bluetoothd asks whenever the kernel needs a passkey or a confirmation.
///
/// Where bluetoothd runs, it owns pairing: it answers the kernel's management
/// requests itself (refusing them when no agent is registered) and keeps the
/// bonds, which it loads into the kernel at start. So bleota does not answer
/// on the management interface there; it registers this agent, raises the
/// link's security as everywhere (`BT_SECURITY`), and bluetoothd asks it. The
/// bond is then bluetoothd's: `bluetoothctl devices Paired` lists the device
/// and later links encrypt with the key it loaded.
///
/// Pairing with `org.bluez.Device1.Pair` instead would also go through this
/// agent, but bluetoothd replies to Pair only after its own GATT discovery,
/// which cannot run while bleota holds the device's ATT channel.
///
public actor BluetoothDaemonAgent {
    /// A call bluetoothd made to the agent, parsed in the C callback and answered here.
    enum Request: Sendable {
        case passkey(device: String)
        case confirmation(device: String, number: UInt32)
        case authorization(device: String)
        case displayPasskey(device: String, passkey: UInt32)
        case ignored
        case unsupported(String)
    }

    /// Where the C callback leaves what bluetoothd asked.
    final class Requests: @unchecked Sendable {
        let mailbox = Mailbox<(message: SystemBus.Message, request: Request)>()
    }

    public static let objectPath = "/org/bleota/agent"

    let bus: SystemBus
    private let requests = Requests()
    let agent: any PairingAgent
    let onRefusal: @Sendable (BluetoothAddress, PairingError) async -> Void
    let logger: Logger
    private var answering: Task<Void, Never>?
    private var registered = false

    private init(
        bus: SystemBus, agent: any PairingAgent, onRefusal: @escaping @Sendable (BluetoothAddress, PairingError) async -> Void,
        logger: Logger
    ) {
        self.bus = bus
        self.agent = agent
        self.onRefusal = onRefusal
        self.logger = logger
    }

    /// Connects to the system bus and registers the agent with bluetoothd as the default one,
    /// announcing the IO capability `agent` can answer.
    public static func start(
        agent: any PairingAgent, logger: Logger,
        onRefusal: @escaping @Sendable (BluetoothAddress, PairingError) async -> Void
    ) async throws(BluetoothDaemonError)
        -> BluetoothDaemonAgent
    {
        let bus = try await SystemBus.open()
        let daemon = BluetoothDaemonAgent(bus: bus, agent: agent, onRefusal: onRefusal, logger: logger)
        do { try await daemon.register() } catch {
            await daemon.stop()
            throw error
        }
        return daemon
    }

    /// bluetoothd's name for an IO capability.
    static func capabilityName(_ capability: PairingIOCapability) -> String {
        switch capability {
        case .displayOnly: "DisplayOnly"
        case .displayYesNo: "DisplayYesNo"
        case .keyboardOnly: "KeyboardOnly"
        case .noInputNoOutput: "NoInputNoOutput"
        case .keyboardDisplay: "KeyboardDisplay"
        }
    }

    /// `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF` → `AA:BB:CC:DD:EE:FF`.
    static func deviceAddress(objectPath: String) -> String {
        guard let range = objectPath.range(of: "dev_") else { return objectPath }
        return objectPath[range.upperBound...].prefix(17).replacingOccurrences(of: "_", with: ":")
    }

    private func register() async throws(BluetoothDaemonError) {
        try await bus.export(Self.objectPath, context: Unmanaged.passUnretained(requests).toOpaque()) { message, userdata, _ in
            guard let message, let userdata else { return 0 }
            let requests = Unmanaged<Requests>.fromOpaque(userdata).takeUnretainedValue()
            let request = BluetoothDaemonAgent.parse(message)
            sd_bus_message_ref(message)
            requests.mailbox.put((SystemBus.Message(pointer: message), request))
            return 1  // handled: the reply follows once the agent has answered
        }
        startAnswering()
        let capability = Self.capabilityName(agent.ioCapability)
        bus.release(
            try await bus.call("org.bluez", path: "/org/bluez", interface: "org.bluez.AgentManager1", member: "RegisterAgent") {
                BusArguments.append($0, objectPath: Self.objectPath)
                BusArguments.append($0, string: capability)
            })
        registered = true
        bus.release(
            try await bus.call("org.bluez", path: "/org/bluez", interface: "org.bluez.AgentManager1", member: "RequestDefaultAgent") {
                BusArguments.append($0, objectPath: Self.objectPath)
            })
        logger.debug("registered the pairing agent with bluetoothd (\(capability))")
    }

    /// Unregisters the agent and closes the bus.
    public func stop() async {
        if registered,
            let reply = try? await bus.call(
                "org.bluez", path: "/org/bluez", interface: "org.bluez.AgentManager1",
                member: "UnregisterAgent", build: { BusArguments.append($0, objectPath: Self.objectPath) })
        {
            bus.release(reply)
        }
        registered = false
        answering?.cancel()
        requests.mailbox.close()
        await bus.close()
    }

    // MARK: Answering bluetoothd

    /// What bluetoothd asks, read from the call's arguments (object path first).
    static func parse(_ message: OpaquePointer) -> Request {
        guard let interface = sd_bus_message_get_interface(message).map({ String(cString: $0) }), interface == "org.bluez.Agent1",
            let member = sd_bus_message_get_member(message).map({ String(cString: $0) })
        else { return .unsupported("unknown") }
        func readPath() -> String? { BusArguments.readString(message, type: "o").map(deviceAddress(objectPath:)) }
        switch member {
        case "RequestPasskey":
            return readPath().map { .passkey(device: $0) } ?? .unsupported(member)
        case "RequestConfirmation":
            guard let device = readPath(), let number = BusArguments.readUInt32(message) else { return .unsupported(member) }
            return .confirmation(device: device, number: number)
        case "RequestAuthorization":
            return readPath().map { .authorization(device: $0) } ?? .unsupported(member)
        case "DisplayPasskey":
            guard let device = readPath(), let passkey = BusArguments.readUInt32(message) else { return .unsupported(member) }
            return .displayPasskey(device: device, passkey: passkey)
        case "Release", "Cancel", "DisplayPinCode", "AuthorizeService":
            return .ignored
        default:
            return .unsupported(member)
        }
    }

    private func startAnswering() {
        let mailbox = requests.mailbox
        answering = Task { [weak self] in
            while let (held, request) = try? await mailbox.take() {
                guard let self else {
                    sd_bus_message_unref(held.pointer)
                    return
                }
                await self.answer(held, request)
            }
        }
    }

    private func answer(_ held: SystemBus.Message, _ request: Request) async {
        defer { bus.release(held) }
        let message = held.pointer
        switch request {
        case .passkey(let device):
            do { await reply(message, passkey: try await agent.passkey(for: device)) } catch {
                await refuse(message, device: device, error)
            }
        case .confirmation(let device, let number):
            do {
                if try await agent.confirm(number, for: device) { await reply(message) } else { await refuse(message, device: device, .comparisonRejected(number)) }
            } catch {
                await refuse(message, device: device, error)
            }
        case .authorization:
            // Just Works asks only for a yes: the link is to be encrypted because the device wants it.
            await reply(message)
        case .displayPasskey(let device, let passkey):
            await agent.display(passkey, for: device)
            await reply(message)
        case .ignored:
            await reply(message)
        case .unsupported(let member):
            await replyError(message, name: "org.bluez.Error.Rejected", text: "bleota does not answer \(member)")
        }
    }

    private func refuse(_ message: OpaquePointer, device: String, _ error: PairingError) async {
        await replyError(message, name: "org.bluez.Error.Rejected", text: error.description)
        if let address = BluetoothAddress(device) { await onRefusal(address, error) }
    }

    private func reply(_ call: OpaquePointer, passkey: UInt32? = nil) async {
        guard sd_bus_message_get_expect_reply(call) > 0 else { return }
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_return(call, &reply) >= 0, let reply else { return }
        defer { sd_bus_message_unref(reply) }
        if var passkey { _ = sd_bus_message_append_basic(reply, CChar(UInt8(ascii: "u")), &passkey) }
        await bus.send(SystemBus.Message(pointer: reply))
    }

    private func replyError(_ call: OpaquePointer, name: String, text: String) async {
        guard sd_bus_message_get_expect_reply(call) > 0 else { return }
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        _ = name.withCString { name in text.withCString { sd_bus_error_set(&error, name, $0) } }
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_error(call, &reply, &error) >= 0, let reply else { return }
        defer { sd_bus_message_unref(reply) }
        await bus.send(SystemBus.Message(pointer: reply))
    }
}
