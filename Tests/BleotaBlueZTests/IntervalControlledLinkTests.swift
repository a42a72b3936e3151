import BleotaLink
import Synchronization
import Testing

@testable import BleotaBlueZ

/// Closing a link to a real device ends its LE connection at once, and never another one.
@Suite struct IntervalControlledLinkTests {
    /// The commands a link wrote, in order.
    final class Written: Sendable {
        let commands = Mutex<[HCICommand]>([])
        var all: [HCICommand] { commands.withLock { $0 } }
        func write(_ command: HCICommand) { commands.withLock { $0.append(command) } }
    }

    func link(up: (@Sendable () async -> Bool)?, written: Written) -> IntervalControlledLink {
        let (inner, _) = LoopbackLink.pair()
        return IntervalControlledLink(
            inner, handle: 0x002A, adapter: "hci0", openingInterval: nil, connectionIsUp: up, writeCommand: { written.write($0) })
    }

    @Test func disconnectIsTheLinkControlCommandWithTheHandleAndRemoteUserTerminated() {
        // Core v5.4, Vol 4, Part E, §7.1.6: OGF 0x01, OCF 0x0006 (opcode 0x0406), handle, reason 0x13.
        #expect(HCICommand.disconnect(handle: 0x0EFF).encode() == [0x01, 0x06, 0x04, 0x03, 0xFF, 0x0E, 0x13])
    }

    @Test func closingALinkWhoseConnectionIsUpEndsItOnce() async {
        let written = Written()
        let link = link(up: { true }, written: written)
        await link.close()
        await link.close()
        #expect(written.all == [.disconnect(handle: 0x002A)], "a second close must not end a connection that took the handle since")
    }

    @Test func closingALinkWhoseConnectionAlreadyDroppedWritesNothing() async {
        let written = Written()
        await link(up: { false }, written: written).close()
        #expect(written.all.isEmpty)
    }

    @Test func aLinkThatMayShareItsConnectionLeavesItUp() async {
        // A credit-based channel opened beside a GATT link: closing it must not end the GATT link's connection.
        let written = Written()
        await link(up: nil, written: written).close()
        #expect(written.all.isEmpty)
    }
}
