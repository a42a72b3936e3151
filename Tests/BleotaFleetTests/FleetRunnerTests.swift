import BleotaEngine
import BleotaLink
import Synchronization
import Testing

@testable import BleotaFleet

/// The runner's rules on virtual time: connections per adapter, retries with a
/// doubling back-off, no retry of a refusal, a device already current left
/// alone, Ctrl-C leaving unstarted devices unstarted, and the summary.
@Suite struct FleetRunnerTests {
    static func report(_ device: FleetDevice) -> UpdateReport {
        var report = UpdateReport(
            operation: "flash", device: device.address, bytes: 1000, streamBytes: 1000, compressed: false, packetSize: 244,
            transferSeconds: 1, totalSeconds: 1, statistics: TransferStatistics(), stepSeconds: [:], tuning: TransferTuning())
        report.versionAfter = "2"
        return report
    }

    /// Records how many updates run at once per adapter, and when each try starts.
    final class Recorder: Sendable {
        struct State {
            var running: [String: Int] = [:]
            var most: [String: Int] = [:]
            var starts: [String: [Duration]] = [:]
        }
        let state = Mutex(State())
        func begin(_ adapter: String, _ device: String, at time: Duration) {
            state.withLock { state in
                state.running[adapter, default: 0] += 1
                state.most[adapter] = max(state.most[adapter] ?? 0, state.running[adapter]!)
                state.starts[device, default: []].append(time)
            }
        }
        func end(_ adapter: String) { state.withLock { $0.running[adapter, default: 0] -= 1 } }
    }

    @Test func neverMoreThanTheLimitPerAdapterAndEveryDeviceEnds() async throws {
        let devices = (0..<20).map { FleetDevice(address: "sim://d\($0)") }
        let recorder = Recorder()
        let (results, summary) = try await SimulationRuntime.run { runtime in
            let runner = FleetRunner(devices: devices, options: FleetOptions(adapters: ["a", "b"], connectionsPerAdapter: 3), clock: runtime.clock) { device, adapter, _, _ in
                recorder.begin(adapter, device.address, at: runtime.clock.now)
                // Devices take different times: 10 s, 11 s, … so slots free up out of order.
                try? await runtime.clock.sleep(for: .seconds(10 + Int64(device.address.dropFirst(7))!))
                recorder.end(adapter)
                return .updated(Self.report(device))
            }
            return await runner.run()
        }
        #expect(recorder.state.withLock { $0.most } == ["a": 3, "b": 3])
        #expect(results.map(\.device) == devices.map(\.address), "one result per device, in the list's order")
        #expect(results.allSatisfy { $0.outcome == .updated && $0.attempts == 1 && $0.bytes == 1000 })
        #expect(summary.allSucceeded && summary.updated == 20)
        // 20 devices, 6 at a time, 10–29 s each: well under running them one by one (390 s).
        #expect(summary.seconds < 120, "\(summary.seconds) s")
    }

    /// Transfers are limited apart from connections, and a try that fails inside its transfer (never
    /// leaving the step) does not keep its place: the runner gives it back when the try ends.
    @Test func transfersAreLimitedApartFromConnectionsAndAFailedTransferGivesItsPlaceBack() async throws {
        let devices = (0..<6).map { FleetDevice(address: "sim://d\($0)") }
        let transferring = Recorder()
        let (results, summary) = try await SimulationRuntime.run { runtime in
            let options = FleetOptions(adapters: ["a"], connectionsPerAdapter: 4, transfersPerAdapter: 2, attempts: 1)
            let runner = FleetRunner(devices: devices, options: options, clock: runtime.clock) { device, adapter, turn, _ in
                guard let turn else { return .failed(TransferError(.badInput, step: .load, "no transfer turn given")) }
                try? await runtime.clock.sleep(for: .seconds(1))
                await turn.wait(clock: runtime.clock)
                transferring.begin(adapter, device.address, at: runtime.clock.now)
                try? await runtime.clock.sleep(for: .seconds(10))
                transferring.end(adapter)
                // The odd devices fail in their transfer and leave without releasing.
                if Int(device.address.dropFirst(7))! % 2 == 1 { return .failed(TransferError(.deviceRefused, step: .transfer, "refused")) }
                turn.release()
                return .updated(Self.report(device))
            }
            return await runner.run()
        }
        #expect(transferring.state.withLock { $0.most } == ["a": 2])
        #expect(results.filter { $0.outcome == .updated }.count == 3 && results.filter { $0.outcome == .failed }.count == 3)
        // Three rounds of two 10 s transfers, the first after a 1 s preparation: nothing waited for a lost place.
        #expect(summary.seconds == 31, "\(summary.seconds) s")
    }

