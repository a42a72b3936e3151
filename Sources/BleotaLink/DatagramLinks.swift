import Foundation
import Glibc
import Synchronization

/// A file descriptor read by one thread of its own (blocking in poll(2), never
/// spinning) into a mailbox, so async code can await packets. One thread per
/// link, not per packet; closing the link stops it within 100 ms.
final class DescriptorReader: Sendable {
    let fd: Int32
    let packets = Mailbox<[UInt8]>()
    private let stopped = Mutex(false)

    /// `read` pulls one packet (a datagram, a chunk of a byte stream) when the descriptor is readable;
    /// nil means end of input.
    /// `hangupEndsInput` false: a hang-up is a peer not there yet (a pty whose slave nobody opened).
    init(fd: Int32, name: String, hangupEndsInput: Bool = true, read: @escaping @Sendable (Int32) -> [UInt8]?) {
        self.fd = fd
        let packets = self.packets
        let thread = Thread { [self] in
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            while !stopped.withLock({ $0 }) {
                descriptor.revents = 0
                let ready = poll(&descriptor, 1, 100)
                if ready < 0 && errno != EINTR { break }
                guard ready > 0 else { continue }
                if descriptor.revents & Int16(POLLIN) == 0, descriptor.revents & Int16(POLLHUP | POLLERR) != 0 {
                    if hangupEndsInput { break }
                    usleep(50_000)
                    continue
                }
                guard let packet = read(fd) else { break }
                if !packet.isEmpty { packets.put(packet) }
            }
            packets.close()
        }
        thread.name = name
        thread.start()
    }

    func stop() { stopped.withLock { $0 = true } }

    var isStopped: Bool { stopped.withLock { $0 } }

    /// The next packet read; once input has ended, `closed` as the link's error.
    func next(closed: String) async throws(LinkError) -> [UInt8] {
        do {
            guard let packet = try await packets.take() else { throw LinkError.disconnected(closed) }
            return packet
        } catch let error as LinkError {
            throw error
        } catch {
            throw .cancelled
        }
    }

    /// Stops the reader once and, after its thread has seen the stop (it polls every
    /// 100 ms), closes the descriptor if the link owns it. Later calls do nothing.
    func shutDown(closingDescriptor: Bool) async {
        let wasRunning = stopped.withLock { stopped in
            defer { stopped = true }
            return !stopped
        }
        guard wasRunning else { return }
        try? await Task.sleep(for: .milliseconds(150))
        if closingDescriptor { Glibc.close(fd) }
    }
}

/// A UDP "connection" to one peer: each ``send(_:)`` is a datagram, each
/// ``receive()`` one datagram from that peer. Used for MCUmgr's SMP over UDP.
public final class UDPLink: Link {
    public let parameters: LinkParameters
    let fd: Int32
    let reader: DescriptorReader

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
        let fd = socket(first.pointee.ai_family, first.pointee.ai_socktype, first.pointee.ai_protocol)
        guard fd >= 0 else { throw .system("socket: \(String(cString: strerror(errno)))") }
        guard Glibc.connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(fd)
            throw .unreachable("cannot reach \(host):\(port): \(message)")
        }
        self.fd = fd
        parameters = LinkParameters(maximumPayload: maximumPayload, description: "udp://\(host):\(port)")
        reader = DescriptorReader(fd: fd, name: "bleota-udp") { fd in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            // ECONNREFUSED: nothing listens there (an ICMP port-unreachable came back). Keep reading;
            // the request times out with a message saying so.
            if count < 0 { return errno == ECONNREFUSED || errno == EINTR ? [] : nil }
            return Array(buffer[..<count])
        }
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard !reader.isStopped else { throw .disconnected("the UDP link is closed") }
        let sent = packet.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) }
        guard sent == packet.count else {
            if errno == ECONNREFUSED { return } // an earlier datagram was refused; this one may yet arrive
            throw .system("UDP send: \(String(cString: strerror(errno)))")
        }
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        try await reader.next(closed: "the UDP link is closed")
    }

    public func close() async { await reader.shutDown(closingDescriptor: true) }
}

/// A serial port (or a pseudo-terminal) in raw mode as a byte stream cut into
/// lines: each ``receive()`` is one line without its newline, each
/// ``send(_:)`` writes bytes as they are. SMP's console framing runs on top.
public final class SerialLineLink: Link {
    public let parameters: LinkParameters
    let fd: Int32
    let reader: DescriptorReader
    private let lines = Mutex<[UInt8]>([])
    let ownsDescriptor: Bool

