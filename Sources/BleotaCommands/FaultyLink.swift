import ArgumentParser
import BleotaATT
import BleotaBlueZ
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation
import Logging
import Synchronization

/// A one-shot fault for `bleota serve`: drop the link once after so many bytes.
final class FaultBudget: Sendable {
    private let remaining: Mutex<Int?>
    init(disconnectAt: Int?) { remaining = Mutex(disconnectAt) }

    /// Counts `bytes`; true exactly once, when the budget runs out.
    func spend(_ bytes: Int) -> Bool {
        remaining.withLock { value in
            guard let left = value else { return false }
            if left - bytes <= 0 {
                value = nil
                return true
            }
            value = left - bytes
            return false
        }
    }
}

/// Wraps a device-side link and drops it when the fault budget runs out.
final class FaultyLink: Link {
    let inner: any Link
    let fault: FaultBudget
    init(_ inner: any Link, fault: FaultBudget) {
        self.inner = inner
        self.fault = fault
    }
    var parameters: LinkParameters { inner.parameters }
    func send(_ packet: [UInt8]) async throws(LinkError) { try await inner.send(packet) }
    func receive() async throws(LinkError) -> [UInt8] {
        let packet = try await inner.receive()
        if fault.spend(packet.count) {
            await inner.close()
            throw .disconnected("simulated disconnect (--disconnect-at)")
        }
        return packet
    }
    func close() async { await inner.close() }
    func deviceBooted() { inner.deviceBooted() }
}
