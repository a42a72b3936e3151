import BleotaLink
import Glibc

/// A listening TCP socket on the reactor: what serves a worker's metrics (`--metrics`).
///
/// Non-blocking: ``accept()`` waits on the ``DescriptorReactor`` like every other descriptor
/// of the process, and ``close()`` ends a waiting accept at once (it returns nil).
public final class TCPListener: Sendable {
    let descriptor: LinkDescriptor
    /// The port bound (the one asked for, or the kernel's choice for 0).
    public let port: UInt16

    /// Listens on `host` (an IPv4 or IPv6 literal, or a name) and `port` (0: any free port).
    public init(host: String, port: UInt16) throws(LinkError) {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        hints.ai_flags = AI_PASSIVE
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let first = result else {
            throw .unreachable("cannot resolve '\(host)': \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(result) }
        let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = Glibc.socket(first.pointee.ai_family, first.pointee.ai_socktype | flags, first.pointee.ai_protocol)
        guard fd >= 0 else { throw .system("socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        Glibc.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        guard Glibc.bind(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0, Glibc.listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw .system("cannot listen on \(host):\(port): \(reason)")
        }
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        // sin_port and sin6_port sit at the same offset (2), in network order.
        self.port = withUnsafeBytes(of: &bound) { UInt16($0[2]) << 8 | UInt16($0[3]) }
        descriptor = LinkDescriptor(fd: fd)
    }

    /// The next connection; nil once the listener is closed. Throws `CancellationError` when the
    /// waiting task is cancelled.
    public func accept() async throws -> TCPConnection? {
        let closed = "the TCP listener is closed"
        do {
            return try await descriptor.use(ifClosed: .disconnected(closed)) { fd throws(LinkError) in
                while true {
                    let client = Glibc.accept(fd, nil, nil)
                    if client >= 0 {
                        // accept4(2) is not in Swift's Glibc module: the same two flags, set after.
                        _ = Glibc.fcntl(client, F_SETFD, FD_CLOEXEC)
                        _ = Glibc.fcntl(client, F_SETFL, Glibc.fcntl(client, F_GETFL) | O_NONBLOCK)
                        return TCPConnection(fd: client)
                    }
                    switch errno {
                    case EINTR, ECONNABORTED: continue
                    case EAGAIN: try await descriptor.wait(writable: false, closed: closed)
                    case let code: throw .system("accept: \(String(cString: strerror(code)))")
                    }
                }
            }
        } catch .cancelled {
            throw CancellationError()
        } catch .disconnected {
            return nil
        }
    }

    /// Stops listening (once; later calls do nothing); a waiting ``accept()`` returns nil.
    public func close() { descriptor.close() }
}

/// One accepted TCP connection, read and written through the reactor.
public final class TCPConnection: Sendable {
    let descriptor: LinkDescriptor

    init(fd: Int32) { descriptor = LinkDescriptor(fd: fd) }

    /// Up to `maximum` bytes; empty at the end of the stream (the peer closed its side).
    public func read(maximum: Int = 4096) async throws(LinkError) -> [UInt8] {
        let closed = "the TCP connection is closed"
        return try await descriptor.use(ifClosed: .disconnected(closed)) { fd throws(LinkError) in
            var buffer = [UInt8](repeating: 0, count: max(1, maximum))
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if count >= 0 { return Array(buffer[..<count]) }
                switch errno {
                case EINTR: continue
                case EAGAIN: try await descriptor.wait(writable: false, closed: closed)
                case let code: throw .disconnected("TCP read: \(String(cString: strerror(code)))")
                }
            }
        }
    }

    /// Writes every byte, waiting while the socket's buffer is full.
    public func write(_ bytes: [UInt8]) async throws(LinkError) {
        let closed = "the TCP connection is closed"
        try await descriptor.use(ifClosed: .disconnected(closed)) { fd throws(LinkError) in
            var offset = 0
            while offset < bytes.count {
                let count = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if count >= 0 {
                    offset += count
                    continue
                }
                switch errno {
                case EINTR: continue
                case EAGAIN: try await descriptor.wait(writable: true, closed: closed)
                case let code: throw .disconnected("TCP write: \(String(cString: strerror(code)))")
                }
            }
        }
    }

    public func close() { descriptor.close() }
}
