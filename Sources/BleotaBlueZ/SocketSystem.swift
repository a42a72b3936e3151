import Foundation
import CBlueZ
import Glibc
import Synchronization

/// An errno from a socket call, with the call's name.
public struct SocketError: Error, Sendable, Equatable, CustomStringConvertible {
    public var call: String
    public var code: Int32
    public init(_ call: String, _ code: Int32) {
        self.call = call
        self.code = code
    }
    public var description: String { "\(call) failed: \(String(cString: strerror(code))) (errno \(code))" }
}

/// An L2CAP socket address (`struct sockaddr_l2`).
public struct L2CAPAddress: Sendable, Hashable {
    public var address: BluetoothAddress
    public var type: AddressType
    /// A PSM for a credit-based channel (0 for a fixed channel).
    public var psm: UInt16
    /// A fixed channel (4 = ATT), 0 for a credit-based channel.
    public var cid: UInt16

    public static let attChannel: UInt16 = 4

    public init(address: BluetoothAddress, type: AddressType, psm: UInt16 = 0, cid: UInt16 = 0) {
        self.address = address
        self.type = type
        self.psm = psm
        self.cid = cid
    }
}

/// The system calls bleota's Bluetooth transport makes, behind one seam so
/// tests can script them (a mock) or run them on `socketpair` stand-ins.
/// Every call returns its errno in the error, captured at once.
public protocol SocketSystem: Sendable {
    func l2capSocket() throws(SocketError) -> Int32
    func setOption(_ fd: Int32, level: Int32, name: Int32, value: [UInt8]) throws(SocketError)
    func getOption(_ fd: Int32, level: Int32, name: Int32, size: Int) throws(SocketError) -> [UInt8]
    func bind(_ fd: Int32, _ address: L2CAPAddress) throws(SocketError)
    /// Starts a non-blocking connect: true if it completed at once, false if in progress.
    func connect(_ fd: Int32, _ address: L2CAPAddress) throws(SocketError) -> Bool
    func listen(_ fd: Int32, backlog: Int32) throws(SocketError)
    /// Accepts one connection, or nil if none is pending (EAGAIN).
    func accept(_ fd: Int32) throws(SocketError) -> (fd: Int32, peer: L2CAPAddress)?
    /// Sends one packet; false if the socket's buffer is full (EAGAIN).
    func send(_ fd: Int32, _ bytes: [UInt8]) throws(SocketError) -> Bool
    /// Receives one packet; nil if none is waiting (EAGAIN); an empty packet at end of stream.
    func receive(_ fd: Int32, capacity: Int) throws(SocketError) -> [UInt8]?
    func close(_ fd: Int32)
    /// Suspends until `fd` is readable (or writable), without a thread per wait.
    func wait(_ fd: Int32, writable: Bool) async throws(SocketError)
}

/// The real system calls, non-blocking, with an epoll reactor for waiting.
public final class LinuxSocketSystem: SocketSystem {
    public static let shared = LinuxSocketSystem()
    let reactor = Reactor()

    public func l2capSocket() throws(SocketError) -> Int32 {
        let fd = socket(AF_BLUETOOTH, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_L2CAP)
        guard fd >= 0 else { throw SocketError("socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP)", errno) }
        return fd
    }

    public func setOption(_ fd: Int32, level: Int32, name: Int32, value: [UInt8]) throws(SocketError) {
        let result = value.withUnsafeBytes { setsockopt(fd, level, name, $0.baseAddress, socklen_t($0.count)) }
        guard result == 0 else { throw SocketError("setsockopt(\(level), \(name))", errno) }
    }

