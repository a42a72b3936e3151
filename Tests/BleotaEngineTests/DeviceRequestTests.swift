import BleotaLink
import Synchronization
import Testing

@testable import BleotaEngine

/// A request that asks `0x10 n` and is answered `0x90 n value`.
private struct EchoRequest: DeviceRequest {
    var number: UInt8
    var what: String { "echo request \(number)" }
    func encode() -> [UInt8] { [0x10, number] }
    func response(from packet: [UInt8]) throws(DeviceRefusal) -> UInt8? {
        guard packet.count == 3 && packet[0] == 0x90 && packet[1] == number else { return nil }
        if packet[2] == 0xFF { throw DeviceRefusal("echo \(number) is not allowed") }
        return packet[2]
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

    @Test func aRefusalEndsTheExchangeAtOnceNamingTheStep() async throws {
        let run = try await SimulationRuntime.run { runtime in
            let (host, device) = LoopbackLink.pair(maximumPayload: 20)
            let requests = Mutex(0)
            let answering = Task(executorPreference: runtime) {
                while let packet = try? await device.receive() {
                    requests.withLock { $0 += 1 }
                    try? await device.send([0x90, packet[1], 0xFF])
                }
            }
            defer { answering.cancel() }
            let context = HostContext(protocolName: "test", connector: NoConnector(), clock: runtime.clock)
            do throws(TransferError) {
                _ = try await context.request(EchoRequest(number: 3), on: host, step: .verify, policy: RequestPolicy(timeout: .seconds(1), attempts: 5))
                await host.close()
                return (error: TransferError?.none, requests: requests.withLock { $0 })
            } catch {
                await host.close()
                return (error: error, requests: requests.withLock { $0 })
            }
        }
        #expect(run.error?.code == .deviceRefused && run.error?.step == .verify)
        #expect(run.error?.message == "echo 3 is not allowed")
        #expect(run.requests == 1, "a refusal is not asked again")
    }

    /// The channel form: a directory query over a framed byte link, its answer among other channels' packets.
    @Test func aChannelRequestSkipsOtherChannelsAndReturnsItsAnswer() async throws {
        let channels = try await SimulationRuntime.run { runtime in
            let (host, device) = LoopbackLink.pair(maximumPayload: 20)
            let answering = Task(executorPreference: runtime) {
                let framed = FramedChannelLink(device)
                while let message = try? await framed.receiveMessage() {
                    guard message == .directoryQuery else { continue }
                    try? await framed.send(.packet(4, [1, 2]))
                    try? await framed.send(.directory([1, 4, 9]))
                }
            }
            defer { answering.cancel() }
            let context = HostContext(protocolName: "test", connector: NoConnector(), clock: runtime.clock)
            // A loopback link carries bytes: its channel link frames each message.
            let answer = try await context.request(DirectoryRequest(), on: host, step: .connect)
            await host.close()
            return answer
        }
        #expect(channels == [1, 4, 9])
    }

    /// The loop of tries alone: each try's number, the backoff only between tries, nil when none answered.
    @Test func theTriesStopAtTheFirstAnswerAndPauseOnlyBetweenTries() async throws {
        let (numbers, answer, elapsed) = try await SimulationRuntime.run { runtime in
            let policy = RequestPolicy(timeout: .seconds(1), attempts: 4, backoff: .milliseconds(100))
            var numbers: [Int] = []
            let started = runtime.clock.now
            let answer = await policy.tries(on: runtime.clock) { (number) async -> String? in
                numbers.append(number)
                return number == 3 ? "third" : nil
            }
            return (numbers, answer, runtime.clock.now - started)
        }
        #expect(numbers == [1, 2, 3] && answer == "third")
        #expect(elapsed == .milliseconds(200))
        let unanswered = try await SimulationRuntime.run { runtime in
            let started = runtime.clock.now
            let none = await RequestPolicy(timeout: .seconds(1), attempts: 3, backoff: .seconds(1)).tries(on: runtime.clock) { (_) async -> Int? in nil }
            return (none, runtime.clock.now - started)
        }
        #expect(unanswered.0 == nil)
        #expect(unanswered.1 == .seconds(2), "no pause after the last try")
    }
}
