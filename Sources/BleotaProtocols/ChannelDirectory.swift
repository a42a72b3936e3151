import BleotaEngine
import BleotaLink

extension HostContext {
    /// The channels a ``/BleotaLink/ChannelLink`` offers now — what GATT
    /// discovery found on a real device, which tells an application from its
    /// bootloader. The query is asked again when no answer comes (a lossy link).
    func channels(on link: any Link, step: UpdateStep) async throws(TransferError) -> Set<UInt8> {
        for _ in 0..<max(1, timeouts.attempts) {
            do {
                try await link.send(message: .directoryQuery)
                let deadline = clock.now + timeouts.response
                while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
                    if case .directory(let channels) = packet { return Set(channels) }
                }
            } catch {
                throw TransferError(.linkLost, step: step, "\(connector.description) dropped the link during discovery: \(error)")
            }
        }
        throw TransferError(.timeout, step: step, "\(connector.description) did not list its characteristics")
    }
}
