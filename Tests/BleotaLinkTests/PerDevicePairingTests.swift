import Testing

@testable import BleotaLink

/// One adapter, one pairing agent, many devices: whichever connection's agent is the adapter's,
/// each device is answered its own passkey, and a bonded-only device is never paired anew.
@Suite struct PerDevicePairingTests {
    static let table: [String: PairingPolicy] = [
        "aa:bb:cc:dd:ee:01": PairingPolicy(passkey: 111_111),
        "AA:BB:CC:DD:EE:02": PairingPolicy(passkey: 222_222),
        "AA:BB:CC:DD:EE:03": PairingPolicy(pairsAnew: false),
    ]

    @Test func anyConnectionsAgentAnswersEveryDeviceByItsAddress() async throws {
        // The agent made for device 02's connection answers device 01 with 01's passkey.
        let agent = PerDevicePairing(device: "AA:BB:CC:DD:EE:02", policies: Self.table)
        #expect(try await agent.passkey(for: "AA:BB:CC:DD:EE:01") == 111_111)
        #expect(try await agent.passkey(for: "aa:bb:cc:dd:ee:02") == 222_222, "addresses are compared without case")
        await #expect(throws: PairingError.noBond) { try await agent.passkey(for: "AA:BB:CC:DD:EE:03") }
        await #expect(throws: PairingError.noBond) { try await agent.confirm(123_456, for: "AA:BB:CC:DD:EE:03") }
        // A device the table does not name gets the fallback: Just Works, so a passkey is asked of nobody.
        await #expect(throws: PairingError.needsUserInput(.passkeyEntry)) { try await agent.passkey(for: "AA:BB:CC:DD:EE:09") }
    }

    @Test func theConnectionsOwnDeviceSaysWhetherItPairsFirstAndWhetherAnew() {
        #expect(PerDevicePairing(device: "AA:BB:CC:DD:EE:01", policies: Self.table).expectsPairing)
        let bonded = PerDevicePairing(device: "aa:bb:cc:dd:ee:03", policies: Self.table)
        #expect(!bonded.pairsAnew && !bonded.expectsPairing)
        #expect(PerDevicePairing(device: "AA:BB:CC:DD:EE:09", policies: Self.table).pairsAnew)
    }

    @Test func theAdapterAnnouncesWhatTheWholeTableNeeds() {
        // The same for every connection's agent, so the adapter's IO capability does not flip between them.
        #expect(PerDevicePairing(device: "AA:BB:CC:DD:EE:01", policies: Self.table).ioCapability == .keyboardOnly)
        #expect(PerDevicePairing(device: "AA:BB:CC:DD:EE:03", policies: Self.table).ioCapability == .keyboardOnly)
        #expect(PerDevicePairing(device: "X", policies: ["X": PairingPolicy(pairsAnew: false)]).ioCapability == .noInputNoOutput)
        let both = ["A": PairingPolicy(passkey: 1), "B": PairingPolicy(acceptsComparison: true)]
        #expect(PerDevicePairing(device: "A", policies: both).ioCapability == .keyboardDisplay)
    }
}
