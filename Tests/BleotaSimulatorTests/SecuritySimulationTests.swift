import BleotaEngine
import BleotaLink
import Foundation
import Synchronization
import Testing

@testable import BleotaProtocols
@testable import BleotaSimulator

/// Devices that demand an encrypted or authenticated link: every protocol's
/// host pairs when the device refuses its subscription, nothing reaches the
/// device before the link has the level, and a failed pairing writes nothing.
@Suite struct SecuritySimulationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every protocol bleota ships (and the two described ones) with an image its device takes.
    static let protocolsAndImages: [(protocolName: String, image: String, description: String?)] = [
        ("native", "samples/firmware/blinky.bin", nil),
        ("smp", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", nil),
        ("nordic-dfu", "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip", nil),
        ("nordic-legacy", "Tests/BleotaProtocolsTests/Fixtures/nordic/adafruit-nrfutil-0.5.3.post16-app.zip", nil),
        ("espressif-ota", "samples/espressif/esp-app-sample.bin", nil),
        ("suota", "samples/suota/da1469x-app-sample-v3.img", nil),
        ("silabs-ota", "samples/silabs/efr32-app-sample.gbl", nil),
        ("ti-oad", "samples/ti-oad/cc26x2-app-sample_oad.bin", nil),
        ("telink-ota", "samples/telink/telink-app-sample.bin", "protocols/telink-ota.yaml"),
        ("stm32wb-ota", "samples/stm32wb/stm32wb-app-sample.bin", "protocols/stm32wb-ota.yaml"),
    ]

    static func updateProtocol(_ name: String, description: String?) throws -> any UpdateProtocol {
        if let description { return try DescribedProtocol(contentsOf: root.appendingPathComponent(description).path) }
        return try #require(ProtocolRegistry.builtIn.named(name))
    }

    /// Flashes `image` to the device `address` describes, with `pairing` answering.
    static func flash(
        _ name: String, image: String, description: String?, address: String,
        pairing: any PairingAgent
    ) async throws -> Simulation.Outcome<UpdateReport> {
        let chosen = try updateProtocol(name, description: description)
        let parsed = try SimulatorAddress(parsing: address + "&protocol=\(name)", registry: ProtocolRegistry.builtIn.registering(chosen))
        let prepared = try chosen.prepareImage(ImageRequest(path: root.appendingPathComponent(image).path))
        let mode = chosen.flashModes.first ?? .testAndConfirm
        return try await Simulation.run(parsed, protocol: chosen, description: address, pairing: pairing) { connector, clock in
            let context = HostContext(protocolName: name, connector: connector, clock: clock)
            return try await chosen.makeHost(context).flash(prepared, mode: mode)
        }
    }

    @Test(arguments: protocolsAndImages.map(\.protocolName))
    func everyProtocolPairsWithAPasskeyBeforeItWritesAndUpdates(_ name: String) async throws {
        let entry = try #require(Self.protocolsAndImages.first { $0.protocolName == name })
        let outcome = try await Self.flash(
            name, image: entry.image, description: entry.description,
            address: "sim://2m-dle?security=authenticated",
            pairing: PairingPolicy(passkey: 123_456))
        let report = outcome.value
        #expect(report.versionAfter != nil && report.versionAfter != report.versionBefore, "\(name): \(report.versionBefore ?? "-") → \(report.versionAfter ?? "-")")
        let security = try #require(outcome.security)
        #expect(security.level == .fips && security.method == .passkeyEntry && security.secureConnections == true)
        // One pairing; every later link (the bootloader, the application again) encrypted with its bond.
        #expect(outcome.pairing.pairings == 1)
        #expect(outcome.pairing.refusedForSecurity == 0, "\(name): \(outcome.pairing.refusedForSecurity) packets reached the device before the link was secure")
        // --passkey says the device pairs: the link is paired before the first write, the subscription included.
        #expect(outcome.pairing.refusedSubscriptions == 0, "\(name): the subscription was refused \(outcome.pairing.refusedSubscriptions) times")
    }

    @Test(arguments: protocolsAndImages.map(\.protocolName))
    func aWrongPasskeyFailsBeforeAnyByteReachesTheDevice(_ name: String) async throws {
        let entry = try #require(Self.protocolsAndImages.first { $0.protocolName == name })
        await #expect(throws: PairingError.failed(.confirmValueFailed, byDevice: true)) {
            _ = try await Self.flash(
                name, image: entry.image, description: entry.description,
                address: "sim://2m-dle?security=authenticated", pairing: PairingPolicy(passkey: 654_321))
        }
    }

    /// A world with one native device demanding `address`'s security, and `body` given its connector.
    static func withSecuredDevice<T: Sendable>(
        _ address: String, pairing: any PairingAgent,
        _ body: @escaping @Sendable (SimulatedWorld, SimulatedConnector) async throws -> T
    ) async throws -> T {
        let parsed = try SimulatorAddress(parsing: address)
        let half = try NativeProtocol().makeDevice(Simulation.configuration(parsed, for: NativeProtocol()))
        return try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, seed: parsed.seed)
            world.setPairingAgent(pairing)
            await world.add(
                SimulatedDevice(address: Simulation.deviceAddress, half: half, model: parsed.model, security: parsed.deviceSecurity, whenQueueFull: parsed.whenQueueFull))
            let connector = SimulatedConnector(world: world, address: Simulation.deviceAddress, description: address)
            let value = try await body(world, connector)
            await world.shutDown()
            return value
        }
    }

    @Test func packetsOverALinkBelowTheDevicesLevelAreDroppedAndCounted() async throws {
        let (refused, answered) = try await Self.withSecuredDevice("sim://2m-dle?security=encrypted", pairing: PairingPolicy.justWorks) { world, _ in
            // A host that skips the subscription (and so never learns it must pair) writes three HELLOs.
            let link = try await world.connect(to: Simulation.deviceAddress, timeout: .seconds(1))
            for _ in 0..<3 { try await link.send(NativeMessage.hello(.init()).encode()) }
            let answer = try await link.receive(within: .seconds(1), clock: world.clock)
            await link.close()
            return (world.pairingStatistics.refusedForSecurity, answer != nil)
        }
        #expect(refused == 3 && !answered)
    }

    @Test func aFailedPairingLeavesTheDeviceUntouchedAndIsNotRetried() async throws {
        let (error, packets, pairings) = try await Self.withSecuredDevice("sim://2m-dle?security=authenticated", pairing: PairingPolicy(passkey: 111_111)) { world, connector in
            var failure: LinkError?
            do throws(LinkError) { _ = try await connector.connect(for: .initial, timeout: .seconds(10)) } catch { failure = error }
            // A second connect fails at once with the same error: no second pairing.
            do throws(LinkError) { _ = try await connector.connect(for: .initial, timeout: .seconds(10)) } catch { #expect(error == failure) }
            return (failure, world.statistics.packetsToDevice, world.pairingStatistics.pairings)
        }
        #expect(error == LinkError.security(.failed(.confirmValueFailed, byDevice: true)))
        #expect(packets == 0 && pairings == 1)
    }

    /// Nordic's bonded buttonless DFU (NRF_DFU_BLE_REQUIRES_BONDS): the bootloader keeps the application's
    /// address and its bond, so the link to it encrypts with the key the application's pairing made.
    @Test func aBondedNordicButtonlessJumpKeepsTheAddressAndTheBond() async throws {
        let entry = try #require(Self.protocolsAndImages.first { $0.protocolName == "nordic-dfu" })
        let outcome = try await Self.flash(
            "nordic-dfu", image: entry.image, description: nil,
            address: "sim://2m-dle?security=encrypted&nordic-buttonless=bonded",
            pairing: PairingPolicy.justWorks)
        #expect(outcome.value.versionAfter != nil)
        #expect(outcome.pairing.pairings == 1, "the bootloader must not pair again")
        #expect(outcome.pairing.encryptionsWithBond >= 1 && outcome.pairing.refusedForSecurity == 0)
    }

    /// A device list's `bonded`: a device with no bond is refused before anything is sent, never
    /// paired anew; once the host holds its bond, the link encrypts with it and pairs nothing.
    @Test func aBondedOnlyAgentUsesTheBondAndNeverPairsAnew() async throws {
        let (refusal, packets, pairingsBefore, reached, pairingsAfter, withBond) = try await Self.withSecuredDevice(
            "sim://2m-dle?security=authenticated", pairing: PairingPolicy(pairsAnew: false)
        ) { world, connector in
            var refusal: LinkError?
            do throws(LinkError) { _ = try await connector.connect(for: .initial, timeout: .seconds(10)) } catch { refusal = error }
            let packets = world.statistics.packetsToDevice
            let before = world.pairingStatistics.pairings
            // The device pairs once by its passkey (bleota bond pair, say); afterwards only the bond is used.
            // (A connector keeps its pairing failure: each later session has its own.)
            world.setPairingAgent(PairingPolicy(passkey: 123_456))
            let paired = try await SimulatedConnector(world: world, address: Simulation.deviceAddress, description: "pairing").connect(for: .initial, timeout: .seconds(10))
            await paired.close()
            world.setPairingAgent(PairingPolicy(pairsAnew: false))
            let bonded = SimulatedConnector(world: world, address: Simulation.deviceAddress, description: "bonded")
            let link = try await bonded.connect(for: .initial, timeout: .seconds(10))
            await link.close()
            return (refusal, packets, before, bonded.security.latest, world.pairingStatistics.pairings, world.pairingStatistics.encryptionsWithBond)
        }
        #expect(refusal == LinkError.security(.noBond))
        #expect(packets == 0 && pairingsBefore == 0, "nothing reached the device, and nothing paired")
        #expect(pairingsAfter == 1 && withBond >= 1, "the one pairing was the passkey's; the bonded-only link used the bond")
        #expect(reached?.method == .storedKey)
    }

    @Test func justWorksGivesAnEncryptedLinkAndTheDevicesBondIsUsedOnReconnects() async throws {
        let outcome = try await Self.flash(
            "native", image: "samples/firmware/blinky.bin", description: nil,
            address: "sim://2m-dle?security=encrypted", pairing: PairingPolicy.justWorks)
        let security = try #require(outcome.security)
        #expect(security.level == .medium && security.method == .justWorks)
        #expect(outcome.pairing.pairings == 1 && outcome.pairing.encryptionsWithBond >= 2)
        #expect(outcome.pairing.refusedForSecurity == 0)
    }

    @Test func numericComparisonIsAskedAndARefusalNamesTheNumber() async throws {
        let accepted = try await Self.flash(
            "smp", image: "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", description: nil,
            address: "sim://2m-dle?security=authenticated&device-io=yesno",
            pairing: PairingPolicy(acceptsComparison: true))
        #expect(accepted.security?.method == .numericComparison && accepted.security?.level == .fips)
        let prompt = RecordingPrompt(answer: false)
        do {
            _ = try await Self.flash(
                "smp", image: "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", description: nil,
                address: "sim://2m-dle?security=authenticated&device-io=yesno&seed=3",
                pairing: PairingPolicy(prompt: prompt))
            Issue.record("a rejected comparison must fail the pairing")
        } catch let error as PairingError {
            guard case .comparisonRejected(let number) = error else { throw error }
            #expect(prompt.questions == ["does C0:FF:EE:00:00:01 show \(PairingError.sixDigits(number))? [y/N] "])
            #expect(error.description.contains("--accept-pairing"))
        }
    }

    @Test func withNothingToAnswerAnAuthenticatedDeviceSaysWhatToGive() async throws {
        await #expect(throws: PairingError.needsUserInput(.passkeyEntry)) {
            _ = try await Self.flash(
                "native", image: "samples/firmware/blinky.bin", description: nil,
                address: "sim://2m-dle?security=authenticated", pairing: PairingPolicy.justWorks)
        }
        #expect(PairingError.needsUserInput(.passkeyEntry).description.contains("--passkey"))
    }

    @Test func aLegacyOnlyDeviceReachesHighAndTheReportSaysItWasLegacy() async throws {
        let outcome = try await Self.flash(
            "native", image: "samples/firmware/blinky.bin", description: nil,
            address: "sim://2m-dle?security=authenticated&legacy-pairing=1",
            pairing: PairingPolicy(passkey: 123_456))
        let security = try #require(outcome.security)
        #expect(security.level == .high && security.secureConnections == false)
        #expect(security.description.contains("LE legacy pairing"))
    }

    @Test func aDeviceWithAKeyboardIsShownAPasskeyToType() async throws {
        let prompt = RecordingPrompt(answer: true)
        let outcome = try await Self.flash(
            "native", image: "samples/firmware/blinky.bin", description: nil,
            address: "sim://2m-dle?security=authenticated&device-io=keyboard",
            pairing: PairingPolicy(prompt: prompt))
        #expect(outcome.security?.method == .passkeyEntry)
        #expect(prompt.shown.count == 1 && prompt.shown[0].hasPrefix("type ") && prompt.shown[0].hasSuffix(" on C0:FF:EE:00:00:01"))
    }

    /// With no option that says the device pairs, a device that demands nothing is not paired.
    @Test func aDeviceThatDemandsNothingCostsNothing() async throws {
        for pairing in [PairingPolicy.justWorks, PairingPolicy(prompt: RecordingPrompt(answer: true))] {
            let open = try await Self.flash(
                "native", image: "samples/firmware/blinky.bin", description: nil,
                address: "sim://2m-dle?seed=1", pairing: pairing)
            #expect(open.security == nil && open.pairing == PairingStatistics())
        }
    }

    /// A given passkey says the device pairs: bleota pairs before writing even where the device
    /// demands nothing (it cannot tell), and a wrong one fails as anywhere else.
    @Test func aGivenPasskeyPairsADeviceThatDemandsNothing() async throws {
        let paired = try await Self.flash(
            "native", image: "samples/firmware/blinky.bin", description: nil,
            address: "sim://2m-dle?seed=1", pairing: PairingPolicy(passkey: 123_456))
        #expect(paired.pairing.pairings == 1 && paired.pairing.refusedForSecurity == 0)
        await #expect(throws: PairingError.failed(.confirmValueFailed, byDevice: true)) {
            _ = try await Self.flash(
                "native", image: "samples/firmware/blinky.bin", description: nil,
                address: "sim://2m-dle?seed=1", pairing: PairingPolicy(passkey: 1))
        }
    }

    @Test func addressKeysAreCheckedWithWhatIsValid() {
        #expect(throws: SimulatorAddressError("sim:// key 'security' is none, encrypted, authenticated or secure-connections, got 'max'")) {
            try SimulatorAddress(parsing: "sim://2m-dle?security=max")
        }
        #expect(throws: SimulatorAddressError("sim:// key 'device-passkey' is six digits (000000…999999), got '1234567'")) {
            try SimulatorAddress(parsing: "sim://2m-dle?device-passkey=1234567")
        }
        #expect(throws: SimulatorAddressError("sim:// key 'device-io' is display, yesno, keyboard, keyboard-display or none, got 'touch'")) {
            try SimulatorAddress(parsing: "sim://2m-dle?device-io=touch")
        }
    }
}

/// A terminal stand-in: records what it was asked and shown, answers as told.
final class RecordingPrompt: PairingPrompt {
    let answer: Bool
    private let asked = Mutex<(questions: [String], shown: [String])>(([], []))
    var questions: [String] { asked.withLock { $0.questions } }
    var shown: [String] { asked.withLock { $0.shown } }
    init(answer: Bool) { self.answer = answer }
    func readPasskey(_ question: String) async -> UInt32? {
        asked.withLock { $0.questions.append(question) }
        return nil
    }
    func confirm(_ question: String) async -> Bool {
        asked.withLock { $0.questions.append(question) }
        return answer
    }
    func show(_ line: String) async { asked.withLock { $0.shown.append(line) } }
}
