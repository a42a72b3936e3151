import BleotaLink
import Glibc

/// A bound UDP socket answering whoever writes to it: the server side of
/// SMP over UDP (`bleota sim serve --udp`).
///
/// Non-blocking and read by the task awaiting ``receive()`` once the
/// ``DescriptorReactor`` says a datagram is there; ``close()`` ends a waiting
/// ``receive()`` at once (it returns nil) and closes the socket.
public final class UDPServerSocket: Sendable {
    /// A peer's address, kept opaque (`sockaddr_storage` bytes).
    public struct Peer: Sendable, Hashable {
        let storage: [UInt8]
        let length: socklen_t
    }

    let fd: Int32
    let descriptor: LinkDescriptor
    public let port: UInt16

    /// Binds `host` (an IPv4 or IPv6 literal, or a name) and `port` (0 = any free port).
    public init(host: String, port: UInt16) throws(LinkError) {
        let fd = try UDPSocket.open(host: host, port: port, passive: true) { fd, address, length throws(LinkError) in
            var yes: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
            guard bind(fd, address, length) == 0 else {
                throw .system("cannot listen on \(host):\(port): \(String(cString: strerror(errno)))")
            }
        }
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        let boundPort = withUnsafeBytes(of: &bound) { raw -> UInt16 in
            // sin_port and sin6_port sit at the same offset (2), in network order.
            UInt16(raw[2]) << 8 | UInt16(raw[3])
        }
        self.fd = fd
        self.port = boundPort
        descriptor = LinkDescriptor(fd: fd)
    }

    /// The next datagram and who sent it; nil once closed (or if the socket
    /// failed). Throws `CancellationError` if the waiting task is cancelled.
    public func receive() async throws -> (bytes: [UInt8], peer: Peer)? {
        let closed = "the UDP server socket is closed"
        do {
            return try await descriptor.use(ifClosed: .disconnected(closed)) { fd throws(LinkError) in
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    var peer = sockaddr_storage()
                    var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
                    let count = buffer.withUnsafeMutableBytes { raw in
                        withUnsafeMutablePointer(to: &peer) {
                            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, raw.baseAddress, raw.count, 0, $0, &peerLength) }
                        }
                    }
                    if count >= 0 {
                        let peerBytes = withUnsafeBytes(of: &peer) { Array($0) }
                        return (Array(buffer[..<count]), Peer(storage: peerBytes, length: peerLength))
                    }
                    switch errno {
                    case EINTR: continue
                    case EAGAIN: try await descriptor.wait(writable: false, closed: closed)
                    case let code: throw .disconnected("UDP receive: \(String(cString: strerror(code)))")
                    }
                }
            }
        } catch .cancelled {
            throw CancellationError()
        } catch .disconnected {
            return nil
        }
    }

    /// Sends one datagram to `peer`, without waiting: if the socket's send buffer
    /// is full the datagram is dropped, as the network may drop any datagram (the
    /// client's request times out and is sent again). Does nothing once closed.
    public func send(_ bytes: [UInt8], to peer: Peer) {
        var storage = peer.storage
        _ = descriptor.useNow { fd in
            bytes.withUnsafeBytes { raw in
                storage.withUnsafeMutableBytes { address in
                    sendto(fd, raw.baseAddress, raw.count, 0, address.baseAddress!.assumingMemoryBound(to: sockaddr.self), peer.length)
                }
            }
        }
    }

    /// Closes the socket (once; later calls do nothing); a waiting ``receive()`` returns nil.
    public func close() { descriptor.close() }
}

/// The one place a UDP socket is made, for both ends.
enum UDPSocket {
    /// Resolves `host` (a name or an IPv4/IPv6 literal; for a passive socket, the
    /// address to listen on), opens a non-blocking socket of the first address's
    /// family and hands it to `prepare` (connect or bind); closes it if that throws.
    static func open(
        host: String, port: UInt16, passive: Bool,
        _ prepare: (Int32, UnsafePointer<sockaddr>, socklen_t) throws(LinkError) -> Void
    ) throws(LinkError) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_family = AF_UNSPEC
        if passive { hints.ai_flags = AI_PASSIVE }
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let first = result else {
            throw .unreachable("cannot resolve '\(host)': \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(result) }
        let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = socket(first.pointee.ai_family, first.pointee.ai_socktype | flags, first.pointee.ai_protocol)
        guard fd >= 0 else { throw .system("socket: \(String(cString: strerror(errno)))") }
        do {
            try prepare(fd, first.pointee.ai_addr, first.pointee.ai_addrlen)
        } catch {
            Glibc.close(fd)
            throw error
        }
        return fd
    }
}
