// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import BleotaEngine
import BleotaFleet
import BleotaLink
import BleotaTestSupport
import Foundation
import Logging
import Synchronization
import Testing

@testable import BleotaCampaign

/// The campaign store against a real PostgreSQL server (one per test, torn down after it):
/// the schema, claims, leases, tries and how they end.
@Suite(.serialized) struct CampaignStoreTests {
    static let logger = Logger(label: "bleota.campaign.test")

    /// A server, its address, and a campaign of `count` devices named d1…dN.
    func withCampaign(
        _ count: Int = 4, attempts: Int = 3, lease: Double = 60, backoff: Double = 0, rollout: CampaignRollout = CampaignRollout(),
        operationTimeout: Duration = CampaignStore.defaultOperationTimeout,
        _ body: @Sendable (CampaignStore, CampaignInfo, PostgresTestServer) async throws -> Void
    ) async throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let address = try CampaignAddress(parsing: server.url)
        try await CampaignStore.withStore(address, logger: Self.logger, operationTimeout: operationTimeout) { store in
            let devices = (1...count).map { FleetDevice(address: "udp://127.0.0.1:\(20_000 + $0)", label: "d\($0)") }
            let info = try await store.create(
                CampaignDefinition(
                    name: "test", imageName: "app.bin", image: Array(repeating: 0xA5, count: 4096),
                    devices: devices, versionLabel: "2.0.0", attempts: attempts,
                    backoffSeconds: backoff, leaseSeconds: lease, rollout: rollout))
            try await body(store, info, server)
        }
    }

    static func updated(_ seconds: Double = 1) -> TryEnding {
        .updated(versionBefore: "1.0.0", versionAfter: "2.0.0", seconds: seconds, bytes: 4096, resends: 0, airBytes: 4096)
    }

    @Test func theSchemaIsCreatedOnceAndANewerOneIsRefused() async throws {
        try await withCampaign { store, info, server in
            #expect(try await store.schemaVersion() == CampaignSchema.latestVersion)
            #expect(try await store.migrate() == CampaignSchema.latestVersion, "a second migration changes nothing")
            #expect(info.imageSize == 4096 && info.imageSHA256.count == 64)
            #expect(try await store.image(of: info) == Array(repeating: 0xA5, count: 4096))
            await #expect(throws: CampaignError.exists("test")) {
                _ = try await store.create(CampaignDefinition(name: "test", imageName: "x.bin", image: [1], devices: [FleetDevice(address: "udp://h:1")]))
            }
            // A database a newer bleota migrated: refused with a one-line reason.
            _ = try await CampaignStore.withStore(try CampaignAddress(parsing: server.url), logger: Self.logger) { other in
                try await other.client.query("INSERT INTO bleota.schema_migrations (version, description) VALUES (\(CampaignSchema.latestVersion + 1), 'future')")
            }
            await #expect(throws: CampaignError.schemaTooNew(found: CampaignSchema.latestVersion + 1, known: CampaignSchema.latestVersion)) {
                try await CampaignStore.withStore(try CampaignAddress(parsing: server.url), logger: Self.logger) { _ in }
            }
        }
    }

    @Test func workersClaimingTogetherNeverGetTheSameDevice() async throws {
        try await withCampaign(40) { store, info, _ in
            // Four workers claim two at a time, all at once, until nothing is left.
            let claimed = Shared<[String: [String]]>([:])
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 1...4 {
                    group.addTask {
                        while true {
                            let batch = try await store.claim(info, worker: "w\(worker)", limit: 2, adapters: ["hci0"])
                            if batch.isEmpty { return }
                            for device in batch {
                                claimed.value.withLock { $0[device.device.address, default: []].append("w\(worker)") }
                                #expect(try await store.record(info, worker: "w\(worker)", claimed: device, ending: Self.updated()))
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let owners = claimed.value.withLock { $0 }
            #expect(owners.count == 40, "every device was claimed")
            #expect(owners.values.allSatisfy { $0.count == 1 }, "no device was claimed twice: \(owners.filter { $0.value.count > 1 })")
            #expect(Set(owners.values.flatMap { $0 }).count > 1, "the work was shared")
            let status = try await store.status(info.name)
            #expect(status.count(.updated) == 40 && status.isFinished)
        }
    }

    @Test func anExpiredLeaseGoesToAnotherWorkerAndTheFirstCannotRecord() async throws {
        try await withCampaign(1, lease: 60) { store, info, _ in
            let first = try #require(try await store.claim(info, worker: "dead", limit: 5, adapters: []).first)
            #expect(first.tryNumber == 1)
            #expect(try await store.claim(info, worker: "alive", limit: 5, adapters: []).isEmpty, "a leased device is not claimable")
            store.advanceClock(by: 61)
            let second = try #require(try await store.claim(info, worker: "alive", limit: 5, adapters: []).first)
            #expect(second.device.address == first.device.address && second.tryNumber == 2)
            #expect(
                try await store.record(info, worker: "dead", claimed: first, ending: Self.updated()) == false,
                "the worker whose lease ran out records nothing")
            #expect(try await store.record(info, worker: "alive", claimed: second, ending: Self.updated()))
            let tries = try await store.tries(info.name)
            #expect(tries.map(\.outcome) == ["lease-expired", "updated"])
            #expect(tries.map(\.worker) == ["dead", "alive"])
            #expect(tries[0].endedAt! <= tries[1].startedAt, "the second try began after the first one's lease ran out")
            let device = try #require(try await store.status(info.name).devices.first)
            #expect(device.state == .updated && device.tries == 2 && device.worker == "alive" && device.error == nil)
        }
    }

    @Test func aLeaseRunningOutOnTheLastTryFailsTheDeviceWithTheReason() async throws {
        try await withCampaign(1, attempts: 1, lease: 60) { store, info, _ in
            _ = try await store.claim(info, worker: "w-killed", limit: 1, adapters: [])
            #expect(try await store.claim(info, worker: "w2", limit: 1, adapters: []).isEmpty)
            store.advanceClock(by: 61)
            #expect(try await store.claim(info, worker: "w2", limit: 1, adapters: []).isEmpty)
            let device = try #require(try await store.status(info.name).devices.first)
            #expect(device.state == .failed)
            #expect(device.step == "lease")
            #expect(device.error == "the lease of worker w-killed ran out during try 1 (the worker stopped: killed, crashed or cut off from the database), and it was the last try")
        }
    }

    @Test func aRenewedLeaseIsKeptAndAFailedTryWaitsForItsBackOff() async throws {
        try await withCampaign(2, lease: 60) { store, info, _ in
            let claimed = try await store.claim(info, worker: "w1", limit: 2, adapters: [])
            #expect(claimed.count == 2)
            for _ in 0..<3 {
                store.advanceClock(by: 25)
                #expect(try await store.renew(info, worker: "w1", addresses: claimed.map(\.device.address)) == Set(claimed.map(\.device.address)))
            }
            #expect(try await store.claim(info, worker: "w2", limit: 2, adapters: []).isEmpty, "renewed leases are still held after 75 s")
            let failed = TryEnding.failed(error: "link lost", step: "transfer", deviceState: "old-image", seconds: 1, bytes: 0, resends: 0, retryAfter: 30)
            #expect(try await store.record(info, worker: "w1", claimed: claimed[0], ending: failed))
            #expect(try await store.record(info, worker: "w1", claimed: claimed[1], ending: .alreadyCurrent(version: "2.0.0", seconds: 0.1)))
            #expect(try await store.claim(info, worker: "w2", limit: 2, adapters: []).isEmpty, "the failed device waits out its back-off")
            let status = try await store.status(info.name)
            #expect(status.devices.map(\.state) == [.pending, .skipped])
            #expect(status.devices[0].error == "link lost" && status.devices[0].step == "transfer")
            store.advanceClock(by: 29)
            #expect(try await store.claim(info, worker: "w2", limit: 2, adapters: []).isEmpty, "29 s into a 30 s back-off")
            store.advanceClock(by: 2)
            let retry = try await store.claim(info, worker: "w2", limit: 2, adapters: [])
            #expect(retry.map(\.tryNumber) == [2])
        }
    }

    @Test func aDeviceFixedToAnAdapterIsClaimedOnlyByAWorkerWithIt() async throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        try await CampaignStore.withStore(try CampaignAddress(parsing: server.url), logger: Self.logger) { store in
            let info = try await store.create(
                CampaignDefinition(
                    name: "adapters", imageName: "a.bin", image: [1, 2, 3],
                    devices: [
                        FleetDevice(address: "ble://AA:BB:CC:DD:EE:01", adapter: "hci1"), FleetDevice(address: "ble://AA:BB:CC:DD:EE:02"),
                    ]))
            let other = try await store.claim(info, worker: "w0", limit: 5, adapters: ["hci0"])
            #expect(other.map(\.device.address) == ["ble://AA:BB:CC:DD:EE:02"])
            let owner = try await store.claim(info, worker: "w1", limit: 5, adapters: ["hci1"])
            #expect(owner.map(\.device.address) == ["ble://AA:BB:CC:DD:EE:01"])
            #expect(owner.first?.device.adapter == "hci1")
        }
    }

    @Test func anUnreachableDatabaseIsOneLine() async throws {
        let address = try CampaignAddress(parsing: "postgresql://bleota@/postgres?host=/nonexistent-bleota&port=1")
        let error = await #expect(throws: CampaignError.self) {
            try await CampaignStore.withStore(address, logger: Self.logger) { _ in }
        }
        guard case .database(let text)? = error else {
            Issue.record("not a database error: \(String(describing: error))")
            return
        }
        #expect(
            text
                == "connecting to postgresql://bleota@/nonexistent-bleota/.s.PGSQL.1/postgres: no server socket at /nonexistent-bleota/.s.PGSQL.1: is the server running, and are host= and port= its socket directory and port?",
            "\(text)")
        #expect(!text.contains("\n"))
    }
}

