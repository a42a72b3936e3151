// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import BleotaEngine
import BleotaFleet
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaCampaign

/// Faults a campaign meets, against a real PostgreSQL server: the database restarted under a
/// running worker, and a worker cut off from it for longer than its lease.
@Suite(.serialized) struct CampaignFaultTests {
    let campaigns = CampaignStoreTests()

    static func report(_ device: FleetDevice) -> FleetAttempt {
        var report = UpdateReport(
            operation: "flash", device: device.address, bytes: 100, streamBytes: 100, compressed: false, packetSize: 244,
            transferSeconds: 0.1, totalSeconds: 0.1, statistics: TransferStatistics(), stepSeconds: [:], tuning: TransferTuning())
        report.versionAfter = "2.0.0"
        return .updated(report)
    }

    /// An operation that ignores its cancellation (as the query caught in a restart did) is given
    /// up on at its limit, not waited for: the caller has its answer while the body still runs.
    @Test func anOperationPastItsLimitIsNotWaitedFor() async throws {
        let ended = Shared(false)
        let started = Shared(false)
        await #expect(throws: CampaignError.database("no answer in 0 s: is the server running, and is the address right?")) {
            // Real time: the limit is the store's real one, and the body outlives it by design.
            try await withOperationTimeout(.milliseconds(100)) {
                started.value.withLock { $0 = true }
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    DispatchQueue.global().asyncAfter(deadline: .now() + 5) {
                        ended.value.withLock { $0 = true }
                        continuation.resume()
                    }
                }
                return 1
            }
        }
        #expect(started.value.withLock { $0 } && !ended.value.withLock { $0 }, "the answer came while the body still ran")
        // An operation within its limit answers as it ends.
        #expect(try await withOperationTimeout(.seconds(30)) { 7 } == 7)
    }

    /// The server is stopped at once (every connection dropped) and started again while a worker
    /// is mid-campaign: the worker's claims and records fail for a moment, it connects again and
    /// goes on, and every device is updated exactly once, recorded once. (Before the store stopped
    /// waiting for an operation past its limit, a query caught in the restart could hold the worker
    /// for ever: 2 runs of 3 hung.)
    @Test(.timeLimit(.minutes(2))) func aDatabaseRestartedMidCampaignLosesNothingAndRepeatsNothing() async throws {
        // A query in flight as the server went away can hang: the store gives up on it after 3 s here.
        try await campaigns.withCampaign(8, lease: 60, operationTimeout: .seconds(3)) { store, info, server in
            let clock = SteppedClock { moved in store.advanceClock(by: Double(moved / .milliseconds(1)) / 1000) }
            // Virtual time stands still while the server restarts, as it would barely move in real life.
            let restarting = Shared(false)
            let happened = AsyncCondition()
            let tried = Shared<[String: Int]>([:])
            let options = CampaignWorkerOptions(adapters: ["a0"], connectionsPerAdapter: 2, name: "w", poll: .milliseconds(100))
            let worker = CampaignWorker(store: store, campaign: info, options: options, clock: clock, logger: CampaignStoreTests.logger) {
                device, _, _, _ in
                let number = tried.value.withLock {
                    $0[device.address, default: 0] += 1
                    return $0.values.reduce(0, +)
                }
                if number == 3 {
                    restarting.value.withLock { $0 = true }
                    // A real server process restarting is what this waits for.
                    try? server.restart()
                    restarting.value.withLock { $0 = false }
                    happened.changed()
                }
                return Self.report(device)
            }
            let stepping = Task {
                while !Task.isCancelled {
                    await happened.wait { !restarting.value.withLock { $0 } }
                    await clock.step()
                }
            }
            defer { stepping.cancel() }
            let summary = try await worker.run()
            stepping.cancel()
            #expect(summary.updated == 8 && summary.failed == 0 && summary.lostLeases == 0)
            let counts = tried.value.withLock { $0 }
            #expect(counts.count == 8 && counts.values.allSatisfy { $0 == 1 }, "each device updated once: \(counts)")
            let status = try #require(summary.status)
            #expect(status.devices.allSatisfy { $0.state == .updated && $0.tries == 1 })
            let tries = try await store.tries(info.name)
            #expect(tries.count == 8 && tries.allSatisfy { $0.outcome == "updated" })
        }
    }

    /// A worker cut off from the database (its queries unanswered) for longer than its lease, in
    /// the middle of an update: another worker takes the device over and records it; when the
    /// first comes back, its late ending is refused and the device keeps the new owner's result.
    @Test(.timeLimit(.minutes(2))) func aWorkerCutOffLongerThanItsLeaseNeverReportsOverTheNewOwner() async throws {
        try await campaigns.withCampaign(1, lease: 60) { store, info, server in
            try await CampaignStore.withStore(try CampaignAddress(parsing: server.url), logger: CampaignStoreTests.logger) { other in
                let clock = SteppedClock { moved in
                    let seconds = Double(moved / .milliseconds(1)) / 1000
                    store.advanceClock(by: seconds)
                    other.advanceClock(by: seconds)
                }
                let happened = AsyncCondition()
                let started = Shared(false)
                let released = Shared(false)
                let options = CampaignWorkerOptions(adapters: ["a0"], connectionsPerAdapter: 1, name: "cut", poll: .milliseconds(500))
                let worker = CampaignWorker(store: store, campaign: info, options: options, clock: clock, logger: CampaignStoreTests.logger) {
                    device, _, _, _ in
                    started.value.withLock { $0 = true }
                    happened.changed()
                    await happened.wait { released.value.withLock { $0 } }
                    return Self.report(device)
                }
                let stepping = Task {
                    while !Task.isCancelled { await clock.step() }
                }
                defer { stepping.cancel() }
                let running = Task { try await worker.run() }
                await happened.wait { started.value.withLock { $0 } }
                store.cutOff.withLock { $0 = true }
                let cutAt = clock.now
                while clock.now - cutAt < .seconds(61) { await Task.yield() }
                // The lease ran out while the first worker could not renew it: the other takes the device.
                let taken = try #require(try await other.claim(info, worker: "other", limit: 1, adapters: []).first)
                #expect(taken.tryNumber == 2)
                #expect(try await other.record(info, worker: "other", claimed: taken, ending: CampaignStoreTests.updated()))
                // The first comes back and finishes its update: its ending is refused.
                store.cutOff.withLock { $0 = false }
                released.value.withLock { $0 = true }
                happened.changed()
                let summary = try await running.value
                stepping.cancel()
                #expect(summary.lostLeases == 1)
                let device = try #require(summary.status?.devices.first)
                #expect(device.state == .updated && device.worker == "other" && device.tries == 2)
                let tries = try await other.tries(info.name)
                #expect(tries.map(\.worker) == ["cut", "other"] && tries.map(\.outcome) == ["lease-expired", "updated"])
            }
        }
    }
}
#endif
