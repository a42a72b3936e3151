import Synchronization

/// Two in-memory ``Link`` ends wired to each other, with no link model.
///
/// For measuring the engine alone (`Benchmarks/`), for protocol tests that do
/// not care about air time, and as the simplest example of a transport. An
/// optional filter can drop or alter packets host → device, deterministically.
public final class LoopbackLink: Link {
    public let parameters: LinkParameters
    private let inbox = Mailbox<[UInt8]>()
    /// The other end, and whether this end is closed: one lock per packet sent.
    private let wiring: Mutex<(peer: LoopbackLink?, closed: Bool)> = Mutex((nil, false))
    private let filter: (@Sendable ([UInt8]) -> [UInt8]?)?

    private init(parameters: LinkParameters, filter: (@Sendable ([UInt8]) -> [UInt8]?)?) {
        self.parameters = parameters
        self.filter = filter
    }

    /// A connected pair. `filter` runs on every packet the first end sends:
    /// return nil to drop it, or the (possibly changed) bytes to deliver.
    public static func pair(
        maximumPayload: Int = 244, description: String = "loopback",
        filter: (@Sendable ([UInt8]) -> [UInt8]?)? = nil
    ) -> (host: LoopbackLink, device: LoopbackLink) {
        let parameters = LinkParameters(maximumPayload: maximumPayload, description: description)
        let host = LoopbackLink(parameters: parameters, filter: filter)
        let device = LoopbackLink(parameters: parameters, filter: nil)
        host.wiring.withLock { $0.peer = device }
        device.wiring.withLock { $0.peer = host }
        return (host, device)
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard packet.count <= parameters.maximumPayload else {
            throw .payloadTooLarge(size: packet.count, maximum: parameters.maximumPayload)
        }
        guard let peer = wiring.withLock({ $0.closed ? nil : $0.peer }) else {
            throw .disconnected("loopback closed")
        }
        if let filter {
            guard let altered = filter(packet) else { return }
            peer.inbox.put(altered)
        } else {
            peer.inbox.put(packet)
        }
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        do {
            guard let packet = try await inbox.take() else { throw LinkError.disconnected("loopback closed") }
            return packet
        } catch let error as LinkError {
            throw error
        } catch {
            throw .cancelled
        }
    }

    public func close() async {
        let peer = wiring.withLock { wiring -> LoopbackLink? in
            wiring.closed = true
            return wiring.peer
        }
        inbox.close()
        if let peer {
            peer.wiring.withLock { $0.closed = true }
            peer.inbox.close()
        }
    }
}
