import BleotaLink
import CBlueZ
import Glibc
import Synchronization

/// A connected L2CAP SOCK_SEQPACKET socket: one packet per SDU, on the LE ATT
/// fixed channel (CID 4) or an LE credit-based channel (a dynamic PSM).
///
/// Configured before it connects (security level, MTU), connected without
/// blocking (the connect is started, the task waits for writability, then
/// reads `SO_ERROR`), and used through the reactor: no thread per packet.
public final class L2CAPSocket: Sendable {
    public let fd: Int32
    public let system: any SocketSystem
    public let peer: L2CAPAddress
    /// The largest packet to receive (the MTU of the channel).
    public let receiveCapacity: Int
    private let closed = Mutex(false)

    init(fd: Int32, system: any SocketSystem, peer: L2CAPAddress, receiveCapacity: Int) {
        self.fd = fd
        self.system = system
        self.peer = peer
        self.receiveCapacity = receiveCapacity
    }

    /// Wraps an already connected descriptor (a `socketpair` stand-in in tests).
    public static func adopt(fd: Int32, system: any SocketSystem, peer: L2CAPAddress, receiveCapacity: Int = 65_535) -> L2CAPSocket {
        L2CAPSocket(fd: fd, system: system, peer: peer, receiveCapacity: receiveCapacity)
    }

    /// The HCI handle of the LE connection under this channel (`L2CAP_CONNINFO`),
    /// which HCI commands about the connection name.
    public var connectionHandle: UInt16? {
        // SOL_L2CAP 6, L2CAP_CONNINFO 2: struct l2cap_conninfo { uint16_t hci_handle; uint8_t dev_class[3]; }
        guard let raw = try? system.getOption(fd, level: 6, name: 2, size: 6), raw.count >= 2 else { return nil }
        return UInt16(raw[0]) | UInt16(raw[1]) << 8
    }

    /// Connects from `local` (the adapter's address; the kernel needs the
    /// client bound to the same channel for CID 4) to `remote`.
    public static func connect(
        from local: L2CAPAddress, to remote: L2CAPAddress, security: SecurityLevel = .low,
        receiveMTU: Int? = nil, timeout: Duration, clock: any BleotaClock,
        system: any SocketSystem = LinuxSocketSystem.shared
    ) async throws(SocketError) -> L2CAPSocket {
        let fd = try system.l2capSocket()
        do throws(SocketError) {
            try configure(fd, security: security, receiveMTU: nil, system: system)
            try system.bind(fd, local)
            // The kernel accepts BT_RCVMTU only once the socket is bound to an LE address.
            try configure(fd, security: .low, receiveMTU: receiveMTU, system: system)
            if try !system.connect(fd, remote) {
                do {
                    try await withDeadline(timeout, clock: clock) { try await system.wait(fd, writable: true) }
                } catch let error as SocketError {
                    throw error
                } catch {
                    throw SocketError("connect (no answer within \(timeout): is the device advertising and in range?)", ETIMEDOUT)
                }
                let status = try system.getOption(fd, level: SOL_SOCKET, name: SO_ERROR, size: 4)
                let code = status.withUnsafeBytes { $0.load(as: Int32.self) }
                guard code == 0 else { throw SocketError("connect", code) }
            }
            return L2CAPSocket(fd: fd, system: system, peer: remote, receiveCapacity: max(receiveMTU ?? 0, 65_535))
        } catch {
            system.close(fd)
            throw error
        }
    }

    static func configure(_ fd: Int32, security: SecurityLevel, receiveMTU: Int?, system: any SocketSystem) throws(SocketError) {
        if security != .low {
            // struct bt_security { uint8_t level; uint8_t key_size; }
            try system.setOption(fd, level: SOL_BLUETOOTH, name: BT_SECURITY, value: [security.kernelValue, 0])
        }
        if let receiveMTU {
            // L2CAP_OPTIONS fails with EINVAL on LE: use BT_RCVMTU (a uint16).
            try system.setOption(fd, level: SOL_BLUETOOTH, name: 13, value: [UInt8(receiveMTU & 0xFF), UInt8(receiveMTU >> 8)])
        }
    }

    /// Listens on `local` (CID 4 for ATT, or a PSM) and returns the listening socket.
    public static func listen(
        on local: L2CAPAddress, security: SecurityLevel = .low, receiveMTU: Int? = nil,
        system: any SocketSystem = LinuxSocketSystem.shared
    ) throws(SocketError) -> L2CAPListener {
        let fd = try system.l2capSocket()
        do throws(SocketError) {
            try configure(fd, security: security, receiveMTU: nil, system: system)
            try system.bind(fd, local)
            try configure(fd, security: .low, receiveMTU: receiveMTU, system: system)
            try system.listen(fd, backlog: 4)
        } catch {
            system.close(fd)
            throw error
        }
        return L2CAPListener(fd: fd, system: system, receiveCapacity: max(receiveMTU ?? 0, 65_535))
    }

    public func send(_ packet: [UInt8]) async throws(SocketError) {
        while true {
            if closed.withLock({ $0 }) { throw SocketError("send", EBADF) }
            if try system.send(fd, packet) { return }
            try await system.wait(fd, writable: true)
        }
    }

    /// The next packet; throws `ECONNRESET` at the end of the stream.
    public func receive() async throws(SocketError) -> [UInt8] {
        while true {
            if closed.withLock({ $0 }) { throw SocketError("recv", EBADF) }
            if let packet = try system.receive(fd, capacity: receiveCapacity) {
                guard !packet.isEmpty else { throw SocketError("recv", ECONNRESET) }
                return packet
            }
            try await system.wait(fd, writable: false)
        }
    }

    public func close() {
        let first = closed.withLock { state -> Bool in
            defer { state = true }
            return !state
        }
        if first { system.close(fd) }
    }
}

/// A listening L2CAP socket.
public final class L2CAPListener: Sendable {
    public let fd: Int32
    let system: any SocketSystem
    let receiveCapacity: Int

    init(fd: Int32, system: any SocketSystem, receiveCapacity: Int) {
        self.fd = fd
        self.system = system
        self.receiveCapacity = receiveCapacity
    }

    public func accept() async throws(SocketError) -> L2CAPSocket {
        while true {
            if let (client, peer) = try system.accept(fd) {
                return L2CAPSocket(fd: client, system: system, peer: peer, receiveCapacity: receiveCapacity)
            }
            try await system.wait(fd, writable: false)
        }
    }

    public func close() { system.close(fd) }
}

/// An L2CAP socket as a ``/BleotaLink/Link``: an ATT channel for ``/BleotaATT/ATTBearer`` (CID 4),
/// or a credit-based channel carrying protocol packets directly.
public final class L2CAPLink: Link {
    public let socket: L2CAPSocket
    public let parameters: LinkParameters

    public init(socket: L2CAPSocket, maximumPayload: Int, description: String) {
        self.socket = socket
        parameters = LinkParameters(maximumPayload: maximumPayload, description: description)
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard packet.count <= parameters.maximumPayload else {
            throw .payloadTooLarge(size: packet.count, maximum: parameters.maximumPayload)
        }
        do { try await socket.send(packet) } catch { throw Self.linkError(error) }
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        do { return try await socket.receive() } catch { throw Self.linkError(error) }
    }

    public func close() async { socket.close() }

    static func linkError(_ error: SocketError) -> LinkError {
        error.code == ECANCELED ? .cancelled : .disconnected(error.description)
    }
}
