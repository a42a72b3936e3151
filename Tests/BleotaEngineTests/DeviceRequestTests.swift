import BleotaLink
import Synchronization
import Testing

@testable import BleotaEngine

/// A request that asks `0x10 n` and is answered `0x90 n value`.
private struct EchoRequest: DeviceRequest {
    var number: UInt8
    var what: String { "echo request \(number)" }
    func encode() -> [UInt8] { [0x10, number] }
    func response(from packet: [UInt8]) -> UInt8? {
        packet.count == 3 && packet[0] == 0x90 && packet[1] == number ? packet[2] : nil
    }
}

/// No connector is used: the exchange runs on the link it is given.
private struct NoConnector: DeviceConnector {
    var description: String { "test device" }
    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link { throw .unreachable("none") }
}

/// The one typed exchange every host shares: the answer it names, packets that answer something
/// else skipped, lost answers tried again within the policy, a closed link at once, on virtual time.
@Suite struct DeviceRequestTests {
    /// A device that ignores the first `ignoring` requests, sends a stray and a stale answer first, then answers.
    func exchange(
        ignoring: Int, policy: RequestPolicy, closing: Bool = false
    ) async throws -> (result: Result<UInt8, TransferError>, requests: Int, elapsed: Duration) {
        try await SimulationRuntime.run { runtime in
            let (host, device) = LoopbackLink.pair(maximumPayload: 20)
            let requests = Mutex(0)
            let answering = Task(executorPreference: runtime) {
                while let packet = try? await device.receive() {
                    let count = requests.withLock {
                        $0 += 1
                        return $0
                    }
                    if closing {
                        await device.close()
                        return
                    }
                    guard count > ignoring, packet.count == 2 else { continue }
                    try? await device.send([0x90, packet[1] &- 1, 0xEE])  // a late answer to an earlier request
                    try? await device.send([0x42])  // a notification
                    try? await device.send([0x90, packet[1], 0x5A])
                }
            }
            let context = HostContext(protocolName: "test", connector: NoConnector(), clock: runtime.clock)
            let started = runtime.clock.now
            let result: Result<UInt8, TransferError>
            do throws(TransferError) { result = .success(try await context.request(EchoRequest(number: 7), on: host, step: .connect, policy: policy)) } catch {
                result = .failure(error)
            }
            let elapsed = runtime.clock.now - started
            await host.close()
            answering.cancel()
            return (result, requests.withLock { $0 }, elapsed)
        }
    }

    @Test func theAnswerItNamesIsReturnedAndOthersAreSkipped() async throws {
        let run = try await exchange(ignoring: 0, policy: RequestPolicy(timeout: .seconds(1), attempts: 3))
        #expect(try run.result.get() == 0x5A)
        #expect(run.requests == 1)
    }

    @Test func aLostAnswerIsAskedForAgainAfterTheBackoff() async throws {
        let run = try await exchange(ignoring: 2, policy: RequestPolicy(timeout: .seconds(1), attempts: 3, backoff: .milliseconds(250)))
        #expect(try run.result.get() == 0x5A)
        #expect(run.requests == 3)
        // Two unanswered tries of 1 s, each followed by its 250 ms pause.
        #expect(run.elapsed >= .milliseconds(2_500) && run.elapsed < .seconds(3))
    }

    @Test func noAnswerAfterTheLastTryIsATimeoutNamingTheRequest() async throws {
        let run = try await exchange(ignoring: 10, policy: RequestPolicy(timeout: .milliseconds(500), attempts: 4))
        guard case .failure(let error) = run.result else {
            Issue.record("answered: \(run.result)")
            return
        }
        #expect(error.code == .timeout && error.step == .connect)
        #expect(error.message == "no answer to echo request 7 after 4 tries: check the device is powered and in range")
        #expect(run.requests == 4)
        #expect(run.elapsed == .seconds(2))
    }

    @Test func aLinkThatClosesEndsTheExchangeAtOnce() async throws {
        let run = try await exchange(ignoring: 0, policy: RequestPolicy(timeout: .seconds(5), attempts: 8), closing: true)
        guard case .failure(let error) = run.result else {
            Issue.record("answered: \(run.result)")
            return
        }
        #expect(error.code == .linkLost)
        #expect(run.requests == 1, "not tried again on a link that is gone")
        #expect(run.elapsed < .seconds(5))
    }

    @Test func thePolicyFromTheCommandLineAndAtLeastOneTry() {
        let policy = RequestPolicy(StepTimeouts(response: .milliseconds(750), attempts: 5))
        #expect(policy == RequestPolicy(timeout: .milliseconds(750), attempts: 5))
        #expect(RequestPolicy(timeout: .seconds(1), attempts: 0).attempts == 1)
    }
}
