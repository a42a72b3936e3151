import BleotaLink
import Synchronization

/// A served device's power supply that fails for good (`sim serve --power-loss`): once `limit`
/// bytes have reached the device, over however many connections, it goes dark and answers
/// nothing again, as a board whose battery died mid-update. What a fleet meets as a device that
/// fails late: its update began, and nobody can say what it runs.
public final class PowerSupply: Sendable {
    public let limit: Int
    private let state = Mutex<(received: Int, cut: Bool)>((0, false))
    /// Called once, when the power goes.
    private let onCut: @Sendable () -> Void

    public init(cuttingAfter limit: Int, onCut: @escaping @Sendable () -> Void) {
        self.limit = limit
        self.onCut = onCut
    }

    public var isCut: Bool { state.withLock { $0.cut } }

    /// Counts `bytes` reaching the device; true when they are the ones that cut the power.
    func receive(_ bytes: Int) -> Bool {
        let fired = state.withLock { state -> Bool in
            guard !state.cut else { return false }
            state.received += bytes
            if state.received >= limit { state.cut = true }
            return state.cut
        }
        if fired { onCut() }
        return fired
    }
}

/// The device's side of one client's link, through its ``PowerSupply``: once the power is cut,
/// nothing more is received or sent, and the link closes.
public final class PowerCutLink: Link {
    let inner: any Link
    let supply: PowerSupply

    public init(inner: any Link, supply: PowerSupply) {
        self.inner = inner
        self.supply = supply
    }

    public var parameters: LinkParameters { inner.parameters }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard !supply.isCut else { throw .disconnected("the device lost power") }
        try await inner.send(packet)
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        guard !supply.isCut else { throw .disconnected("the device lost power") }
        let packet = try await inner.receive()
        if supply.receive(packet.count) || supply.isCut {
            await inner.close()
            throw .disconnected("the device lost power")
        }
        return packet
    }

    public func close() async { await inner.close() }

    public func deviceBooted() { inner.deviceBooted() }
}