/// Campaign URLs as libpq writes them.
@Suite struct CampaignAddressTests {
    @Test func aSocketDirectoryInTheQueryOrTheHost() throws {
        let query = try CampaignAddress(parsing: "postgresql://ops@/fleet?host=/run/pg&port=6000", environment: [:])
        #expect(query.endpoint == .unixSocket(path: "/run/pg/.s.PGSQL.6000"))
        #expect(query.user == "ops" && query.database == "fleet" && query.tls == .disable)
        let encoded = try CampaignAddress(parsing: "postgresql://%2Frun%2Fpg/fleet", environment: ["USER": "me"])
        #expect(encoded.endpoint == .unixSocket(path: "/run/pg/.s.PGSQL.5432"))
        #expect(encoded.user == "me")
    }

    @Test func tcpWithPasswordNeverPrintsIt() throws {
        let address = try CampaignAddress(parsing: "postgresql://ops:s3cret@db.example:5433/fleet?sslmode=require", environment: [:])
        #expect(address.endpoint == .tcp(host: "db.example", port: 5433))
        #expect(address.password == "s3cret" && address.tls == .require)
        #expect(address.description == "postgresql://ops@db.example:5433/fleet")
        let defaults = try CampaignAddress(parsing: "postgres://db.example", environment: ["PGUSER": "u", "PGPASSWORD": "p"])
        #expect(defaults.user == "u" && defaults.password == "p" && defaults.database == "u" && defaults.tls == .prefer)
    }