    @Test func aLostLinkIsRetriedAfterADoublingBackoffAndARefusalIsNot() async throws {
        let devices = [FleetDevice(address: "flaky"), FleetDevice(address: "refuses"), FleetDevice(address: "gone")]
        let recorder = Recorder()
        let tries = Mutex([String: Int]())
        let (results, summary) = try await SimulationRuntime.run { runtime in
            let options = FleetOptions(adapters: ["a"], connectionsPerAdapter: 3, attempts: 3, backoff: .seconds(5))
            let runner = FleetRunner(devices: devices, options: options, clock: runtime.clock) { device, adapter, _, _ in
                recorder.begin(adapter, device.address, at: runtime.clock.now)
                defer { recorder.end(adapter) }
                let attempt = tries.withLock { tries -> Int in
                    tries[device.address, default: 0] += 1
                    return tries[device.address]!
                }
                try? await runtime.clock.sleep(for: .seconds(1))
                switch device.address {
                case "flaky" where attempt < 3: return .failed(TransferError(.linkLost, step: .transfer, "the link dropped"))
                case "refuses": return .failed(TransferError(.deviceRefused, step: .verify, "image refused"))
                case "gone": return .failed(TransferError(.linkLost, step: .connect, "not there"))
                default: return .updated(Self.report(device))
                }
            }
            return await runner.run()
        }
        let starts = recorder.state.withLock { $0.starts }
        // flaky: at 0, then 1 + 5, then 7 + 10 (the back-off doubles).
        #expect(starts["flaky"] == [.seconds(0), .seconds(6), .seconds(17)])
        #expect(results[0].outcome == .updated && results[0].attempts == 3)
        #expect(results[1].outcome == .failed && results[1].attempts == 1 && results[1].step == "verify", "a refusal is final")
        #expect(results[2].outcome == .failed && results[2].attempts == 3 && results[2].error == "not there")
        #expect(!summary.allSucceeded && !summary.noneSucceeded && summary.failed == 2)
        #expect(summary.sentence == "1 of 3 devices run the target (1 updated, 0 already did), 2 failed, in 18 s")
    }

    @Test func aDeviceAlreadyCurrentIsSkippedAndAStopLeavesTheRestUnstarted() async throws {
        let devices = (0..<6).map { FleetDevice(address: "d\($0)") }
        let stop = FleetStopSignal()
        let events = Mutex<[String]>([])
        let (results, summary) = try await SimulationRuntime.run { runtime in
            let runner = FleetRunner(
                devices: devices, options: FleetOptions(adapters: ["a"], connectionsPerAdapter: 2), clock: runtime.clock, stop: stop,
                onEvent: { event in if case .stopping = event { events.withLock { $0.append("stopping") } } }
            ) { device, _, _, _ in
                try? await runtime.clock.sleep(for: .seconds(device.address == "d1" ? 5 : 10))
                if device.address == "d1" {
                    // Ctrl-C while d0 and d1 run: both finish, nothing else starts.
                    stop.stop()
                    return .alreadyCurrent(version: "2")
                }
                return .updated(Self.report(device))
            }
            return await runner.run()
        }
        #expect(results.map(\.outcome) == [.updated, .skipped, .notStarted, .notStarted, .notStarted, .notStarted])
        #expect(summary.interrupted && summary.skipped == 1 && summary.notStarted == 4)
        #expect(events.withLock { $0 } == ["stopping"])
    }

    @Test func aDeviceWaitingForItsNextTryWhenStoppedEndsWithItsFailure() async throws {
        let devices = [FleetDevice(address: "flaky"), FleetDevice(address: "slow")]
        let stop = FleetStopSignal()
        let (results, _) = try await SimulationRuntime.run { runtime in
            let options = FleetOptions(adapters: ["a"], connectionsPerAdapter: 2, attempts: 3, backoff: .seconds(30))
            let runner = FleetRunner(devices: devices, options: options, clock: runtime.clock, stop: stop) { device, _, _, _ in
                if device.address == "flaky" {
                    try? await runtime.clock.sleep(for: .seconds(1))
                    return .failed(TransferError(.linkLost, step: .transfer, "the link dropped"))
                }
                // Ctrl-C while flaky waits out its back-off.
                try? await runtime.clock.sleep(for: .seconds(10))
                stop.stop()
                return .updated(Self.report(device))
            }
            return await runner.run()
        }
        #expect(results[0].outcome == .failed && results[0].attempts == 1 && results[0].error == "the link dropped")
        #expect(results[1].outcome == .updated)
    }

