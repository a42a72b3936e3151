// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import BleotaEngine
import BleotaFleet
import BleotaTestSupport
import Foundation
import PostgresNIO

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

@testable import BleotaCampaign

/// Rollouts against a real PostgreSQL server: stages that open in turn, after a wait or by an
/// operator, and failures that halt claims on every worker until a resume or an abort.
@Suite(.serialized) struct CampaignRolloutStoreTests {
    let campaigns = CampaignStoreTests()

    static func stages(_ texts: String...) throws -> [CampaignRollout.Stage] {
        try texts.map { (text) throws(CampaignError) in try CampaignRollout.Stage(parsing: text) }
    }

    static func failed(_ deviceState: String? = "old-image", step: String = "transfer") -> TryEnding {
        .failed(error: "link lost", step: step, deviceState: deviceState, seconds: 1, bytes: 0, resends: 0, retryAfter: nil)
    }

    /// Claims what `worker` may take now, by address.
    static func claimable(_ store: CampaignStore, _ info: CampaignInfo, worker: String = "w1", limit: Int = 100) async throws -> [ClaimedDevice] {
        try await store.claim(info, worker: worker, limit: limit, adapters: [])
    }

    /// A database of schema version 1 (bleota 0.1's), holding a campaign under way, migrated to
    /// rollouts: its campaign is one stage with no halt rule, and its devices are claimed as before.
    @Test func aCampaignMadeBeforeRolloutsGoesOnAfterTheMigration() async throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let address = try CampaignAddress(parsing: server.url)
        // Version 1 as bleota 0.1 left it, written by hand (withStore would migrate to the latest).
        let connection = try await PostgresConnection.connect(
            configuration: .init(unixSocketPath: "\(server.directory)/.s.PGSQL.\(server.port)", username: address.user, password: nil, database: address.database),
            id: 1, logger: CampaignStoreTests.logger)
        let first = try #require(CampaignSchema.migrations.first { $0.version == 1 })
        try await connection.query("CREATE SCHEMA bleota", logger: CampaignStoreTests.logger)
        try await connection.query(
            "CREATE TABLE bleota.schema_migrations (version integer PRIMARY KEY, description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
            logger: CampaignStoreTests.logger)
        for statement in first.statements { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: CampaignStoreTests.logger) }
        try await connection.query("INSERT INTO bleota.schema_migrations (version, description) VALUES (1, 'v1')", logger: CampaignStoreTests.logger)
        try await connection.query(
            "INSERT INTO bleota.images (sha256, size, bytes) VALUES (decode(repeat('ab', 32), 'hex'), 1, '\\x01')", logger: CampaignStoreTests.logger)
        try await connection.query(
            """
            INSERT INTO bleota.campaigns (name, image_sha256, image_name, attempts, backoff_seconds, lease_seconds)
            VALUES ('old', decode(repeat('ab', 32), 'hex'), 'a.bin', 3, 0, 60)
            """, logger: CampaignStoreTests.logger)
        try await connection.query(
            """
            INSERT INTO bleota.devices (campaign, address, position, label, state) VALUES
                ('old', 'udp://127.0.0.1:1', 0, 'd1', 'updated'), ('old', 'udp://127.0.0.1:2', 1, 'd2', 'pending')
            """, logger: CampaignStoreTests.logger)
        try await connection.close()
        try await CampaignStore.withStore(address, logger: CampaignStoreTests.logger) { store in
            #expect(try await store.schemaVersion() == CampaignSchema.latestVersion)
            let info = try await store.info("old")
            #expect(info.rollout == CampaignRollout() && info.progress.openStage == 0 && !info.progress.isHalted)
            let claimed = try await store.claim(info, worker: "w1", limit: 5, adapters: [])
            #expect(claimed.map(\.device.address) == ["udp://127.0.0.1:2"])
            #expect(try await store.status("old").stages.map(\.devices) == [2])
        }
    }

    @Test func aLaterStagesDevicesAreNotClaimedBeforeTheStagesBeforeItFinish() async throws {
        let rollout = CampaignRollout(stages: try Self.stages("canary=2", "50%", "100%"), seed: 7)
        try await campaigns.withCampaign(10, rollout: rollout) { store, info, _ in
            let stageOf = rollout.stageOfEachDevice(total: 10)
            let byStage = { (stage: Int) in Set(stageOf.indices.filter { stageOf[$0] == stage }.map { "udp://127.0.0.1:\(20_001 + $0)" }) }
            let canary = try await Self.claimable(store, info)
            #expect(Set(canary.map(\.device.address)) == byStage(0), "only the canary is offered")
            #expect(try await Self.claimable(store, info, worker: "w2").isEmpty, "the next stage waits for the canary")
            #expect(try await store.record(info, worker: "w1", claimed: canary[0], ending: CampaignStoreTests.updated()))
            #expect(try await Self.claimable(store, info, worker: "w2").isEmpty, "one canary device is still running")
            #expect(try await store.record(info, worker: "w1", claimed: canary[1], ending: .alreadyCurrent(version: "2.0.0", seconds: 0)))
            let second = try await Self.claimable(store, info, worker: "w2")
            #expect(Set(second.map(\.device.address)) == byStage(1), "50 % of the list, less the canary")
            let status = try await store.status(info.name)
            #expect(status.campaign.progress.openStage == 1)
            #expect(status.stages.map(\.devices) == [2, 3, 5] && status.stages.map(\.open) == [true, true, false])
            #expect(status.rolloutSentence == "stage 2 of 3 (50%): 0 of 3 finished, 0 failed; 100% opens when this stage finishes")
            #expect(Set(status.devices.filter { $0.stage == 2 }.map(\.device)) == byStage(2))
        }
    }

    @Test func aStageWaitIsCountedFromTheLastDeviceOfTheStagesBefore() async throws {
        let rollout = CampaignRollout(stages: try Self.stages("first=1", "100%"), stageWait: .seconds(3600), seed: 3)
        try await campaigns.withCampaign(4, rollout: rollout) { store, info, _ in
            let first = try await Self.claimable(store, info)
            #expect(first.count == 1)
            store.advanceClock(by: 600)
            #expect(try await store.record(info, worker: "w1", claimed: first[0], ending: CampaignStoreTests.updated()))
            store.advanceClock(by: 3599)
            #expect(try await Self.claimable(store, info).isEmpty, "3 599 s of a 3 600 s wait after the stage finished")
            store.advanceClock(by: 2)
            #expect(try await Self.claimable(store, info).count == 3)
        }
    }

    @Test func stagesLeftToAnOperatorOpenOnlyByAdvanceAndTwoAdvancingAtOnceOpenOne() async throws {
        let rollout = CampaignRollout(stages: try Self.stages("a=1", "b=50%", "100%"), stageWait: .operatorAdvance, seed: 11)
        try await campaigns.withCampaign(6, rollout: rollout) { store, info, _ in
            let first = try await Self.claimable(store, info)
            #expect(first.count == 1)
            #expect(try await store.record(info, worker: "w1", claimed: first[0], ending: CampaignStoreTests.updated()))
            store.advanceClock(by: 86_400)
            #expect(try await Self.claimable(store, info).isEmpty, "a day later the next stage still waits for an operator")
            #expect(try await store.status(info.name).rolloutSentence == "stage 1 of 3 (a): 1 of 1 finished, 0 failed; b waits for bleota fleet campaign advance")
            // Two operators who both saw stage 1 advance at once: one opens stage 2, the other is told.
            let outcomes = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        do { return try await store.advance(info.name, from: 0).sentence } catch { return "\(error)" }
                    }
                }
                return try await group.reduce(into: [String]()) { $0.append($1) }.sorted()
            }
            #expect(
                outcomes == [
                    "campaign 'test' is at stage 2 of 3 now, not 1: another operator or its stage wait opened it; nothing changed",
                    "campaign 'test': stage 2 of 3 (b=50%) is open",
                ])
            #expect(try await Self.claimable(store, info).count == 2, "stage b: half the list, less stage a")
            // Advancing while stage b still runs is the operator's call.
            #expect(try await store.advance(info.name).sentence == "campaign 'test': stage 3 of 3 (100%) is open")
            await #expect(throws: CampaignError.notNow("campaign 'test' has every stage open already (3 of 3)")) {
                _ = try await store.advance(info.name)
            }
            #expect(try await Self.claimable(store, info).count == 3)
        }
    }

    @Test func failuresReachingTheRuleHaltEveryWorkerUntilAResumeAndAnAbortEndsIt() async throws {
        let rollout = CampaignRollout(halt: CampaignRollout.HaltRule(failedShare: 0.2, after: 3))
        try await campaigns.withCampaign(10, rollout: rollout) { store, info, _ in
            let claimed = try await Self.claimable(store, info, limit: 5)
            #expect(try await store.record(info, worker: "w1", claimed: claimed[0], ending: Self.failed()))
            #expect(try await store.record(info, worker: "w1", claimed: claimed[1], ending: CampaignStoreTests.updated()))
            #expect(try await store.status(info.name).campaign.progress.haltedAt == nil, "1 of 2 failed, but --halt-after is 3")
            #expect(try await store.record(info, worker: "w1", claimed: claimed[2], ending: CampaignStoreTests.updated()))
            let halted = try await store.status(info.name)
            #expect(halted.campaign.progress.haltReason == "1 of 3 finished devices failed (33.3 %), reaching --halt-when-failed 20% after at least 3")
            #expect(halted.rolloutSentence.hasPrefix("halted at "))
            #expect(try await Self.claimable(store, info, worker: "w2").isEmpty, "no worker claims from a halted campaign")
            #expect(try await store.unfinished(info.name).halted == halted.campaign.progress.haltReason)
            // The updates under way finish and are recorded.
            #expect(try await store.record(info, worker: "w1", claimed: claimed[3], ending: CampaignStoreTests.updated()))
            let resumed = try await store.resume(info.name)
            #expect(resumed.sentence == "campaign 'test' resumed (it had halted: \(halted.campaign.progress.haltReason!)); failures count afresh from now")
            await #expect(throws: CampaignError.notNow("campaign 'test' is not halted: nothing to resume")) { _ = try await store.resume(info.name) }
            store.advanceClock(by: 1)
            // The failure before the resume no longer counts: two successes since, then claims go on.
            #expect(try await store.record(info, worker: "w1", claimed: claimed[4], ending: CampaignStoreTests.updated()))
            let more = try await Self.claimable(store, info, worker: "w2")
            #expect(more.count == 5)
            _ = try await store.abort(info.name)
            for device in more.prefix(2) {
                #expect(try await store.record(info, worker: "w2", claimed: device, ending: CampaignStoreTests.updated()))
            }
            for device in more.dropFirst(2) {
                #expect(
                    try await store.record(
                        info, worker: "w2", claimed: device, ending: .failed(error: "x", step: "transfer", deviceState: nil, seconds: 0, bytes: 0, resends: 0, retryAfter: 5)))
            }
            #expect(try await Self.claimable(store, info, worker: "w3").isEmpty, "nothing is claimed from an aborted campaign")
            let left = try await store.unfinished(info.name)
            #expect(left.aborted && left.pending == 3 && left.running == 0)
            await #expect(throws: CampaignError.notNow("campaign 'test' was aborted already")) { _ = try await store.abort(info.name) }
            await #expect(throws: CampaignError.notNow("campaign 'test' was aborted: it cannot be resumed; create a new campaign")) {
                _ = try await store.resume(info.name)
            }
        }
    }

    @Test func aRateHoldsForEveryWorkerTogetherOverThePeriodJustPast() async throws {
        let rollout = CampaignRollout(rate: CampaignRollout.ClaimRate(count: 3, periodSeconds: 60))
        try await campaigns.withCampaign(10, rollout: rollout) { store, info, _ in
            let first = try await Self.claimable(store, info, worker: "w1", limit: 2)
            let second = try await Self.claimable(store, info, worker: "w2", limit: 5)
            #expect(first.count == 2 && second.count == 1, "3 a minute, whoever claims")
            store.advanceClock(by: 30)
            #expect(try await Self.claimable(store, info, worker: "w3").isEmpty, "30 s later the minute still holds 3 claims")
            store.advanceClock(by: 31)
            #expect(try await Self.claimable(store, info, worker: "w3").count == 3)
            // Claims racing for the last places of a minute never take more than the rate.
            store.advanceClock(by: 61)
            let racing = try await withThrowingTaskGroup(of: Int.self) { group in
                for worker in 1...4 { group.addTask { try await Self.claimable(store, info, worker: "r\(worker)", limit: 2).count } }
                return try await group.reduce(0, +)
            }
            #expect(racing == 3)
            #expect(try await store.status(info.name).rolloutSentence == "at most 3/min")
        }
    }

    @Test func devicesAreClaimedOnlyInsideTheWindowOfTheCampaignsTimeZone() async throws {
        // A window from an hour to two hours from now, in UTC: the server's clock is this machine's.
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let now = calendar.dateComponents([.hour, .minute], from: Date())
        let minute = now.hour! * 60 + now.minute!
        let window = CampaignRollout.ClaimWindow(start: (minute + 60) % 1440, end: (minute + 120) % 1440, zone: "UTC")
        try await campaigns.withCampaign(3, rollout: CampaignRollout(window: window)) { store, info, _ async throws in
            #expect(try await Self.claimable(store, info).isEmpty, "an hour before the window opens")
            store.advanceClock(by: 3_660)
            #expect(try await Self.claimable(store, info, limit: 1).count == 1, "inside it")
            store.advanceClock(by: 3_600)
            #expect(try await Self.claimable(store, info).isEmpty, "after it closed")
            #expect(try await store.status(info.name).rolloutSentence == "claims only between \(window.text)")
        }
    }

    /// A worker whose devices fail: the halt stops its claims while it stays up, and an abort ends it.
    @Test(.timeLimit(.minutes(2))) func aHaltedCampaignsWorkerClaimsNothingMoreAndAnAbortEndsIt() async throws {
        let rollout = CampaignRollout(halt: CampaignRollout.HaltRule(failedShare: 0.5, after: 2))
        try await campaigns.withCampaign(6, attempts: 1, rollout: rollout) { store, info, _ in
            let clock = SteppedClock { moved in store.advanceClock(by: Double(moved / .milliseconds(1)) / 1000) }
            let started = Shared(0)
            let finished = Shared(0)
            let happened = AsyncCondition()
            let options = CampaignWorkerOptions(adapters: ["a0"], connectionsPerAdapter: 1, name: "w", poll: .milliseconds(100))
            let worker = CampaignWorker(
                store: store, campaign: info, options: options, clock: clock, logger: CampaignStoreTests.logger,
                onEvent: { event in
                    switch event {
                    case .started: started.value.withLock { $0 += 1 }
                    case .finished: finished.value.withLock { $0 += 1 }
                    default: return
                    }
                    happened.changed()
                }
            ) { _, _, _, _ in .failed(TransferError(.linkLost, step: .connect, "no answer")) }
            let stepping = Task {
                while !Task.isCancelled { await clock.step() }
            }
            defer { stepping.cancel() }
            let running = Task { try await worker.run() }
            await happened.wait { finished.value.withLock { $0 } >= 2 }
            // The second failure halted the campaign in the transaction that recorded it.
            let halted = try await store.status(info.name)
            #expect(halted.campaign.progress.haltReason == "2 of 2 finished devices failed (100 %), reaching --halt-when-failed 50% after at least 2")
            // Twenty more polls: the worker stays up and claims nothing.
            let before = clock.now
            while clock.now - before < .seconds(2) { await Task.yield() }
            #expect(started.value.withLock { $0 } == 2, "no device is claimed from a halted campaign")
            _ = try await store.abort(info.name)
            let summary = try await running.value
            stepping.cancel()
            #expect(summary.failed == 2 && summary.updated == 0)
            let status = try #require(summary.status)
            #expect(status.campaign.progress.isAborted)
            #expect(status.devices.filter { $0.state == .pending && $0.tries == 0 }.count == 4)
        }
    }

    /// The value of the sample of `name` whose labels include every one of `labels`, in a scrape.
    static func sample(_ text: String, _ name: String, _ labels: [String: String]) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(name + "{") {
            guard let close = line.lastIndex(of: "}") else { continue }
            let inside = line[line.index(line.startIndex, offsetBy: name.count + 1)..<close]
            let pairs = Dictionary(
                inside.split(separator: ",").map { pair in
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    return (String(parts[0]), String(parts[1]).trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
                }, uniquingKeysWith: { first, _ in first })
            if labels.allSatisfy({ pairs[$0.key] == $0.value }) { return Double(line[line.index(after: close)...].trimmingCharacters(in: .whitespaces)) }
        }
        return nil
    }

    /// A worker's counters, scraped over HTTP by Foundation's URLSession (libcurl) as Prometheus
    /// would: devices by outcome and stage, bytes, in flight; another path and method refused.
    @Test(.timeLimit(.minutes(2))) func aWorkersMetricsAreScrapedOverHTTP() async throws {
        let rollout = CampaignRollout(stages: try Self.stages("canary=1", "100%"), seed: 5)
        try await campaigns.withCampaign(4, attempts: 1, rollout: rollout) { store, info, _ in
            let clock = SteppedClock { moved in store.advanceClock(by: Double(moved / .milliseconds(1)) / 1000) }
            let metrics = CampaignMetrics(campaign: info.name, worker: "w")
            let endpoint = try MetricsEndpoint(host: "127.0.0.1", port: 0, metrics: metrics, logger: CampaignStoreTests.logger)
            let serving = Task { await endpoint.run() }
            defer {
                endpoint.stop()
                serving.cancel()
            }
            let count = Shared(0)
            let options = CampaignWorkerOptions(adapters: ["a0"], connectionsPerAdapter: 2, name: "w", poll: .milliseconds(100))
            let worker = CampaignWorker(
                store: store, campaign: info, options: options, clock: clock, logger: CampaignStoreTests.logger, metrics: metrics
            ) { device, _, _, _ in
                // Every other device fails cleanly; the others take 1 000 bytes.
                let number = count.value.withLock {
                    $0 += 1
                    return $0
                }
                if number.isMultiple(of: 2) { return .failed(TransferError(.linkLost, step: .connect, "no answer")) }
                var report = UpdateReport(
                    operation: "flash", device: device.address, bytes: 1000, streamBytes: 1000, compressed: false, packetSize: 244,
                    transferSeconds: 0.1, totalSeconds: 0.1, statistics: TransferStatistics(), stepSeconds: [:], tuning: TransferTuning())
                report.versionAfter = "2.0.0"
                return .updated(report)
            }
            let stepping = Task {
                while !Task.isCancelled { await clock.step() }
            }
            defer { stepping.cancel() }
            let summary = try await worker.run()
            stepping.cancel()
            #expect(summary.updated == 2 && summary.failed == 2)
            let base = "http://127.0.0.1:\(endpoint.port)"
            let (body, response) = try await URLSession.shared.data(from: URL(string: "\(base)/metrics")!)
            let http = try #require(response as? HTTPURLResponse)
            #expect(http.statusCode == 200)
            #expect(http.value(forHTTPHeaderField: "Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
            let text = String(decoding: body, as: UTF8.self)
            let stageOf = rollout.stageOfEachDevice(total: 4)
            let status = try await store.status(info.name)
            // What the database recorded, stage by stage, is what the worker counted.
            for stage in 0..<2 {
                let mine = status.devices.filter { $0.stage == stage }
                for (outcome, state) in [("updated", CampaignDeviceState.State.updated), ("failed", .failed)] {
                    let expected = Double(mine.count { $0.state == state })
                    let counted = Self.sample(text, "bleota_campaign_devices_total", ["stage": "\(stage + 1)", "outcome": outcome, "worker": "w"]) ?? 0
                    #expect(counted == expected, "stage \(stage + 1) \(outcome): \(text)")
                }
            }
            #expect(stageOf.count(where: { $0 == 0 }) == 1)
            let bytes = (1...2).compactMap { Self.sample(text, "bleota_campaign_bytes_sent_total", ["stage": "\($0)"]) }.reduce(0, +)
            #expect(bytes == 2000, "\(text)")
            #expect(Self.sample(text, "bleota_campaign_devices_in_flight", ["campaign": "test"]) == 0)
            #expect((Self.sample(text, "bleota_campaign_goodput_bytes_per_second", ["worker": "w"]) ?? 0) > 0)
            #expect(text.contains("# TYPE bleota_campaign_devices_total counter"), "\(text)")
            let (_, missing) = try await URLSession.shared.data(from: URL(string: "\(base)/other")!)
            #expect((missing as? HTTPURLResponse)?.statusCode == 404)
            var post = URLRequest(url: URL(string: "\(base)/metrics")!)
            post.httpMethod = "POST"
            let (_, refused) = try await URLSession.shared.data(for: post)
            #expect((refused as? HTTPURLResponse)?.statusCode == 405)
        }
    }

    @Test func aRuleCountsCleanAndLateFailuresApart() async throws {
        let rollout = CampaignRollout(halt: CampaignRollout.HaltRule(failedShare: 0.5, counting: .late))
        try await campaigns.withCampaign(6, attempts: 1, rollout: rollout) { store, info, _ in
            let claimed = try await Self.claimable(store, info, limit: 3)
            #expect(try await store.record(info, worker: "w1", claimed: claimed[0], ending: Self.failed("old-image")))
            #expect(try await store.record(info, worker: "w1", claimed: claimed[1], ending: Self.failed(nil, step: "connect")))
            #expect(try await store.status(info.name).campaign.progress.haltedAt == nil, "two clean failures: the device was left as it was")
            #expect(try await store.record(info, worker: "w1", claimed: claimed[2], ending: Self.failed("unknown", step: "confirm")))
            #expect(try await store.status(info.name).campaign.progress.haltReason == nil, "1 late of 3 is below 50 %")
            // A worker that dies holding a device on its last try: unknown, so late.
            let last = try await Self.claimable(store, info, limit: 1)
            #expect(last.count == 1)
            store.advanceClock(by: 61)
            #expect(try await Self.claimable(store, info, worker: "w2").isEmpty, "the expired lease halts the campaign in the same claim")
            let status = try await store.status(info.name)
            #expect(status.devices.filter { $0.state == .failed }.map(\.failedCleanly) == [true, true, false, false])
            #expect(status.campaign.progress.haltReason == "2 of 4 finished devices failed late or unknown (50 %), reaching --halt-when-failed 50%")
        }
    }
}
#endif
