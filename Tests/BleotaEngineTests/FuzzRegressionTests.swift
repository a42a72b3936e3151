import Testing

@testable import BleotaEngine

/// What the fuzzers in Fuzz/ found (docs/testing.md, "Fuzzing"), at the engine's level.
@Suite struct EngineFuzzRegressionTests {
    /// An acknowledgement of packets not yet sent moved the cumulative point
    /// past the next unsent packet; the next request's answer (or a timeout)
    /// then walked the range base..<nextUnsent backwards and trapped
    /// (FuzzNativeDevice, through a file pull: the device sends with this engine).
    @Test func acknowledgingUnsentPacketsKeepsTheSenderConsistent() {
        var sender = SelectiveRepeatSender(packetCount: 100)
        for expected in 0..<6 { #expect(sender.nextPacket(window: 6) == expected) }
        let mark = sender.transmissionCount
        // The fuzzer's ACK: next expected 0x0E0F, far beyond the 6 packets sent.
        _ = sender.acknowledge(nextExpected: 0x0E0F, received: [])
        #expect(sender.isComplete)
        #expect(sender.markLost(sentUpTo: mark) == 0)
        #expect(sender.timeoutAllInFlight() == 0)
        #expect(sender.nextPacket(window: 6) == nil)

        var partly = SelectiveRepeatSender(packetCount: 100)
        for _ in 0..<6 { _ = partly.nextPacket(window: 6) }
        _ = partly.acknowledge(nextExpected: 50, received: [60])
        #expect(partly.markLost(sentUpTo: partly.transmissionCount) == 0)
        #expect(partly.nextPacket(window: 6) == 50)
        _ = partly.acknowledge(nextExpected: 100, received: [])
        #expect(partly.isComplete && partly.acknowledgedCount == 100 && partly.inFlight == 0)
    }
}