    @Test(arguments: [
        ("mysql://h/db", "'mysql://h/db' is not a postgresql:// URL"),
        ("postgresql://u:pw@h:99999/db", "port '99999' is not 1…65535"),
        ("postgresql://h/db?sslmode=sometimes", "sslmode 'sometimes' is not one of disable, prefer, require"),
        ("postgresql://h/db?timeout=3", "unknown query parameter 'timeout' (known: host, port, sslmode, user, password, dbname)"),
    ])
    func mistakesAreNamed(_ text: String, _ problem: String) {
        #expect(throws: CampaignError.badAddress("\(problem): write postgresql://USER@HOST:PORT/DATABASE or postgresql:///DATABASE?host=/socket/dir")) {
            _ = try CampaignAddress(parsing: text, environment: [:])
        }
    }
}

/// Workers in one process on a real database, with an update function that
/// stands in for a device: two workers share a campaign, one dies mid-update.
@Suite struct CampaignWorkerTests {
    /// On the store's clock, stepped (``SteppedClock``): the doomed worker hangs holding two devices
    /// and is cancelled, so it renews nothing; the survivor's rounds move the clock, and with it
    /// the database's, until the doomed worker's leases run out and the survivor takes its devices.
    /// Nothing waits in real time.
    @Test(.timeLimit(.minutes(2))) func aDeadWorkersDevicesAreFinishedByTheOtherAndNoneIsUpdatedTwice() async throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let logger = Logger(label: "bleota.worker.test")
        try await CampaignStore.withStore(try CampaignAddress(parsing: server.url), logger: logger) { store in
            let clock = SteppedClock { moved in store.advanceClock(by: Double(moved / .milliseconds(1)) / 1000) }
            let devices = (1...16).map { FleetDevice(address: "udp://127.0.0.1:\(30_000 + $0)") }
            let info = try await store.create(
                CampaignDefinition(
                    name: "pair", imageName: "app.bin", image: [7, 7, 7], devices: devices,
                    leaseSeconds: 60))
            // Each "device" counts the updates that reached their end on it.
            let completed = Shared<[String: [String]]>([:])
            let startedByDoomed = Shared(0)
            let doomedStarted = AsyncCondition()
            // The doomed worker's updates never end while the test runs: it dies holding them.
            let released = Shared(false)
            let release = AsyncCondition()
            func update(_ worker: String) -> FleetRunner.Update {
                { device, _, _, _ in
                    // Like a real device asked first what it runs: one a dead worker finished is current.
                    if completed.value.withLock({ $0[device.address] != nil }) { return .alreadyCurrent(version: "2.0.0") }
                    if worker == "doomed" {
                        startedByDoomed.value.withLock { $0 += 1 }
                        doomedStarted.changed()
                        await release.wait { released.value.withLock { $0 } }
                        return .failed(TransferError(.linkLost, step: .transfer, "the worker died"))
                    }
                    completed.value.withLock { $0[device.address, default: []].append(worker) }
                    var report = UpdateReport(
                        operation: "flash", device: device.address, bytes: 3, streamBytes: 3, compressed: false, packetSize: 244,
                        transferSeconds: 0.15, totalSeconds: 0.15, statistics: TransferStatistics(), stepSeconds: [:],
                        tuning: TransferTuning())
                    report.versionAfter = "2.0.0"
                    return .updated(report)
                }
            }
            // A lease of 60 s on the stepped clock, 60 rounds of a second: the doomed worker's run out
            // there, while the database's own time, which a loaded machine also moves, never gets near it.
            let options = { (name: String) in CampaignWorkerOptions(adapters: ["a0"], connectionsPerAdapter: 2, name: name, poll: .seconds(1)) }
            let survivor = CampaignWorker(store: store, campaign: info, options: options("survivor"), clock: clock, logger: logger, update: update("survivor"))
            let doomed = CampaignWorker(store: store, campaign: info, options: options("doomed"), clock: clock, logger: logger, update: update("doomed"))
            let doomedRun = Task { try await doomed.run() }
            // The doomed worker dies (its task cancelled) while it holds devices mid-update.
            await doomedStarted.wait { startedByDoomed.value.withLock { $0 } >= 2 }
            doomedRun.cancel()
            let stepping = Task {
                while !Task.isCancelled { await clock.step() }
            }
            defer { stepping.cancel() }
            let summary = try await survivor.run()
            stepping.cancel()
            released.value.withLock { $0 = true }
            release.changed()
            _ = try? await doomedRun.value
            let status = try #require(summary.status)
            #expect(status.count(.updated) + status.count(.skipped) == 16 && status.isFinished, "\(status.sentence)")
            let counts = completed.value.withLock { $0 }
            #expect(counts.count == 16 && counts.values.allSatisfy { $0.count == 1 }, "each device updated exactly once: \(counts)")
            let tries = try await store.tries(info.name)
            let lost = tries.filter { $0.outcome == "lease-expired" }
            #expect(!lost.isEmpty && lost.allSatisfy { $0.worker == "doomed" }, "the dead worker's tries ran out: \(tries)")
            for record in lost {
                let next = try #require(tries.first { $0.device == record.device && $0.tryNumber == record.tryNumber + 1 })
                #expect(next.worker == "survivor" && ["updated", "skipped"].contains(next.outcome))
                #expect(next.startedAt >= record.endedAt!, "taken over only after the lease ran out")
            }
        }
    }
}

