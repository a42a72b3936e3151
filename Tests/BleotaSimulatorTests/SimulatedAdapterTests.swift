import BleotaLink
import Testing

@testable import BleotaSimulator

/// Where a shared radio puts each new connection's anchor.
@Suite struct SimulatedAdapterTests {
    final class Key {}

    @Test func aNewConnectionGoesInTheMiddleOfTheWidestGap() {
        let adapter = SimulatedAdapter(name: "sim0")
        let (a, b) = (Key(), Key())
        #expect(adapter.placeAnchor(for: ObjectIdentifier(a), after: .zero, interval: .milliseconds(15)) == .zero)
        let second = adapter.placeAnchor(for: ObjectIdentifier(b), after: .zero, interval: .milliseconds(15))
        #expect(second == .microseconds(7_500))
    }

    /// A 7.5 ms connection has two anchors in a 15 ms interval: the 15 ms connection goes between
    /// them (3.75 ms from each), not on the second one.
    @Test func aLongerIntervalAvoidsEveryAnchorOfAShorterOne() {
        let adapter = SimulatedAdapter(name: "sim0")
        let (short, long) = (Key(), Key())
        #expect(adapter.placeAnchor(for: ObjectIdentifier(short), after: .zero, interval: .microseconds(7_500)) == .zero)
        let anchor = adapter.placeAnchor(for: ObjectIdentifier(long), after: .zero, interval: .milliseconds(15))
        let phase = SimulatedAdapter.phase(of: anchor, in: .microseconds(7_500))
        #expect(phase == .microseconds(3_750), "anchor \(anchor) sits \(phase) after the short link's")
    }
}