    /// Opens `path` at `baud` in raw mode (8N1, no flow control).
    public convenience init(path: String, baud: Int = 115_200) throws(LinkError) {
        let fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK)
        guard fd >= 0 else {
            let code = errno
            let hint = code == EACCES ? " (add yourself to the dialout group)" : code == ENOENT ? " (is the device plugged in?)" : ""
            throw .unreachable("cannot open \(path): \(String(cString: strerror(code)))\(hint)")
        }
        do {
            try Self.makeRaw(fd, baud: baud)
        } catch {
            Glibc.close(fd)
            throw error
        }
        self.init(fd: fd, description: "serial://\(path)", ownsDescriptor: true)
    }

    /// Wraps an open descriptor. `isPseudoTerminalMaster`: the far end comes and goes
    /// (clients open and close the slave), which is not the end of input.
    public init(fd: Int32, description: String, ownsDescriptor: Bool, isPseudoTerminalMaster: Bool = false) {
        self.fd = fd
        self.ownsDescriptor = ownsDescriptor
        parameters = LinkParameters(maximumPayload: 65_536, description: description)
        reader = DescriptorReader(fd: fd, name: "bleota-serial", hangupEndsInput: !isPseudoTerminalMaster) { fd in
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EIO && isPseudoTerminalMaster { usleep(50_000); return [] } // no slave open right now
                return errno == EAGAIN || errno == EINTR ? [] : nil
            }
            if count == 0 { return [] } // a pty with no writer yet reads 0: wait for one
            return Array(buffer[..<count])
        }
    }

    static func makeRaw(_ fd: Int32, baud: Int) throws(LinkError) {
        var settings = termios()
        guard tcgetattr(fd, &settings) == 0 else { throw .system("tcgetattr: \(String(cString: strerror(errno)))") }
        cfmakeraw(&settings)
        let speeds: [Int: speed_t] = [9600: speed_t(B9600), 19200: speed_t(B19200), 38400: speed_t(B38400), 57600: speed_t(B57600),
                                      115_200: speed_t(B115200), 230_400: speed_t(B230400), 460_800: speed_t(B460800),
                                      921_600: speed_t(B921600), 1_000_000: speed_t(B1000000)]
        guard let speed = speeds[baud] else {
            throw .system("baud rate \(baud) is not supported: use one of \(speeds.keys.sorted().map(String.init).joined(separator: ", "))")
        }
        cfsetispeed(&settings, speed)
        cfsetospeed(&settings, speed)
        guard tcsetattr(fd, TCSANOW, &settings) == 0 else { throw .system("tcsetattr: \(String(cString: strerror(errno)))") }
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        var offset = 0
        while offset < packet.count {
            guard !reader.isStopped else { throw .disconnected("the serial link is closed") }
            let written = packet[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written > 0 { offset += written; continue }
            guard errno == EAGAIN || errno == EINTR else { throw .disconnected("serial write: \(String(cString: strerror(errno)))") }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// The next complete line (without "\n").
    public func receive() async throws(LinkError) -> [UInt8] {
        while true {
            if let line = lines.withLock({ buffer -> [UInt8]? in
                guard let end = buffer.firstIndex(of: 0x0A) else { return nil }
                let line = Array(buffer[..<end])
                buffer.removeSubrange(...end)
                return line
            }) { return line }
            let chunk = try await reader.next(closed: "the serial port closed")
            lines.withLock { $0 += chunk }
        }
    }

    public func close() async { await reader.shutDown(closingDescriptor: ownsDescriptor) }
}

/// A bound UDP socket answering whoever writes to it: the server side of
/// SMP over UDP (`bleota sim serve --udp`).
public final class UDPServerSocket: Sendable {
    /// A peer's address, kept opaque (`sockaddr_storage` bytes).
    public struct Peer: Sendable, Hashable { let storage: [UInt8]; let length: socklen_t }

    let fd: Int32
    let reader: DescriptorReader
    private let datagrams = Mailbox<(bytes: [UInt8], peer: Peer)>()
    public let port: UInt16

    /// Binds `host` (an IPv4 or IPv6 literal, or a name) and `port` (0 = any free port).
    public init(host: String, port: UInt16) throws(LinkError) {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_family = AF_UNSPEC
        hints.ai_flags = AI_PASSIVE
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let first = result else {
            throw .unreachable("cannot resolve '\(host)': \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(result) }
        let fd = socket(first.pointee.ai_family, first.pointee.ai_socktype, first.pointee.ai_protocol)
        guard fd >= 0 else { throw .system("socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(fd)
            throw .system("cannot listen on \(host):\(port): \(message)")
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
        let datagrams = self.datagrams
        reader = DescriptorReader(fd: fd, name: "bleota-udp-server") { fd in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var peer = sockaddr_storage()
            var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let count = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &peer) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, raw.baseAddress, raw.count, 0, $0, &peerLength) }
                }
            }
            if count < 0 { return errno == EINTR ? [] : nil }
            let peerBytes = withUnsafeBytes(of: &peer) { Array($0) }
            datagrams.put((Array(buffer[..<count]), Peer(storage: peerBytes, length: peerLength)))
            return []
        }
    }

    /// The next datagram and who sent it; nil once closed.
    public func receive() async throws -> (bytes: [UInt8], peer: Peer)? {
        try await datagrams.take()
    }

    public func send(_ bytes: [UInt8], to peer: Peer) {
        var storage = peer.storage
        _ = bytes.withUnsafeBytes { raw in
            storage.withUnsafeMutableBytes { address in
                sendto(fd, raw.baseAddress, raw.count, 0, address.baseAddress!.assumingMemoryBound(to: sockaddr.self), peer.length)
            }
        }
    }

    public func close() {
        reader.stop()
        datagrams.close()
    }
}

/// A pseudo-terminal pair: the master side for the simulated device, the
/// slave's path for a client (`smpmgr --port /dev/pts/N`).
public struct PseudoTerminal: Sendable {
    public let master: Int32
    public let path: String

    public static func open() throws(LinkError) -> PseudoTerminal {
        // posix_openpt/grantpt/unlockpt/ptsname, spelled with the kernel's ioctls (devpts does the granting).
        let master = Glibc.open("/dev/ptmx", O_RDWR | O_NOCTTY | O_NONBLOCK)
        guard master >= 0 else { throw .system("cannot create a pseudo-terminal: \(String(cString: strerror(errno)))") }
        var unlock: Int32 = 0
        var number: UInt32 = 0
        guard ioctl(master, 0x4004_5431 /* TIOCSPTLCK */, &unlock) == 0, ioctl(master, 0x8004_5430 /* TIOCGPTN */, &number) == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(master)
            throw .system("cannot set up the pseudo-terminal: \(message)")
        }
        let name = "/dev/pts/\(number)"
        var settings = termios()
        if tcgetattr(master, &settings) == 0 {
            cfmakeraw(&settings)
            tcsetattr(master, TCSANOW, &settings)
        }
        return PseudoTerminal(master: master, path: name)
    }
}
