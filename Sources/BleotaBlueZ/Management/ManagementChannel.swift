import BleotaLink
import BleotaSystem
import CBlueZ
import Glibc
import Synchronization

/// Why the management interface could not be used.
public struct ManagementChannelError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A socket on the kernel's Bluetooth Management interface
/// (`HCI_CHANNEL_CONTROL`), through which user space pairs (answering the
/// kernel's confirmation and passkey requests), loads the keys of earlier
/// pairings and sets a controller up, as bluetoothd does.
///
/// One task reads the socket (waiting through the process's
/// ``/BleotaSystem/DescriptorReactor``); a command's reply (Command Complete or
/// Command Status for its opcode and controller) goes to the task that sent
/// it, every other event to each subscriber. Commands and events need
/// `CAP_NET_ADMIN`: without it the kernel answers Permission Denied and sends
/// no pairing events.
public final class ManagementChannel: Sendable {
    private struct Pending {
        var opcode: UInt16
        var index: UInt16
        var reply: Mailbox<Result<[UInt8], ManagementStatus>>
    }

    private struct State {
        var pending: [Pending] = []
        var subscribers: [UInt64: Mailbox<(index: UInt16, event: ManagementEvent)>] = [:]
        var nextSubscriber: UInt64 = 0
        var closed = false
    }

    public let fd: Int32
    private let reactor: DescriptorReactor
    private let state = Mutex(State())
    private let reader = Mutex<Task<Void, Never>?>(nil)

    /// Opens and binds a control socket.
    public static func open() throws(ManagementChannelError) -> ManagementChannel {
        let fd = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_HCI)
        guard fd >= 0 else {
            throw ManagementChannelError("cannot open the Bluetooth management interface: \(String(cString: strerror(errno)))")
        }
        var address = sockaddr_hci(hci_family: sa_family_t(AF_BLUETOOTH), hci_dev: 0xFFFF, hci_channel: 3)  // HCI_DEV_NONE, HCI_CHANNEL_CONTROL
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_hci>.size)) }
        }
        guard bound == 0 else {
            let code = errno
            Glibc.close(fd)
            throw ManagementChannelError("cannot bind the Bluetooth management interface: \(String(cString: strerror(code)))")
        }
        // Load Long Term Keys can exceed the default 1 KB send MTU (BT_SNDMTU, a uint16).
        var mtu: UInt16 = 65_535
        _ = setsockopt(fd, SOL_BLUETOOTH, 12, &mtu, socklen_t(MemoryLayout<UInt16>.size))
        return ManagementChannel(descriptor: fd)
    }

    /// A channel on an already open, non-blocking datagram descriptor (a `socketpair` in tests).
    public init(descriptor: Int32, reactor: DescriptorReactor = .shared) {
        fd = descriptor
        self.reactor = reactor
        let task = Task { [self] in await readLoop() }
        reader.withLock { $0 = task }
    }

    /// Sends `command` to controller `index` and returns its return parameters.
    /// Replies to one opcode on one controller come back in the order the commands went out.
    public func send(_ command: ManagementCommand, index: UInt16) async throws(ManagementError) -> [UInt8] {
        let reply = Mailbox<Result<[UInt8], ManagementStatus>>()
        // Registered before the write, so a reply can never arrive unclaimed.
        let open = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.pending.append(Pending(opcode: command.opcode, index: index, reply: reply))
            return true
        }
        guard open else { throw ManagementError(command: command.name, status: .disconnected) }
        guard await write(command.packet(index: index).encode()) else {
            state.withLock { $0.pending.removeAll { $0.reply === reply } }
            throw ManagementError(command: command.name, status: .failed)
        }
        guard let result = try? await reply.take() else {
            state.withLock { $0.pending.removeAll { $0.reply === reply } }
            throw ManagementError(command: command.name, status: .disconnected)
        }
        return try result.get(command: command.name)
    }

    /// Events as they come, with the controller each is about, until ``close()``.
    public func subscribe() -> Mailbox<(index: UInt16, event: ManagementEvent)> {
        let mailbox = Mailbox<(index: UInt16, event: ManagementEvent)>()
        let closed = state.withLock { state -> Bool in
            guard !state.closed else { return true }
            state.nextSubscriber += 1
            state.subscribers[state.nextSubscriber] = mailbox
            return false
        }
        if closed { mailbox.close() }
        return mailbox
    }

    /// Closes the socket: waiting commands fail, subscriptions end. The owner must call it
    /// (the reading task holds the channel until then).
    public func close() {
        let ended = state.withLock { state -> (pending: [Pending], subscribers: [Mailbox<(index: UInt16, event: ManagementEvent)>])? in
            guard !state.closed else { return nil }
            state.closed = true
            defer {
                state.pending = []
                state.subscribers = [:]
            }
            return (state.pending, Array(state.subscribers.values))
        }
        guard let ended else { return }
        reader.withLock { task in
            task?.cancel()
            task = nil
        }
        reactor.forget(fd)
        Glibc.close(fd)
        for waiter in ended.pending { waiter.reply.close() }
        for mailbox in ended.subscribers { mailbox.close() }
    }

    private func write(_ bytes: [UInt8]) async -> Bool {
        while true {
            let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent == bytes.count { return true }
            guard sent < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else { return false }
            do { try await reactor.wait(fd, writable: true) } catch { return false }
        }
    }

    private func readLoop() async {
        var buffer = [UInt8](repeating: 0, count: 65_542)
        while !Task.isCancelled {
            let count = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 {
                guard errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else { break }
                do { try await reactor.wait(fd, writable: false) } catch { break }
                continue
            }
            if count == 0 { break }
            guard let packet = try? ManagementPacket(decoding: Array(buffer[..<count])),
                let event = try? ManagementEvent(decoding: packet)
            else { continue }
            deliver(event, index: packet.index)
        }
        failPending()
    }

    private func deliver(_ event: ManagementEvent, index: UInt16) {
        switch event {
        case .commandComplete(let opcode, let status, let parameters):
            resume(opcode: opcode, index: index, with: status == .success ? .success(parameters) : .failure(status))
        case .commandStatus(let opcode, let status) where status != .success:
            resume(opcode: opcode, index: index, with: .failure(status))
        case .commandStatus:
            break  // under way: its Command Complete follows
        default:
            let subscribers = state.withLock { Array($0.subscribers.values) }
            for mailbox in subscribers { mailbox.put((index, event)) }
        }
    }

    private func resume(opcode: UInt16, index: UInt16, with result: Result<[UInt8], ManagementStatus>) {
        let waiter = state.withLock { state -> Pending? in
            guard let position = state.pending.firstIndex(where: { $0.opcode == opcode && $0.index == index }) else { return nil }
            return state.pending.remove(at: position)
        }
        waiter?.reply.put(result)
    }

    private func failPending() {
        let pending = state.withLock { state -> [Pending] in
            defer { state.pending = [] }
            return state.pending
        }
        for waiter in pending { waiter.reply.close() }
    }
}

extension Result where Success == [UInt8], Failure == ManagementStatus {
    fileprivate func get(command: String) throws(ManagementError) -> [UInt8] {
        switch self {
        case .success(let parameters): return parameters
        case .failure(let status): throw ManagementError(command: command, status: status)
        }
    }
}