    public func getOption(_ fd: Int32, level: Int32, name: Int32, size: Int) throws(SocketError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: size)
        var length = socklen_t(size)
        let result = buffer.withUnsafeMutableBytes { getsockopt(fd, level, name, $0.baseAddress, &length) }
        guard result == 0 else { throw SocketError("getsockopt(\(level), \(name))", errno) }
        return Array(buffer.prefix(Int(length)))
    }

    static func raw(_ address: L2CAPAddress) -> sockaddr_l2 {
        var raw = sockaddr_l2()
        raw.l2_family = sa_family_t(AF_BLUETOOTH)
        raw.l2_psm = address.psm.littleEndian
        raw.l2_cid = address.cid.littleEndian
        raw.l2_bdaddr_type = address.type.kernelValue
        let bytes = address.address.littleEndian
        withUnsafeMutableBytes(of: &raw.l2_bdaddr) { for index in 0..<6 { $0[index] = bytes[index] } }
        return raw
    }

    public func bind(_ fd: Int32, _ address: L2CAPAddress) throws(SocketError) {
        var raw = Self.raw(address)
        let result = withUnsafePointer(to: &raw) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
        }
        guard result == 0 else { throw SocketError("bind", errno) }
    }

    public func connect(_ fd: Int32, _ address: L2CAPAddress) throws(SocketError) -> Bool {
        var raw = Self.raw(address)
        let result = withUnsafePointer(to: &raw) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
        }
        if result == 0 { return true }
        if errno == EINPROGRESS || errno == EAGAIN { return false }
        throw SocketError("connect", errno)
    }

    public func listen(_ fd: Int32, backlog: Int32) throws(SocketError) {
        guard Glibc.listen(fd, backlog) == 0 else { throw SocketError("listen", errno) }
    }

    public func accept(_ fd: Int32) throws(SocketError) -> (fd: Int32, peer: L2CAPAddress)? {
        var raw = sockaddr_l2()
        var length = socklen_t(MemoryLayout<sockaddr_l2>.size)
        let client = withUnsafeMutablePointer(to: &raw) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(fd, $0, &length) }
        }
        if client < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
            throw SocketError("accept", errno)
        }
        // accept4 would do this in one call, but needs _GNU_SOURCE (see the CBlueZ shim).
        _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
        _ = fcntl(client, F_SETFD, FD_CLOEXEC)
        let bytes = withUnsafeBytes(of: raw.l2_bdaddr) { Array($0) }
        let peer = L2CAPAddress(address: BluetoothAddress(littleEndian: bytes), type: raw.l2_bdaddr_type == 2 ? .random : .public,
                                psm: UInt16(littleEndian: raw.l2_psm), cid: UInt16(littleEndian: raw.l2_cid))
        return (client, peer)
    }

    public func send(_ fd: Int32, _ bytes: [UInt8]) throws(SocketError) -> Bool {
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if sent >= 0 { return true }
        if errno == EAGAIN || errno == EWOULDBLOCK { return false }
        throw SocketError("send", errno)
    }

    public func receive(_ fd: Int32, capacity: Int) throws(SocketError) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: capacity)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if count >= 0 { return Array(buffer.prefix(count)) }
        if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
        throw SocketError("recv", errno)
    }

    public func close(_ fd: Int32) {
        reactor.forget(fd)
        _ = Glibc.close(fd)
    }

    public func wait(_ fd: Int32, writable: Bool) async throws(SocketError) {
        try await reactor.wait(fd, writable: writable)
    }
}

/// One thread running `epoll_wait` for every socket: a waiting task parks a
/// continuation here and is resumed when its descriptor is ready. No polling
/// loops, no thread per connection or packet.
final class Reactor: Sendable {
    private struct Waiter {
        var id: UInt64
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var readers: [Int32: Waiter] = [:]
        var writers: [Int32: Waiter] = [:]
        var nextID: UInt64 = 0
        var started = false
    }

    private let epoll: Int32
    private let state = Mutex(State())

    init() {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
    }

    private func startIfNeeded() {
        let start = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started
        }
        guard start else { return }
        let thread = Thread { [self] in loop() }
        thread.start()
    }

    private func loop() {
        var events = [epoll_event](repeating: epoll_event(), count: 32)
        while true {
            let count = epoll_wait(epoll, &events, Int32(events.count), -1)
            if count < 0 { if errno == EINTR { continue }; return }
            for index in 0..<Int(count) {
                let fd = Int32(truncatingIfNeeded: events[index].data.fd)
                let flags = events[index].events
                let ready = state.withLock { state -> [Waiter] in
                    var ready: [Waiter] = []
                    let failed = flags & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
                    if flags & EPOLLIN.rawValue != 0 || failed, let waiter = state.readers.removeValue(forKey: fd) { ready.append(waiter) }
                    if flags & EPOLLOUT.rawValue != 0 || failed, let waiter = state.writers.removeValue(forKey: fd) { ready.append(waiter) }
                    return ready
                }
                for waiter in ready { waiter.continuation.resume() }
                rearm(fd)
            }
        }
    }

    /// Re-registers `fd` for whatever waiters remain (one-shot registrations).
    private func rearm(_ fd: Int32) {
        let mask: UInt32 = state.withLock { state in
            (state.readers[fd] != nil ? EPOLLIN.rawValue : 0) | (state.writers[fd] != nil ? EPOLLOUT.rawValue : 0)
        }
        guard mask != 0 else { return }
        var event = epoll_event(events: mask | EPOLLONESHOT.rawValue, data: epoll_data_t(fd: fd))
        if epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event) != 0 {
            _ = epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event)
        }
    }

    func wait(_ fd: Int32, writable: Bool) async throws(SocketError) {
        startIfNeeded()
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        do {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    state.withLock { state in
                        if writable { state.writers[fd] = Waiter(id: id, continuation: continuation) }
                        else { state.readers[fd] = Waiter(id: id, continuation: continuation) }
                    }
                    rearm(fd)
                }
            } onCancel: {
                let waiter = state.withLock { state -> Waiter? in
                    if writable, state.writers[fd]?.id == id { return state.writers.removeValue(forKey: fd) }
                    if !writable, state.readers[fd]?.id == id { return state.readers.removeValue(forKey: fd) }
                    return nil
                }
                waiter?.continuation.resume(throwing: CancellationError())
            }
        } catch {
            throw SocketError("wait", ECANCELED)
        }
    }

    /// Drops a closed descriptor, failing anything still waiting on it.
    func forget(_ fd: Int32) {
        let waiters = state.withLock { state -> [Waiter] in
            [state.readers.removeValue(forKey: fd), state.writers.removeValue(forKey: fd)].compactMap { $0 }
        }
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil)
        for waiter in waiters { waiter.continuation.resume(throwing: SocketError("wait", EBADF)) }
    }
}
