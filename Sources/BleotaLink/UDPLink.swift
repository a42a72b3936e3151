import Glibc

/// A UDP "connection" to one peer: each ``send(_:)`` is a datagram, each
/// ``receive()`` one datagram from that peer. Used for MCUmgr's SMP over UDP.
///
/// The socket is non-blocking and read by the task that awaits ``receive()``
/// once the ``DescriptorReactor`` says a datagram is there: no reader thread.
/// ``close()`` ends a waiting ``receive()`` at once with
/// ``LinkError/disconnected(_:)``.
public final class UDPLink: Link {
    public let parameters: LinkParameters
    let fd: Int32
    let descriptor: LinkDescriptor
    static let closedMessage = "the UDP link is closed"

    /// Resolves `host` (a name or IPv4/IPv6 literal) and connects a UDP socket to it.
    public init(host: String, port: UInt16, maximumPayload: Int = 1024) throws(LinkError) {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let first = result else {
            throw .unreachable("cannot resolve '\(host)': \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(result) }
        let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = socket(first.pointee.ai_family, first.pointee.ai_socktype | flags, first.pointee.ai_protocol)
        guard fd >= 0 else { throw .system("socket: \(String(cString: strerror(errno)))") }
        // A UDP connect only records the peer, so it completes at once even on a non-blocking socket.
        guard Glibc.connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(fd)
            throw .unreachable("cannot reach \(host):\(port): \(message)")
        }
        self.fd = fd
        descriptor = LinkDescriptor(fd: fd)
        parameters = LinkParameters(maximumPayload: maximumPayload, description: "udp://\(host):\(port)")
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        try await descriptor.use(ifClosed: .disconnected(Self.closedMessage)) { fd throws(LinkError) in
            while true {
                let sent = packet.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) }
                if sent >= 0 { return }
                switch errno {
                case EINTR: continue
                case EAGAIN: // the socket's send buffer is full
                    try await descriptor.wait(writable: true, closed: Self.closedMessage)
                case ECONNREFUSED: return // an earlier datagram was refused; this one may yet arrive
                case let code: throw .system("UDP send: \(String(cString: strerror(code)))")
                }
            }
        }
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        try await descriptor.use(ifClosed: .disconnected(Self.closedMessage)) { fd throws(LinkError) in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count > 0 { return Array(buffer[..<count]) }
                if count == 0 { continue } // an empty datagram carries no packet
                switch errno {
                // ECONNREFUSED: nothing listens there (an ICMP port-unreachable came back). Keep
                // reading; the request times out with a message saying so.
                case EINTR, ECONNREFUSED: continue
                case EAGAIN:
                    try await descriptor.wait(writable: false, closed: Self.closedMessage)
                case let code: throw .disconnected("UDP receive: \(String(cString: strerror(code)))")
                }
            }
        }
    }

    /// Closes the socket (once; later calls do nothing). A task waiting in
    /// ``receive()`` or ``send(_:)`` gets ``LinkError/disconnected(_:)`` at once.
    public func close() async { descriptor.close() }
}
