import BleotaEngine
import BleotaLink
import Synchronization
import Testing

@testable import BleotaSimulator

/// A device half that only notes when each packet reaches it.
final class ArrivalRecorder: DeviceHalf {
    let arrivals = Mutex<[(at: Duration, packet: [UInt8])]>([])
    var mode: DeviceMode { .application }
    var runningVersion: String { "1" }
    var firmware: FirmwareState { FirmwareState(running: nil) }
    func powerCycle() async {}
    func serve(_ link: any Link, environment: DeviceEnvironment) async {
        while let packet = try? await link.receive() {
            let now = environment.clock.now
            arrivals.withLock { $0.append((now, packet)) }
        }
    }
}

/// The link model's ATT Write Response (protocols/link-model.md, "Requests and commands").
@Suite struct WriteResponseTests {
    /// Sends request, command, request, command (channel 0 a control point, channel 1 a data
    /// stream) and returns when each reached the device, in connection intervals from the first.
    func arrivals(requestChannels: Set<UInt8>) async throws -> [(channel: UInt8, intervals: Double)] {
        let parsed = try SimulatorAddress(parsing: "sim://2m-dle")
        let recorder = ArrivalRecorder()
        try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: 1)
            await world.add(
                SimulatedDevice(
                    address: "C0:FF:EE:00:00:01", half: recorder, model: parsed.model, channelTagged: true, requestChannels: requestChannels))
            let link = try await world.connect(to: "C0:FF:EE:00:00:01", timeout: .seconds(5))
            try await link.send([0, 1])
            try await link.send([1, 2])
            try await link.send([0, 3])
            try await link.send([1, 4])
            try await world.clock.sleep(for: .milliseconds(200))
            await link.close()
            await world.shutDown()
        }
        let seen = recorder.arrivals.withLock { $0 }
        let first = seen.first?.at ?? .zero
        return seen.map { ($0.packet[0], ($0.at - first) / parsed.model.connectionInterval) }
    }

    /// A request goes at once and commands pass it; the next request waits for the first's
    /// Write Response, which comes in the event after the request crossed, so it goes one
    /// event later still.
    @Test func aSecondRequestWaitsForTheFirstsWriteResponseAndCommandsDoNot() async throws {
        let timed = try await arrivals(requestChannels: [0])
        #expect(timed.map(\.channel) == [0, 1, 0, 1])
        #expect(timed[1].intervals < 1, "the command shares the request's event: \(timed)")
        #expect(timed[2].intervals >= 2 && timed[2].intervals < 3, "the second request goes two events after the first: \(timed)")
        #expect(timed[3].intervals - timed[2].intervals < 1, "\(timed)")
    }

    /// The same writes as commands all share one event: what the request's turn costs above.
    @Test func withoutRequestsTheSameWritesShareOneEvent() async throws {
        let timed = try await arrivals(requestChannels: [])
        #expect(timed.map(\.channel) == [0, 1, 0, 1])
        #expect(timed.allSatisfy { $0.intervals < 1 }, "\(timed)")
    }
}
