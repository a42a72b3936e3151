import BleotaLink
import Synchronization
import Testing

@testable import BleotaEngine

/// Finding a device again after its reset, written once for every host: the old link let go only
/// once the device dropped it (or the wait ran out), and a link for the expected mode, on virtual time.
@Suite struct DeviceReturnTests {
    /// Hands out one prepared link per connect, or refuses when none is left; records each purpose and timeout.
    final class RecordingConnector: DeviceConnector {
        let links: Mutex<[any Link]>
        let asked = Mutex<[(ConnectPurpose, Duration)]>([])
        init(_ links: [any Link]) { self.links = Mutex(links) }
        var description: String { "the test device" }
        func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
            asked.withLock { $0.append((purpose, timeout)) }
            guard let link = links.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { throw .unreachable("not advertising") }
            return link
        }
    }

    @Test func theOldLinkIsLetGoWhenTheDeviceDropsItAndTheNewOneIsForTheExpectedMode() async throws {
        let (elapsed, purposes, sent) = try await SimulationRuntime.run { runtime in
            let (old, oldDevice) = LoopbackLink.pair()
            let (new, _) = LoopbackLink.pair()
            let connector = RecordingConnector([new])
            let context = HostContext(
                protocolName: "test", connector: connector, clock: runtime.clock,
                timeouts: StepTimeouts(response: .seconds(5), reboot: .seconds(30)))
            // The device says a last word, then resets 2 s after its answer.
            let resetting = Task(executorPreference: runtime) {
                try? await oldDevice.send([0x01])
                try? await runtime.clock.sleep(for: .seconds(2))
                await oldDevice.close()
            }
            let started = runtime.clock.now
            let back = try await context.reconnect(after: old, expecting: .bootloader)
            let elapsed = runtime.clock.now - started
            await resetting.value
            // The old link is closed from this side too: sending on it fails.
            let sent: Bool
            do {
                try await old.send([0x02])
                sent = true
            } catch { sent = false }
            await back.close()
            return (elapsed, connector.asked.withLock { $0.map { "\($0.0) \($0.1)" } }, sent)
        }
        #expect(elapsed == .seconds(2), "waited for the drop, not the whole response timeout")
        #expect(purposes == ["bootloader 30.0 seconds"])
        #expect(!sent)
    }

    @Test func aDeviceThatNeverDropsTheLinkIsLetGoAfterTheResponseTimeout() async throws {
        let elapsed = try await SimulationRuntime.run { runtime in
            let (old, _) = LoopbackLink.pair()
            let context = HostContext(protocolName: "test", connector: RecordingConnector([]), clock: runtime.clock, timeouts: StepTimeouts(response: .seconds(3)))
            let started = runtime.clock.now
            await context.awaitDisconnect(old)
            return runtime.clock.now - started
        }
        #expect(elapsed == .seconds(3))
    }

    @Test(arguments: [(DeviceMode.application, UpdateStep.confirm, "its application"), (.bootloader, .reconnect, "its bootloader")])
    func aDeviceNotFoundAgainFailsAsTheStepOfTheModeItWasExpectedIn(mode: DeviceMode, step: UpdateStep, place: String) async throws {
        let failure = try await SimulationRuntime.run { runtime -> TransferError? in
            let context = HostContext(protocolName: "test", connector: RecordingConnector([]), clock: runtime.clock, timeouts: StepTimeouts(reboot: .seconds(12)))
            do throws(TransferError) {
                _ = try await context.reconnect(after: nil, expecting: mode)
                return nil
            } catch { return error }
        }
        #expect(failure?.code == .linkLost && failure?.step == step)
        #expect(
            failure?.message
                == "the test device did not come back in \(place) within 12.0 seconds (raise --connect-timeout if its reset takes longer): device unreachable: not advertising")
        #expect(failure?.outcome == nil, "the lifecycle probes what runs")
    }

    @Test func aTransferResumesAsOftenAsItsLimitAndSaysSoOnceMore() {
        var resumption = TransferResumption(limit: 2)
        var notes: [String] = []
        let note: (UpdateEvent) -> Void = { if case .note(let text) = $0 { notes.append(text) } }
        let drop = LinkError.disconnected("supervision timeout")
        #expect(throws: Never.self) { try resumption.linkDropped(drop, onEvent: note) }
        #expect(throws: Never.self) { try resumption.linkDropped(drop, onEvent: note) }
        #expect(resumption.reconnects == 2)
        #expect(notes == Array(repeating: "link lost (link disconnected: supervision timeout); reconnecting to resume", count: 2))
        #expect(
            throws: TransferError(
                .linkLost, step: .transfer, "the link dropped 3 times (last: link disconnected: supervision timeout); run the same command again to resume")
        ) { try resumption.linkDropped(drop, onEvent: note) }
        #expect(notes.count == 2, "the last drop is the failure, not a note")
    }

    @Test func aCancelledOperationIsNotADropToMend() async {
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            var resumption = TransferResumption(limit: 5)
            do throws(TransferError) {
                try resumption.linkDropped(LinkError.cancelled) { _ in }
                return (resumption.reconnects, String?.none)
            } catch { return (resumption.reconnects, Optional(error.message)) }
        }
        let (reconnects, message) = await task.value
        #expect(reconnects == 0 && message == "cancelled: link operation cancelled")
    }

    /// A device still starting takes a connection and does not answer on it: that link is closed and
    /// the device is found again, 200 ms later, within what is left of the reboot wait.
    @Test func aGreetingLeftUnansweredIsTriedAgainOnANewLinkWithinTheRebootWait() async throws {
        let (elapsed, purposes, firstClosed, greeted) = try await SimulationRuntime.run { runtime in
            let (silent, silentDevice) = LoopbackLink.pair()
            let (answering, answeringDevice) = LoopbackLink.pair()
            let connector = RecordingConnector([silent, answering])
            let context = HostContext(
                protocolName: "test", connector: connector, clock: runtime.clock,
                timeouts: StepTimeouts(response: .seconds(1), reboot: .seconds(30)))
            let answerer = Task(executorPreference: runtime) {
                if let hello = try? await answeringDevice.receive(within: .seconds(60), clock: runtime.clock) { try? await answeringDevice.send(hello + [0xAA]) }
            }
            let started = runtime.clock.now
            let (link, greeting) = try await context.reconnect(after: nil, expecting: .application) { (link) async throws(TransferError) -> [UInt8] in
                do {
                    try await link.send([0x01])
                    guard let answer = try await link.receive(within: .seconds(1), clock: runtime.clock) else {
                        throw TransferError(.timeout, step: .confirm, "no answer to the greeting")
                    }
                    return answer
                } catch let error as TransferError { throw error } catch { throw TransferError(.linkLost, step: .confirm, "\(error)") }
            }
            let elapsed = runtime.clock.now - started
            await answerer.value
            let firstClosed: Bool
            do {
                try await silentDevice.send([0x02])
                firstClosed = false
            } catch { firstClosed = true }
            await link.close()
            return (elapsed, connector.asked.withLock { $0.map { "\($0.0) \($0.1)" } }, firstClosed, greeting)
        }
        #expect(greeted == [0x01, 0xAA])
        #expect(elapsed == .milliseconds(1200), "one unanswered greeting and the pause")
        #expect(purposes == ["application 30.0 seconds", "application 28.8 seconds"])
        #expect(firstClosed, "the link the greeting went unanswered on is let go")
    }

    /// Every greeting failing: the last failure is the step's, once the reboot wait is spent.
    @Test func theLastUnansweredGreetingIsTheFailureOnceTheWaitIsSpent() async throws {
        let (failure, connects) = try await SimulationRuntime.run { runtime -> (TransferError?, Int) in
            let links = (0..<40).map { _ in LoopbackLink.pair().0 as any Link }
            let connector = RecordingConnector(links)
            let context = HostContext(protocolName: "test", connector: connector, clock: runtime.clock, timeouts: StepTimeouts(reboot: .seconds(3)))
            do throws(TransferError) {
                _ = try await context.reconnect(after: nil, expecting: .bootloader) { (_) async throws(TransferError) -> Int in
                    try? await runtime.clock.sleep(for: .milliseconds(800))
                    throw TransferError(.timeout, step: .reconnect, "no hello")
                }
                return (nil, connector.asked.withLock { $0.count })
            } catch { return (error, connector.asked.withLock { $0.count }) }
        }
        #expect(failure?.message == "no hello")
        // 0.8 s a greeting and 0.2 s a pause: greetings at 0, 1 and 2 s, and one at 3 s would be past the wait.
        #expect(connects == 3)
    }
}
