import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import BleotaTestSupport
import Testing

@testable import BleotaFleet

/// Simulated devices sharing simulated adapters: every device ends with the
/// exact image or a named failure and its old image, a faulted device does not
/// hold up the others, and an adapter's connections together never use more
/// air time than the adapter has.
@Suite struct SimulatedFleetTests {
    static func firmware(_ count: Int) -> [UInt8] {
        var random = SeededRandom(seed: 16)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }
    static let firmware = firmware(30_000)

    struct Run: Sendable {
        var results: [DeviceResult]
        var summary: FleetSummary
        var running: [String: [UInt8]]
        var airTime: [String: Duration]
        var skipped: [String: Int]
        /// Per device, the connection updates its links went through.
        var connectionUpdates: [String: Int]
    }

    /// `withTurns`: each update gets its transfer turn (as `bleota fleet flash` gives it), so at most
    /// two transfer at once per adapter and the last one alone is shortened.
    static func run(
        _ addresses: [String], adapters: [String], connections: Int, firmware: [UInt8] = Self.firmware,
        withTurns: Bool = false
    ) async throws -> Run {
        let devices = addresses.map { FleetDevice(address: $0) }
        let image = PreparedImage(bytes: firmware, version: "2.0.0", summary: "test")
        let native = NativeProtocol()
        return try await SimulationRuntime.run(maximumVirtualTime: .seconds(24 * 3600)) { runtime in
            let fleet = SimulatedFleet(runtime: runtime, adapterNames: adapters)
            var members: [String: SimulatedFleet.Member] = [:]
            for address in addresses {
                members[address] = try await fleet.add(try SimulatorAddress(parsing: address), protocol: native, description: address)
            }
            let known = members
            let options = FleetOptions(adapters: adapters, connectionsPerAdapter: connections, attempts: 3, backoff: .seconds(2))
            let runner = FleetRunner(devices: devices, options: options, clock: runtime.clock) { device, adapter, turn, onEvent in
                let member = known[device.address]!
                member.use(adapter: fleet.adapters[adapter])
                let host = native.makeHost(
                    HostContext(
                        protocolName: "native", connector: member.connector, clock: runtime.clock,
                        transferTurn: withTurns ? turn : nil, onEvent: onEvent))
                do throws(TransferError) { return .updated(try await host.flash(image, mode: .testAndConfirm)) } catch { return .failed(error) }
            }
            let (results, summary) = await runner.run()
            try? await runtime.clock.sleep(for: .seconds(2))
            var running: [String: [UInt8]] = [:]
            var updates: [String: Int] = [:]
            for (address, member) in known {
                running[address] = (member.half as? NativeDevice)?.storage.snapshot.activeImage ?? []
                updates[address] = member.world.statistics.connectionUpdates
                await member.world.shutDown()
            }
            return Run(
                results: results, summary: summary, running: running,
                airTime: fleet.adapters.mapValues(\.airTime), skipped: fleet.adapters.mapValues(\.skippedEvents),
                connectionUpdates: updates)
        }
    }

    @Test func everyDeviceEndsWithTheExactImageOrItsOldOneAndFaultsStayWithTheirDevice() async throws {
        var addresses = (1...10).map { "sim://2m-dle?seed=\($0)" }
        addresses.append("sim://2m-dle?seed=11&power-loss-at=12000")
        addresses.append("sim://2m-dle?seed=12&disconnect-at=9000")
        addresses.append("sim://slow-flash?seed=13")
        addresses.append("sim://2m-dle?seed=14&loss=0.03")
        let run = try await Self.run(addresses, adapters: ["sim0", "sim1", "sim2"], connections: 3)
        for result in run.results {
            let running = run.running[result.device] ?? []
            switch result.outcome {
            case .updated:
                let exact = running == Self.firmware
                #expect(exact, "\(result.device) reported updated but runs \(running.count) bytes")
            case .failed:
                let old = running != Self.firmware
                #expect(old, "\(result.device) failed (\(result.error ?? "")) yet runs the new image")
            case .skipped, .notStarted, .otherVersion:
                Issue.record("\(result.device): \(result.outcome)")
            }
        }
        #expect(run.summary.updated == addresses.count, "\(run.results.filter { $0.outcome != .updated }.map { "\($0.device): \($0.error ?? "")" })")
        print("fleet of \(addresses.count) on 3 adapters: \(run.summary.sentence)")
    }