    /// Five devices on two adapters, one transfer place each: "a" gets the quick ones (2 s
    /// transfers), "b" two slow ones (10 s). When "a" runs dry, the slow device queued at "b"
    /// moves there and transfers beside the other, instead of after it.
    static func movingRun(moves: Bool) async throws -> (results: [DeviceResult], summary: FleetSummary, notes: [String]) {
        let devices = (0..<5).map { FleetDevice(address: "sim://d\($0)") }
        let notes = Mutex<[String]>([])
        let (results, summary) = try await SimulationRuntime.run { runtime in
            var options = FleetOptions(adapters: ["a", "b"], connectionsPerAdapter: 3, transfersPerAdapter: 1, attempts: 1)
            options.movesQueuedDevices = moves
            let runner = FleetRunner(
                devices: devices, options: options, clock: runtime.clock,
                onEvent: { event in
                    if case .note(let device, let text) = event { notes.withLock { $0.append("\(device.address): \(text)") } }
                }
            ) { device, _, turn, _ in
                var recorder = OperationRecorder(
                    operation: "flash", protocolName: "p", device: device.address, clock: runtime.clock,
                    transferTurn: turn
                ) { _ in }
                recorder.enter(.connect)
                try? await runtime.clock.sleep(for: .seconds(1))
                do throws(TransferError) {
                    try await recorder.enterTransfer()
                } catch {
                    return .failed(error)
                }
                let slow = ["sim://d1", "sim://d3"].contains(device.address)
                try? await runtime.clock.sleep(for: .seconds(slow ? 10 : 2))
                recorder.enter(.verify)
                return .updated(Self.report(device))
            }
            return await runner.run()
        }
        return (results, summary, notes.withLock { $0 })
    }

    @Test func aDeviceQueuedAtABusyAdapterMovesToOneThatRanDry() async throws {
        let moved = try await Self.movingRun(moves: true)
        let stayed = try await Self.movingRun(moves: false)
        // Without moves: d1 transfers on "b" from 1 s to 11 s, then d3 to 21 s.
        #expect(stayed.summary.seconds == 21)
        #expect(stayed.results.map(\.adapter) == ["a", "b", "a", "b", "a"])
        // With them: "a" runs dry at 7 s (d0, d2, d4: 2 s each); d3 leaves "b"'s queue, connects to "a"
        // (1 s) and transfers from 8 s to 18 s.
        #expect(moved.summary.seconds == 18)
        #expect(moved.results.map(\.adapter) == ["a", "b", "a", "a", "a"])
        #expect(moved.results.allSatisfy { $0.outcome == .updated && $0.attempts == 1 }, "a move is not a try")
        #expect(moved.notes == ["sim://d3: moves from b: a transfer place is free on another adapter"])
        #expect(stayed.notes.isEmpty)
    }

    /// A device that names its adapter stays there, however long the queue; one that does not may go.
    @Test func aDeviceTiedToItsAdapterNeverMoves() async throws {
        let clock = SystemClock()
        let places = TransferPlaces(adapters: ["a"], connectionsPerAdapter: 3, transfersPerAdapter: 1, maximumWait: .seconds(60))
        let gate = try #require(places.gates["a"])
        let holder = try #require(places.turn(on: "a", for: FleetDevice(address: "h"), movable: true) { _ in })
        await holder.wait(clock: clock)
        let tied = try #require(places.turn(on: "a", for: FleetDevice(address: "x", adapter: "a"), movable: true) { _ in })
        #expect(!tied.movable)
        let tiedWait = Task { await tied.wait(clock: clock) }
        for _ in 0..<10_000 where gate.waiting < 1 { await Task.yield() }
        #expect(!places.withdrawFromLongestQueue())
        let free = try #require(places.turn(on: "a", for: FleetDevice(address: "y"), movable: true) { _ in })
        let freeWait = Task { await free.wait(clock: clock) }
        for _ in 0..<10_000 where gate.waiting < 2 { await Task.yield() }
        #expect(places.withdrawFromLongestQueue())
        #expect(await freeWait.value == false)
        #expect(free.wasWithdrawn)
        #expect(!places.withdrawFromLongestQueue())
        holder.release()
        #expect(await tiedWait.value)
        #expect(!tied.wasWithdrawn)
    }
}
