import BleotaATT
import BleotaLink
import Testing

@testable import BleotaEngine

/// A protocol that is only an identity: enough to test resolution.
struct FakeProtocol: UpdateProtocol {
    var identity: ProtocolIdentity
    var capabilities: ProtocolCapabilities
    var owns: [UInt8] = []
    var tuningKnobs: [TuningKnob: String] { [:] }

    init(_ name: String, service: String, transports: Set<TransportKind>, capabilities: ProtocolCapabilities, owns: [UInt8] = []) {
        identity = ProtocolIdentity(
            name: name, displayName: name.uppercased(), summary: name,
            gattServices: [GATTPacketService(service: BluetoothUUID(service)!, write: .bit16(1), notify: .bit16(2), name: name)],
            transports: transports, imageFormats: [])
        self.capabilities = capabilities
        self.owns = owns
    }

    func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        owns.isEmpty ? .accepts : (probe.head.starts(with: owns) ? .owns : .refuses)
    }
    func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage { PreparedImage(bytes: [], version: "", summary: "") }
    func makeHost(_ context: HostContext) -> any ProtocolHost { fatalError("not used") }
    func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf { fatalError("not used") }
}

@Suite struct ProtocolRegistryTests {
    static let plain = FakeProtocol("plain", service: "1111", transports: [.ble, .simulator], capabilities: [.flash, .push, .testTransfer])
    static let managed = FakeProtocol(
        "managed", service: "2222", transports: [.ble, .simulator, .udp, .serial],
        capabilities: [.flash, .push, .echo], owns: [0x3D, 0xB8])
    static let registry = ProtocolRegistry([plain, managed])

    func resolve(_ request: ProtocolRequest) throws(ProtocolResolutionError) -> String { try Self.registry.resolve(request).name }

    @Test func theExplicitProtocolWinsWhenItFits() throws {
        #expect(try resolve(ProtocolRequest(explicit: "managed", transport: .ble, device: "d", needs: .flash)) == "managed")
        #expect(
            throws: ProtocolResolutionError(
                "--protocol 'nope' is not a protocol bleota knows: use one of plain, managed, or a protocol described in YAML with --protocol-file FILE", usage: true)
        ) {
            try resolve(ProtocolRequest(explicit: "nope", transport: .ble, device: "d", needs: .flash))
        }
        #expect(throws: ProtocolResolutionError("PLAIN does not run over udp (udp://x): use --protocol managed (or leave it out)", usage: true)) {
            try resolve(ProtocolRequest(explicit: "plain", transport: .udp, device: "udp://x", needs: .flash))
        }
    }

    /// A misspelt name gets the nearest known one; a far one gets none (issue 48, item 17).
    @Test func aMisspeltProtocolIsAnsweredWithTheNearestName() {
        #expect(
            throws: ProtocolResolutionError(
                "--protocol 'manged' is not a protocol bleota knows (did you mean 'managed'?): use one of plain, managed, or a protocol described in YAML with --protocol-file FILE",
                usage: true)
        ) {
            try resolve(ProtocolRequest(explicit: "manged", transport: .ble, device: "d", needs: .flash))
        }
        #expect(NameSuggestion.closest(to: "smpp", among: ["native", "smp", "suota"]) == "smp")
        #expect(NameSuggestion.closest(to: "flsh", among: ["flash", "push", "pull"]) == "flash")
        #expect(NameSuggestion.closest(to: "nordic-legcay", among: ["nordic-dfu", "nordic-legacy"]) == "nordic-legacy")
        #expect(NameSuggestion.closest(to: "xyz", among: ["smp", "suota"]) == nil)
        #expect(NameSuggestion.closest(to: "telink-ota", among: ["native", "smp", "ti-oad", "silabs-ota"]) == nil)
    }

    /// `sim serve` and campaigns: the named protocol, or the default over the transports served.
    @Test func aCommandWithoutADeviceGetsTheNamedProtocolOrTheTransportsDefault() throws {
        #expect(try Self.registry.named("plain", orDefaultOver: [.udp]).name == "plain", "a name is taken as it is")
        #expect(try Self.registry.named(nil, orDefaultOver: [.udp, .serial]).name == "managed")
        #expect(try Self.registry.named(nil, orDefaultOver: [.simulator]).name == "plain")
        #expect(
            throws: ProtocolResolutionError(
                "--protocol 'nope' is not a protocol bleota knows: use one of plain, managed, or a protocol described in YAML with --protocol-file FILE", usage: true)
        ) {
            try Self.registry.named("nope", orDefaultOver: [.udp])
        }
        #expect(throws: ProtocolResolutionError("no registered protocol runs over udp or serial: name one with --protocol (plain)", usage: true)) {
            try ProtocolRegistry([Self.plain]).named(nil, orDefaultOver: [.udp, .serial])
        }
    }

    @Test func aSimulatedDeviceSpeaksWhatItsAddressSaysAndIsToldWhatWouldWork() throws {
        #expect(try resolve(ProtocolRequest(transport: .simulator, device: "sim://a", deviceProtocol: "managed", needs: .echo)) == "managed")
        #expect(throws: ProtocolResolutionError("sim://a speaks PLAIN, which cannot echo: add protocol=managed to the sim:// address for a device that can", usage: true)) {
            try resolve(ProtocolRequest(transport: .simulator, device: "sim://a", deviceProtocol: "plain", needs: .echo))
        }
    }

    @Test func theTransportAndTheCapabilityNarrowTheChoice() throws {
        #expect(try resolve(ProtocolRequest(transport: .udp, device: "udp://x", needs: .flash)) == "managed")
        #expect(throws: ProtocolResolutionError("udp://x speaks MANAGED, which cannot tune", usage: true)) {
            try resolve(ProtocolRequest(transport: .udp, device: "udp://x", needs: .testTransfer))
        }
    }

    @Test func whatTheDeviceOffersAndTheImageDecideOnBLE() throws {
        let both = [BluetoothUUID("1111")!, BluetoothUUID("2222")!]
        let owned = ImageProbe(path: "a.bin", head: [0x3D, 0xB8, 0xF3, 0x96])
        let plainImage = ImageProbe(path: "b.bin", head: [0, 1, 2])
        #expect(try resolve(ProtocolRequest(transport: .ble, device: "ble://d", image: owned, offeredServices: both, needs: .flash)) == "managed")
        #expect(try resolve(ProtocolRequest(transport: .ble, device: "ble://d", image: plainImage, offeredServices: both, needs: .flash)) == "plain")
        #expect(try resolve(ProtocolRequest(transport: .ble, device: "ble://d", image: owned, offeredServices: [BluetoothUUID("1111")!], needs: .flash)) == "plain")
        #expect(throws: ProtocolResolutionError.self) {
            try resolve(ProtocolRequest(transport: .ble, device: "ble://d", offeredServices: [BluetoothUUID("3333")!], needs: .flash))
        }
        #expect(try resolve(ProtocolRequest(transport: .ble, device: "ble://d", offeredServices: both, needs: .echo)) == "managed")
    }

    @Test func registeringReplacesByName() {
        let replaced = Self.registry.registering(FakeProtocol("plain", service: "9999", transports: [.serial], capabilities: [.flash]))
        #expect(replaced.names == ["plain", "managed"])
        #expect(replaced.named("plain")?.identity.transports == [.serial])
        #expect(ProtocolCapabilities([.flash, .push, .testTransfer]).summary == "flash, push files and tune")
    }
}
