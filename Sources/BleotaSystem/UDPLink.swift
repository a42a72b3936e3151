import BleotaLink
import Glibc

/// A UDP "connection" to one peer: each ``send(_:)`` is a datagram, each
/// ``receive()`` one datagram from that peer. Used for MCUmgr's SMP over UDP.
///
/// The socket is non-blocking and read by the task that awaits ``receive()``
/// once the ``DescriptorReactor`` says a datagram is there: no reader thread.
/// ``close()`` ends a waiting ``receive()`` at once with
/// ``/BleotaLink/LinkError/disconnected(_:)``.
public final class UDPLink: Link {
    public let parameters: LinkParameters
    let fd: Int32
    let descriptor: LinkDescriptor
    static let closedMessage = "the UDP link is closed"

    /// Resolves `host` (a name or IPv4/IPv6 literal) and connects a UDP socket to it.
    public init(host: String, port: UInt16, maximumPayload: Int = 1024) throws(LinkError) {
        let fd = try UDPSocket.open(host: host, port: port, passive: false) { fd, address, length throws(LinkError) in
            // A UDP connect only records the peer, so it completes at once even on a non-blocking socket.
            guard Glibc.connect(fd, address, length) == 0 else {
                throw .unreachable("cannot reach \(host):\(port): \(String(cString: strerror(errno)))")
            }
        }
        self.fd = fd
        descriptor = LinkDescriptor(fd: fd)
        parameters = LinkParameters(maximumPayload: maximumPayload, description: "udp://\(host):\(port)", carriesWholeMessages: true)
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        try await descriptor.use(ifClosed: .disconnected(Self.closedMessage)) { fd throws(LinkError) in
            while true {
                let sent = packet.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) }
                if sent >= 0 { return }
                switch errno {
                case EINTR: continue
                case EAGAIN:  // the socket's send buffer is full
                    try await descriptor.wait(writable: true, closed: Self.closedMessage)
                case ECONNREFUSED: return  // an earlier datagram was refused; this one may yet arrive
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
                if count == 0 { continue }  // an empty datagram carries no packet
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
    /// ``receive()`` or ``send(_:)`` gets ``/BleotaLink/LinkError/disconnected(_:)`` at once.
    public func close() async { descriptor.close() }
}
