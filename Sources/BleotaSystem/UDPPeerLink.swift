import BleotaLink
import Synchronization

/// One peer of a ``UDPServerSocket`` as a ``/BleotaLink/Link``: the datagrams it sends
/// arrive here, and what is sent here goes back to it. This is how a device
/// half that serves links (the same code that serves a BLE connection) serves
/// each UDP client of `bleota sim serve`.
public final class UDPPeerLink: Link {
    public let parameters: LinkParameters
    public let peer: UDPServerSocket.Peer
    private let server: UDPServerSocket
    let inbox = Mailbox<[UInt8]>()
    /// While set, arriving datagrams are dropped: a device that is rebooting hears nothing.
    private let deafUntil = Mutex<Duration>(.zero)

    init(server: UDPServerSocket, peer: UDPServerSocket.Peer, description: String) {
        self.server = server
        self.peer = peer
        parameters = LinkParameters(maximumPayload: 65_507, description: description, carriesWholeMessages: true)
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard !inbox.isClosed else { throw .disconnected("the UDP server is closed") }
        server.send(packet, to: peer)
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        do {
            guard let packet = try await inbox.take() else { throw LinkError.disconnected("the UDP server is closed") }
            return packet
        } catch let error as LinkError { throw error } catch { throw .cancelled }
    }

    /// Datagrams are per message: a peer's link is never "closed" by the device, only by the server.
    public func close() async {}

    /// True once the server closed.
    public var isClosed: Bool { inbox.isClosed }

    /// Drops what arrives before `time` on `clock`'s timeline.
    public func ignore(until time: Duration) { deafUntil.withLock { $0 = time } }
    func isDeaf(at now: Duration) -> Bool { deafUntil.withLock { now < $0 } }
}

extension UDPServerSocket {
    /// Reads datagrams until the socket closes, handing each new peer's link to
    /// `onPeer` (once) and every datagram to its peer's link.
    ///
    /// `receiveLimit`: the device's receive buffer, in bytes. A longer datagram reaches the
    /// device cut to it, as a `recvfrom` into a buffer that size cuts it (Zephyr's SMP UDP
    /// transport reads `CONFIG_MCUMGR_TRANSPORT_UDP_MTU`, 1500 bytes, and answers what is left
    /// of a longer request "corrupt"); nil passes every datagram whole.
    public func servePeers(
        clock: any BleotaClock, receiveLimit: Int? = nil, onPeer: @escaping @Sendable (UDPPeerLink) -> Void
    ) async throws {
        var links: [Peer: UDPPeerLink] = [:]
        defer { for link in links.values { link.inbox.close() } }
        while let (bytes, peer) = try await receive() {
            let link: UDPPeerLink
            if let known = links[peer] {
                link = known
            } else {
                link = UDPPeerLink(server: self, peer: peer, description: "udp peer")
                links[peer] = link
                onPeer(link)
            }
            guard !link.isDeaf(at: clock.now) else { continue }
            if let receiveLimit, bytes.count > receiveLimit {
                link.inbox.put(Array(bytes.prefix(receiveLimit)))
            } else {
                link.inbox.put(bytes)
            }
        }
    }
}
