import Synchronization

/// Two in-memory ``Link`` ends wired to each other, with no link model.
///
/// For measuring the engine alone (`Benchmarks/`), for protocol tests that do
/// not care about air time, and as the simplest example of a transport. An
/// optional filter can drop or alter packets host → device, deterministically.
public final class LoopbackLink: Link {
    public let parameters: LinkParameters
    private let inbox = Mailbox<[UInt8]>()
    private let peer: Mutex<LoopbackLink?> = Mutex(nil)
    private let filter: (@Sendable ([UInt8]) -> [UInt8]?)?
    private let closed = Mutex(false)

    private init(parameters: LinkParameters, filter: (@Sendable ([UInt8]) -> [UInt8]?)?) {
        self.parameters = parameters
        self.filter = filter
    }

    /// A connected pair. `filter` runs on every packet the first end sends:
    /// return nil to drop it, or the (possibly changed) bytes to deliver.
    public static func pair(maximumPayload: Int = 244, description: String = "loopback",
                            filter: (@Sendable ([UInt8]) -> [UInt8]?)? = nil) -> (host: LoopbackLink, device: LoopbackLink) {
        let parameters = LinkParameters(maximumPayload: maximumPayload, description: description)
        let host = LoopbackLink(parameters: parameters, filter: filter)
        let device = LoopbackLink(parameters: parameters, filter: nil)
        host.peer.withLock { $0 = device }
        device.peer.withLock { $0 = host }
        return (host, device)
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard packet.count <= parameters.maximumPayload else {
            throw .payloadTooLarge(size: packet.count, maximum: parameters.maximumPayload)
        }
        guard !closed.withLock({ $0 }), let peer = peer.withLock({ $0 }) else {
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
        closed.withLock { $0 = true }
        inbox.close()
        if let peer = peer.withLock({ $0 }) {
            peer.closed.withLock { $0 = true }
            peer.inbox.close()
        }
    }
}