extension CampaignWorkerTests {
    /// A worker limits transfers per adapter apart from its connections, as `fleet flash` does: three
    /// devices connected at once, one transferring at a time, the others reported queued.
    @Test(.timeLimit(.minutes(2))) func aWorkerTransfersOnlyAsManyAtOnceAsItsTransferPlaces() async throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let logger = Logger(label: "bleota.worker.test")
        try await CampaignStore.withStore(try CampaignAddress(parsing: server.url), logger: logger) { store in
            let devices = (1...6).map { FleetDevice(address: "udp://127.0.0.1:\(31_000 + $0)") }
            let info = try await store.create(CampaignDefinition(name: "gated", imageName: "app.bin", image: [7], devices: devices))
            let transferring = Shared((now: 0, most: 0, connected: 0, mostConnected: 0))
            let queued = Shared(0)
            // What the transfers wait for: two devices queued behind the first, the last left alone.
            let happened = AsyncCondition()
            let clock = SteppedClock { moved in store.advanceClock(by: Double(moved / .milliseconds(1)) / 1000) }
            // Each device's link, in the order their transfers began.
            let links = Shared<[(device: String, link: RecordingIntervalLink)]>([])
            let options = CampaignWorkerOptions(
                adapters: ["a0"], connectionsPerAdapter: 3, transfersPerAdapter: 1, name: "w",
                poll: .milliseconds(100))
            let worker = CampaignWorker(
                store: store, campaign: info, options: options, clock: clock, logger: logger,
                onEvent: { event in
                    if case .queued = event {
                        queued.value.withLock { $0 += 1 }
                        happened.changed()
                    }
                }
            ) { device, _, turn, _ in
                transferring.value.withLock {
                    $0.connected += 1
                    $0.mostConnected = max($0.mostConnected, $0.connected)
                }
                defer { transferring.value.withLock { $0.connected -= 1 } }
                guard let turn else { return .failed(TransferError(.badInput, step: .load, "no transfer turn given")) }
                // The gate's own bound on a wait, in real time: the place comes by release, never by it.
                await turn.wait(clock: SystemClock())
                let link = RecordingIntervalLink { happened.changed() }
                turn.adopt(link)
                let number = links.value.withLock {
                    $0.append((device.address, link))
                    return $0.count
                }
                transferring.value.withLock {
                    $0.now += 1
                    $0.most = max($0.most, $0.now)
                }
                // The first transfer lasts until two more devices wait for the adapter's transfer place
                // (the worker claims them while it runs): a worker that never queues them does not end.
                if number == 1 { await happened.wait { queued.value.withLock { $0 } >= 2 } }
                // The last transfer lasts until the worker has found nothing more to claim and left it
                // the adapter (the shortest interval asked of its link).
                if number == devices.count { await happened.wait { link.asked.contains(7.5) } }
                transferring.value.withLock { $0.now -= 1 }
                turn.release()
                var report = UpdateReport(
                    operation: "flash", device: device.address, bytes: 1, streamBytes: 1, compressed: false, packetSize: 244,
                    transferSeconds: 0.06, totalSeconds: 0.06, statistics: TransferStatistics(), stepSeconds: [:],
                    tuning: TransferTuning())
                report.versionAfter = "2.0.0"
                return .updated(report)
            }
            let stepping = Task {
                while !Task.isCancelled { await clock.step() }
            }
            defer { stepping.cancel() }
            let summary = try await worker.run()
            stepping.cancel()
            #expect(summary.updated == 6)
            let seen = transferring.value.withLock { $0 }
            #expect(seen.most == 1 && seen.mostConnected == 3, "\(seen)")
            #expect(queued.value.withLock { $0 } >= 2)
            // The first transfer had others connected behind it: its link was left alone. The last had
            // the adapter to itself with nothing left to claim: 7.5 ms events, and 15 ms again at its end.
            let order = links.value.withLock { $0 }
            #expect(order.count == 6)
            #expect(order.first?.link.asked == [], "\(order.map { "\($0.device): \($0.link.asked)" })")
            #expect(order.last?.link.asked == [7.5, 15], "\(order.map { "\($0.device): \($0.link.asked)" })")
        }
    }
}