    /// Three devices on one adapter take turns on its radio: the adapter's air time never exceeds
    /// the time that passed, and three links move no more than one link's capacity together.
    @Test func anAdaptersConnectionsShareItsAirTime() async throws {
        let addresses = (1...3).map { "sim://2m-dle?seed=\($0)" }
        let big = Self.firmware(300_000)
        let shared = try await Self.run(addresses, adapters: ["sim0"], connections: 3, firmware: big)
        let alone = try await Self.run(["sim://2m-dle?seed=1"], adapters: ["sim0"], connections: 1, firmware: big)
        #expect(shared.summary.updated == 3 && alone.summary.updated == 1)
        let air = shared.airTime["sim0"]!
        let elapsed = Duration.milliseconds(Int64(shared.summary.seconds * 1000))
        #expect(air <= elapsed, "the adapter used \(air) of air in \(elapsed)")
        // Three at once on one radio take well over the time of one alone (three on three radios would take about the same).
        #expect(
            shared.summary.seconds >= 1.5 * alone.summary.seconds,
            "three on one adapter: \(shared.summary.seconds) s, one alone: \(alone.summary.seconds) s")
        print("one adapter: 1 device \(alone.summary.seconds) s, 3 devices \(shared.summary.seconds) s, air \(air), skipped events \(shared.skipped["sim0"]!)")
    }
}

/// The last transfer on an adapter, which will have the radio to itself to the end, asks for 7.5 ms
/// events: on `2m-dle` a link carries at most 8 packets a 15 ms event where 10 fit, and 5 a 7.5 ms one.
@Suite struct AloneTransferFleetTests {
    @Test func theLastTransferOnAnAdapterIsShortened() async throws {
        let addresses = (1...3).map { "sim://2m-dle?seed=\($0)" }
        let image = SimulatedFleetTests.firmware(400_000)
        let run = try await SimulatedFleetTests.run(addresses, adapters: ["sim0"], connections: 3, firmware: image, withTurns: true)
        #expect(run.summary.updated == 3)
        for address in addresses { #expect(run.running[address] == image) }
        // The device that finished last transferred alone at the end: its link was updated (to 7.5 ms,
        // then back when its transfer ended, if the link was still open). Those that shared were not.
        let ordered = run.results.sorted { $0.seconds < $1.seconds }
        let last = try #require(ordered.last)
        #expect(run.connectionUpdates[last.device, default: 0] >= 1, "\(run.connectionUpdates)")
        #expect(run.connectionUpdates[ordered[0].device] == 0, "\(run.connectionUpdates)")
        print("alone at the end: \(run.connectionUpdates), \(run.summary.seconds) s")
    }
}

/// Links of different intervals on one adapter take turns: none is starved (a 15 ms link placed on
/// a 7.5 ms link's anchor had every event cut to nothing and its device never answered).
@Suite struct MixedIntervalFleetTests {
    @Test func devicesOnDifferentIntervalsShareOneAdapterWithoutAFailedTry() async throws {
        let addresses = ["sim://1m-dle-7.5ms?seed=1", "sim://2m-dle?seed=2"]
        let image = SimulatedFleetTests.firmware(200_000)
        let run = try await SimulatedFleetTests.run(addresses, adapters: ["sim0"], connections: 2, firmware: image)
        #expect(run.summary.updated == 2)
        #expect(run.results.allSatisfy { $0.attempts == 1 }, "\(run.results.map { "\($0.device): \($0.attempts) tries, \($0.error ?? "")" })")
        for address in addresses { #expect(run.running[address] == image) }
    }
}
