import BleotaLink
import BleotaSystem
import CBlueZ
import Glibc

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

/// The real system calls, non-blocking, waited on through the process's one
/// epoll loop (BleotaSystem's ``/BleotaSystem/DescriptorReactor``), which the UDP and serial
/// links share.
public final class LinuxSocketSystem: SocketSystem {
    public static let shared = LinuxSocketSystem()
    let reactor = DescriptorReactor.shared

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
        let peer = L2CAPAddress(
            address: BluetoothAddress(littleEndian: bytes), type: raw.l2_bdaddr_type == 2 ? .random : .public,
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
        do {
            try await reactor.wait(fd, writable: writable)
        } catch .refused(let code) {
            throw SocketError("epoll_ctl", code)
        } catch {
            // Cancelled, or closed under the waiting task: both read as a cancelled wait
            // (`L2CAPLink` turns ECANCELED into `LinkError.cancelled`), as they always have.
            throw SocketError("wait", ECANCELED)
        }
    }
}