extension CampaignWorkerTests {
    /// How many devices a worker with limited transfer places asks for, as a table: its unpromised
    /// places first, less what it holds unstarted; spare connections only where they are given.
    @Test func aWorkersClaimIsItsUnpromisedPlacesThenItsSpareConnections() {
        let rows: [(room: Int, unpromised: Int, waiting: Int, spare: Int, claim: Int)] = [
            (room: 75, unpromised: 50, waiting: 0, spare: 0, claim: 50),  // a stage opens: one device a place
            (room: 25, unpromised: 0, waiting: 0, spare: 25, claim: 25),  // every place transfers: ready the next
            (room: 25, unpromised: 0, waiting: 0, spare: 0, claim: 0),  // devices are scarce: none for spares
            (room: 10, unpromised: 4, waiting: 1, spare: 0, claim: 3),  // one claimed device is still to start
            (room: 3, unpromised: 4, waiting: 0, spare: 6, claim: 3),  // never beyond the free connections
            (room: 0, unpromised: 2, waiting: 0, spare: 0, claim: 0),
            (room: 5, unpromised: 0, waiting: 2, spare: 0, claim: 0),
        ]
        for row in rows {
            #expect(
                CampaignWorker.claimSize(room: row.room, unpromised: row.unpromised, waiting: row.waiting, spare: row.spare) == row.claim,
                "\(row)")
        }
    }

    /// Two workers and a stage smaller than their connections: each claims one device for its one
    /// transfer place, so both places transfer, instead of the first to look taking both devices and
    /// transferring them one after the other.
    @Test(.timeLimit(.minutes(2))) func aScarceStageIsSharedOutOverTheWorkersTransferPlaces() async throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let logger = Logger(label: "bleota.worker.test")
        try await CampaignStore.withStore(try CampaignAddress(parsing: server.url), logger: logger) { store in
            let devices = (1...2).map { FleetDevice(address: "udp://127.0.0.1:\(32_000 + $0)") }
            let info = try await store.create(CampaignDefinition(name: "scarce", imageName: "app.bin", image: [7], devices: devices))
            let clock = SteppedClock { moved in store.advanceClock(by: Double(moved / .milliseconds(1)) / 1000) }
            let started = Shared<[String: [String]]>([:])
            let released = Shared(false)
            let happened = AsyncCondition()
            func worker(_ name: String) -> CampaignWorker {
                let options = CampaignWorkerOptions(
                    adapters: ["a0"], connectionsPerAdapter: 3, transfersPerAdapter: 1, name: name, poll: .milliseconds(100))
                return CampaignWorker(store: store, campaign: info, options: options, clock: clock, logger: logger) { device, _, turn, _ in
                    started.value.withLock { $0[name, default: []].append(device.address) }
                    happened.changed()
                    guard let turn else { return .failed(TransferError(.badInput, step: .load, "no transfer turn given")) }
                    await turn.wait(clock: SystemClock())
                    await happened.wait { released.value.withLock { $0 } }
                    turn.release()
                    var report = UpdateReport(
                        operation: "flash", device: device.address, bytes: 1, streamBytes: 1, compressed: false, packetSize: 244,
                        transferSeconds: 0.06, totalSeconds: 0.06, statistics: TransferStatistics(), stepSeconds: [:],
                        tuning: TransferTuning())
                    report.versionAfter = "2.0.0"
                    return .updated(report)
                }
            }
            // The clock stands still until both have claimed: neither looks twice before the other looks once.
            let first = Task { try await worker("w1").run() }
            let second = Task { try await worker("w2").run() }
            await happened.wait { started.value.withLock { $0.values.reduce(0) { $0 + $1.count } } == 2 }
            let shares = started.value.withLock { $0 }
            #expect(shares["w1"]?.count == 1 && shares["w2"]?.count == 1, "each worker's one place takes one device: \(shares)")
            let stepping = Task {
                while !Task.isCancelled { await clock.step() }
            }
            defer { stepping.cancel() }
            released.value.withLock { $0 = true }
            happened.changed()
            let summaries = [try await first.value, try await second.value]
            #expect(summaries.map(\.updated) == [1, 1])
        }
    }
}

/// A value several tasks change, behind a lock.
final class Shared<Value: Sendable>: Sendable {
    let value: Mutex<Value>
    init(_ initial: Value) { value = Mutex(initial) }
}
#endif
