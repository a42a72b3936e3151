// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import BleotaEngine
import BleotaFleet
import Crypto
import Foundation
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// A campaign database: the one place workers on many hosts agree on which
/// device is whose.
///
/// Every decision about a device is a row update in a transaction, so the
/// database, not the workers, keeps the rules: a worker claims pending devices
/// with `SELECT … FOR UPDATE SKIP LOCKED` (two workers never claim the same row;
/// neither waits for the other), holds each under a lease it renews, and records
/// a try's end only while it still holds that lease. A lease that expires (its
/// worker died, hung or lost the network) puts the device back for another
/// worker, counting the lost try. Times are the server's `now()`, so the hosts'
/// clocks never matter.
public final class CampaignStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    public let address: CampaignAddress

    /// How far the store's clock runs ahead of the server's `now()`, in seconds: zero in use.
    /// Leases, back-offs and try times are all read on this clock, so the tests move it
    /// forward (``advanceClock(by:)``) instead of sleeping through a lease.
    let clockOffset = Mutex<Double>(0)
    /// The offset now, which every query adds to `now()`.
    var shift: Double { clockOffset.withLock { $0 } }

    /// Moves the store's clock forward: what tests do instead of waiting for leases to run out.
    func advanceClock(by seconds: Double) { clockOffset.withLock { $0 += seconds } }

    /// While set, every operation fails as a store cut off from its server does (no answer):
    /// how tests cut one worker off the network while the others still reach the database.
    let cutOff = Mutex(false)

    /// What postgres-nio itself logs (its queries, its pool): errors only, unless the user asked
    /// for debug or trace. (Its one warning in normal use is a race of our own making: the first
    /// query may ask for a connection a moment before `run()` has started; it waits and succeeds.)
    let databaseLogger: Logger

    /// How long one operation may take (``defaultOperationTimeout`` in use).
    let operationTimeout: Duration

    init(client: PostgresClient, address: CampaignAddress, logger: Logger, operationTimeout: Duration = defaultOperationTimeout) {
        self.client = client
        self.address = address
        self.logger = logger
        self.operationTimeout = operationTimeout
        databaseLogger = Self.quieter(logger)
    }

    static func quieter(_ logger: Logger) -> Logger {
        var quiet = logger
        if quiet.logLevel > .debug { quiet.logLevel = max(quiet.logLevel, .error) }
        return quiet
    }

    /// Opens the database at `address`, applies missing migrations, runs `body`, and closes it.
    /// `operationTimeout`: how long one operation may take before it fails (a query in flight
    /// when the server went away was seen never to end).
    public static func withStore<Result: Sendable>(
        _ address: CampaignAddress, logger: Logger, operationTimeout: Duration = defaultOperationTimeout,
        _ body: @Sendable (CampaignStore) async throws -> Result
    ) async throws -> Result {
        var configuration: PostgresClient.Configuration
        switch address.endpoint {
        case .unixSocket(let path):
            configuration = .init(unixSocketPath: path, username: address.user, password: address.password, database: address.database)
        case .tcp(let host, let port):
            let tls: PostgresClient.Configuration.TLS =
                switch address.tls {
                case .disable: .disable
                case .prefer: .prefer(.makeClientConfiguration())
                case .require: .require(.makeClientConfiguration())
                }
            configuration = .init(host: host, port: port, username: address.user, password: address.password, database: address.database, tls: tls)
        }
        // One connection first, alone: the pool retries a server it cannot reach for ever,
        // where a single connection says at once why (no socket, refused, bad password).
        try await probe(address, logger: quieter(logger))
        configuration.options.maximumConnections = 4
        configuration.options.connectionIdleTimeout = .seconds(120)
        let client = PostgresClient(configuration: configuration, backgroundLogger: Self.quieter(logger))
        let store = CampaignStore(client: client, address: address, logger: logger, operationTimeout: operationTimeout)
        return try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            try await store.migrate()
            let result = try await body(store)
            return result
        }
    }

    /// Connects once and closes; the failure, if any, as one line.
    static func probe(_ address: CampaignAddress, logger: Logger) async throws(CampaignError) {
        if case .unixSocket(let path) = address.endpoint, !FileManager.default.fileExists(atPath: path) {
            throw .database("connecting to \(address): no server socket at \(path): is the server running, and are host= and port= its socket directory and port?")
        }
        do {
            let configuration: PostgresConnection.Configuration
            switch address.endpoint {
            case .unixSocket(let path):
                configuration = .init(unixSocketPath: path, username: address.user, password: address.password, database: address.database)
            case .tcp(let host, let port):
                let tls: PostgresConnection.Configuration.TLS =
                    switch address.tls {
                    case .disable: .disable
                    case .prefer: .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
                    case .require: .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
                    }
                configuration = .init(host: host, port: port, username: address.user, password: address.password, database: address.database, tls: tls)
            }
            let connection = try await withOperationTimeout(.seconds(15)) {
                try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
            }
            try await connection.close()
        } catch let error as CampaignError {
            throw .database("connecting to \(address): \(error.description)")
        } catch {
            throw .database("connecting to \(address): \(describe(error))")
        }
    }

    /// How long one database operation may take before the worker gives up on it: a server
    /// that stops answering (a cut network), or one restarted under a query in flight (seen with
    /// an immediate shutdown), otherwise holds the query for ever.
    public static let defaultOperationTimeout = Duration.seconds(30)

    // MARK: Schema

    /// The schema version the database is at (0: no bleota schema yet).
    public func schemaVersion() async throws(CampaignError) -> Int {
        try await run("reading the schema version") { [self] in
            let exists = try await client.query("SELECT to_regclass('bleota.schema_migrations') IS NOT NULL", logger: databaseLogger)
            for try await present in exists.decode(Bool.self) where !present { return 0 }
            let rows = try await client.query("SELECT coalesce(max(version), 0) FROM bleota.schema_migrations", logger: databaseLogger)
            for try await version in rows.decode(Int.self) { return version }
            return 0
        }
    }

    /// Applies the migrations the database lacks, in order, in one transaction; returns the version reached.
    @discardableResult
    public func migrate() async throws(CampaignError) -> Int {
        try await run("migrating the campaign schema") { [self] in
            try await client.withTransaction(logger: databaseLogger) { connection in
                try await connection.query("SELECT pg_advisory_xact_lock(\(CampaignSchema.migrationLock))", logger: databaseLogger)
                try await connection.query("CREATE SCHEMA IF NOT EXISTS bleota", logger: databaseLogger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS bleota.schema_migrations (
                        version integer PRIMARY KEY, description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())
                    """, logger: databaseLogger)
                var current = 0
                for try await version in try await connection.query(
                    "SELECT coalesce(max(version), 0) FROM bleota.schema_migrations",
                    logger: databaseLogger
                ).decode(Int.self) {
                    current = version
                }
                guard current <= CampaignSchema.latestVersion else {
                    throw CampaignError.schemaTooNew(found: current, known: CampaignSchema.latestVersion)
                }
                for migration in CampaignSchema.migrations where migration.version > current {
                    for statement in migration.statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: databaseLogger)
                    }
                    try await connection.query(
                        "INSERT INTO bleota.schema_migrations (version, description) VALUES (\(migration.version), \(migration.description))",
                        logger: databaseLogger)
                    logger.info("campaign schema migrated to version \(migration.version): \(migration.description)")
                }
                return CampaignSchema.latestVersion
            }
        }
    }

    // MARK: Campaigns

    /// Stores the image (once per hash) and the campaign with its devices, all pending.
    public func create(_ definition: CampaignDefinition) async throws(CampaignError) -> CampaignInfo {
        let digest = Data(SHA256.hash(data: definition.image))
        let options = Self.json(definition.protocolOptions)
        let rollout = definition.rollout
        try rollout.check(deviceCount: definition.devices.count)
        let stageOf = rollout.stageOfEachDevice(total: definition.devices.count)
        let stages = Self.json(rollout.stages)
        let stageCount = rollout.effectiveStages.count
        let (waitSeconds, waitManual): (Double, Bool) =
            switch rollout.stageWait {
            case .none: (0, false)
            case .seconds(let seconds): (seconds, false)
            case .operatorAdvance: (0, true)
            }
        let seed = Int64(bitPattern: rollout.seed)
        try await run("creating campaign '\(definition.name)'") { [self] in
            try await client.withTransaction(logger: databaseLogger) { connection in
                let taken = try await connection.query("SELECT 1 FROM bleota.campaigns WHERE name = \(definition.name)", logger: databaseLogger)
                for try await _ in taken { throw CampaignError.exists(definition.name) }
                try await connection.query(
                    """
                    INSERT INTO bleota.images (sha256, size, bytes) VALUES (\(digest), \(definition.image.count), \(Data(definition.image)))
                    ON CONFLICT (sha256) DO NOTHING
                    """, logger: databaseLogger)
                try await connection.query(
                    """
                    INSERT INTO bleota.campaigns (name, image_sha256, image_name, protocol, protocol_options, version_label, force,
                                                  attempts, backoff_seconds, lease_seconds, stages, stage_count, stage_wait_seconds,
                                                  stage_wait_manual, seed, stage_opened_at, halt_failed_share, halt_after, halt_on,
                                                  rate_count, rate_period_seconds, window_start_minute, window_end_minute, window_zone,
                                                  from_versions)
                    VALUES (\(definition.name), \(digest), \(definition.imageName), \(definition.protocolName), \(options)::jsonb,
                            \(definition.versionLabel), \(definition.force), \(definition.attempts), \(definition.backoffSeconds),
                            \(definition.leaseSeconds), \(stages)::jsonb, \(stageCount), \(waitSeconds), \(waitManual), \(seed),
                            now() + make_interval(secs => \(shift)), \(rollout.halt?.failedShare), \(rollout.halt?.after ?? 1),
                            \(rollout.halt?.counting.rawValue ?? "any"), \(rollout.rate?.count), \(rollout.rate?.periodSeconds ?? 60),
                            \(rollout.window?.start), \(rollout.window?.end), \(rollout.window?.zone), \(definition.fromVersions))
                    """, logger: databaseLogger)
                for (position, device) in definition.devices.enumerated() {
                    try await connection.query(
                        """
                        INSERT INTO bleota.devices (campaign, address, position, label, adapter, protocol, options, stage, pairing)
                        VALUES (\(definition.name), \(device.address), \(position), \(device.label), \(device.adapter),
                                \(device.protocolName), \(Self.json(device.protocolOptions))::jsonb, \(stageOf[position]), \(device.pairing?.text))
                        """, logger: databaseLogger)
                }
            }
        }
        return try await info(definition.name)
    }

    /// The names of the campaigns in this database, oldest first.
    public func campaignNames() async throws(CampaignError) -> [String] {
        try await run("listing campaigns") { [self] in
            var names: [String] = []
            for try await name in try await client.query("SELECT name FROM bleota.campaigns ORDER BY created_at, name", logger: databaseLogger).decode(String.self) {
                names.append(name)
            }
            return names
        }
    }

    public func info(_ name: String) async throws(CampaignError) -> CampaignInfo {
        try await run("reading campaign '\(name)'") { [self] in
            let rows = try await client.query(
                """
                SELECT c.name, c.image_name, c.image_sha256, i.size, c.protocol, c.protocol_options::text, c.version_label, c.force,
                       c.attempts, c.backoff_seconds, c.lease_seconds, c.created_at, c.from_versions
                FROM bleota.campaigns c JOIN bleota.images i ON i.sha256 = c.image_sha256 WHERE c.name = \(name)
                """, logger: databaseLogger)
            var found: CampaignInfo?
            for try await (name, imageName, digest, size, protocolName, options, label, force, attempts, backoff, lease, created, fromVersions)
                in rows.decode((String, String, Data, Int, String?, String, String?, Bool, Int, Double, Double, Date, [String]).self)
            {
                found = CampaignInfo(
                    name: name, imageName: imageName, imageSHA256: digest.map { String(format: "%02x", $0) }.joined(),
                    imageSize: size, protocolName: protocolName, protocolOptions: Self.options(options), versionLabel: label,
                    force: force, attempts: attempts, backoffSeconds: backoff, leaseSeconds: lease, createdAt: created,
                    rollout: CampaignRollout(), progress: RolloutProgress(), fromVersions: fromVersions)
            }
            guard var info = found else { throw CampaignError.notFound(name) }
            (info.rollout, info.progress) = try await client.withConnection { connection in
                try await Self.rollout(of: name, on: connection, logger: databaseLogger)
            }
            return info
        }
    }

    /// The campaign's image, checked against its SHA-256.
    public func image(of campaign: CampaignInfo) async throws(CampaignError) -> [UInt8] {
        let bytes: [UInt8] = try await run("reading the image of '\(campaign.name)'") { [self] in
            let rows = try await client.query(
                "SELECT i.bytes FROM bleota.images i JOIN bleota.campaigns c ON c.image_sha256 = i.sha256 WHERE c.name = \(campaign.name)",
                logger: databaseLogger)
            for try await data in rows.decode(Data.self) { return [UInt8](data) }
            throw CampaignError.notFound(campaign.name)
        }
        let digest = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        guard digest == campaign.imageSHA256 else {
            throw .imageMismatch(
                "the image stored for '\(campaign.name)' hashes to \(digest.prefix(16))…, not \(campaign.imageSHA256.prefix(16))…: the database was altered; create the campaign again"
            )
        }
        return bytes
    }

    // MARK: Workers

    /// Claims up to `limit` devices for `worker`: first ends the leases that expired (a lost
    /// try; the device goes back to pending, or fails when it has no tries left), halts the
    /// campaign if its failures reached its rule and opens the stages that are due
    /// (``CampaignRollout``), then takes pending devices of the open stages whose back-off is
    /// over, in list order, skipping rows another worker is claiming at this moment; none from a
    /// halted or aborted campaign. A device fixed to an adapter is claimed only by a worker that
    /// has that adapter.
    public func claim(_ campaign: CampaignInfo, worker: String, limit: Int, adapters: [String]) async throws(CampaignError) -> [ClaimedDevice] {
        guard limit > 0 else { return [] }
        return try await run("claiming devices of '\(campaign.name)'") { [self] in
            try await client.withTransaction(logger: databaseLogger) { connection in
                try await Self.expireLeases(campaign, connection: connection, shift: shift, logger: databaseLogger, notices: logger)
                try await Self.haltIfFailing(campaign.name, connection: connection, shift: shift, logger: databaseLogger, notices: logger)
                try await Self.openDueStages(campaign.name, connection: connection, shift: shift, logger: databaseLogger, notices: logger)
                // Halted, aborted, outside its window or at its rate: nothing is claimed. Otherwise
                // devices of the open stages only, as many as the rate leaves.
                guard let (stage, room) = try await Self.claimable(campaign.name, connection: connection, shift: shift, logger: databaseLogger)
                else { return [] }
                let take = min(limit, room)
                let rows = try await connection.query(
                    """
                    WITH next AS (
                        SELECT address FROM bleota.devices
                        WHERE campaign = \(campaign.name) AND state = 'pending' AND not_before <= now() + make_interval(secs => \(shift))
                          AND stage <= \(stage) AND (adapter IS NULL OR adapter = ANY(\(adapters)))
                        ORDER BY position LIMIT \(take)
                        FOR UPDATE SKIP LOCKED)
                    UPDATE bleota.devices d
                    SET state = 'running', worker = \(worker), tries = d.tries + 1,
                        lease_expires = now() + make_interval(secs => \(shift)) + make_interval(secs => \(campaign.leaseSeconds))
                    FROM next WHERE d.campaign = \(campaign.name) AND d.address = next.address
                    RETURNING d.address, d.label, d.adapter, d.protocol, d.options::text, d.tries, d.position, d.stage, d.pairing
                    """, logger: databaseLogger)
                var claimed: [(ClaimedDevice, Int)] = []
                for try await (address, label, adapter, protocolName, options, tries, position, stage, pairing)
                    in rows.decode((String, String, String?, String?, String, Int, Int, Int, String?).self)
                {
                    let device = FleetDevice(
                        address: address, adapter: adapter, protocolName: protocolName,
                        protocolOptions: Self.options(options), label: label, pairing: pairing.flatMap(DevicePairing.init(text:)))
                    claimed.append((ClaimedDevice(device: device, tryNumber: tries, tryID: 0, stage: stage), position))
                }
                claimed.sort { $0.1 < $1.1 }
                var result: [ClaimedDevice] = []
                for (var device, _) in claimed {
                    let ids = try await connection.query(
                        """
                        INSERT INTO bleota.tries (campaign, address, try, worker, started_at)
                        VALUES (\(campaign.name), \(device.device.address), \(device.tryNumber), \(worker), now() + make_interval(secs => \(shift)))
                        RETURNING id
                        """, logger: databaseLogger)
                    for try await id in ids.decode(Int64.self) { device.tryID = id }
                    result.append(device)
                }
                return result
            }
        }
    }

    /// Ends every expired lease of `campaign`: the try is recorded as lost, the device goes
    /// back to pending at once, or fails when that was its last try.
    static func expireLeases(_ campaign: CampaignInfo, connection: PostgresConnection, shift: Double, logger: Logger, notices: Logger) async throws {
        let expired = try await connection.query(
            """
            WITH lost AS (
                SELECT address FROM bleota.devices
                WHERE campaign = \(campaign.name) AND state = 'running' AND lease_expires < now() + make_interval(secs => \(shift))
                FOR UPDATE SKIP LOCKED)
            UPDATE bleota.devices d
            SET state = CASE WHEN d.tries >= \(campaign.attempts) THEN 'failed' ELSE 'pending' END,
                not_before = now() + make_interval(secs => \(shift)),
                error = 'the lease of worker ' || d.worker || ' ran out during try ' || d.tries
                        || ' (the worker stopped: killed, crashed or cut off from the database)'
                        || CASE WHEN d.tries >= \(campaign.attempts) THEN ', and it was the last try' ELSE '' END,
                error_step = 'lease',
                finished_at = CASE WHEN d.tries >= \(campaign.attempts) THEN now() + make_interval(secs => \(shift)) ELSE NULL END
            FROM lost WHERE d.campaign = \(campaign.name) AND d.address = lost.address
            RETURNING d.address, d.worker, d.lease_expires
            """, logger: logger)
        for try await (address, worker, expires) in expired.decode((String, String, Date).self) {
            notices.notice("\(address): the lease of \(worker) ran out; the device is free for another worker")
            try await connection.query(
                """
                UPDATE bleota.tries SET ended_at = \(expires), outcome = 'lease-expired', error = 'lease ran out', error_step = 'lease'
                WHERE campaign = \(campaign.name) AND address = \(address) AND worker = \(worker) AND ended_at IS NULL
                """, logger: logger)
        }
    }

    /// Extends `worker`'s leases on `addresses`; returns the addresses it still holds.
    public func renew(_ campaign: CampaignInfo, worker: String, addresses: [String]) async throws(CampaignError) -> Set<String> {
        guard !addresses.isEmpty else { return [] }
        return try await run("renewing leases in '\(campaign.name)'") { [self] in
            let rows = try await client.query(
                """
                UPDATE bleota.devices SET lease_expires = now() + make_interval(secs => \(shift)) + make_interval(secs => \(campaign.leaseSeconds))
                WHERE campaign = \(campaign.name) AND address = ANY(\(addresses)) AND worker = \(worker) AND state = 'running'
                RETURNING address
                """, logger: databaseLogger)
            var held: Set<String> = []
            for try await address in rows.decode(String.self) { held.insert(address) }
            return held
        }
    }

    /// Records how `claimed`'s try ended, if `worker` still holds its lease; returns whether it did
    /// (false: the lease ran out and the device may be another worker's now, so nothing is written).
    public func record(_ campaign: CampaignInfo, worker: String, claimed: ClaimedDevice, ending: TryEnding) async throws(CampaignError) -> Bool {
        let address = claimed.device.address
        return try await run("recording the try of \(address)") { [self] in
            try await client.withTransaction(logger: databaseLogger) { connection in
                let rows: PostgresRowSequence
                let outcome: String
                var error: String?
                var step: String?
                var seconds = 0.0, bytes = 0, resends = 0
                var airBytes: Int?
                switch ending {
                case .updated(let before, let after, let took, let sent, let resent, let aired):
                    outcome = "updated"
                    (seconds, bytes, resends, airBytes) = (took, sent, resent, aired)
                    rows = try await connection.query(
                        """
                        UPDATE bleota.devices SET state = 'updated', version_before = coalesce(version_before, \(before)), version_after = \(after),
                            seconds = seconds + \(took), bytes = bytes + \(sent), resends = resends + \(resent), air_bytes = air_bytes + \(aired),
                            error = NULL, error_step = NULL, device_state = NULL, lease_expires = NULL, finished_at = now() + make_interval(secs => \(shift))
                        WHERE campaign = \(campaign.name) AND address = \(address) AND worker = \(worker) AND state = 'running'
                        RETURNING address
                        """, logger: databaseLogger)
                case .alreadyCurrent(let version, let took):
                    outcome = "skipped"
                    seconds = took
                    rows = try await connection.query(
                        """
                        UPDATE bleota.devices SET state = 'skipped', version_before = coalesce(version_before, \(version)), version_after = \(version),
                            seconds = seconds + \(took), error = NULL, error_step = NULL, device_state = NULL, lease_expires = NULL, finished_at = now() + make_interval(secs => \(shift))
                        WHERE campaign = \(campaign.name) AND address = \(address) AND worker = \(worker) AND state = 'running'
                        RETURNING address
                        """, logger: databaseLogger)
                case .otherVersion(let version, let reason, let took):
                    outcome = "other-version"
                    (error, seconds) = (reason, took)
                    rows = try await connection.query(
                        """
                        UPDATE bleota.devices SET state = 'other-version', version_before = \(version), version_after = \(version),
                            seconds = seconds + \(took), error = \(reason), error_step = 'connect', device_state = NULL, lease_expires = NULL,
                            finished_at = now() + make_interval(secs => \(shift))
                        WHERE campaign = \(campaign.name) AND address = \(address) AND worker = \(worker) AND state = 'running'
                        RETURNING address
                        """, logger: databaseLogger)
                case .failed(let message, let failedStep, let deviceState, let took, let sent, let resent, let retryAfter):
                    outcome = "failed"
                    (error, step, seconds, bytes, resends) = (message, failedStep, took, sent, resent)
                    let final = retryAfter == nil || claimed.tryNumber >= campaign.attempts
                    rows = try await connection.query(
                        """
                        UPDATE bleota.devices SET state = \(final ? "failed" : "pending"),
                            not_before = now() + make_interval(secs => \(shift)) + make_interval(secs => \(retryAfter ?? 0)),
                            seconds = seconds + \(took), bytes = bytes + \(sent), resends = resends + \(resent),
                            error = \(message), error_step = \(failedStep), device_state = \(deviceState), lease_expires = NULL,
                            finished_at = CASE WHEN \(final) THEN now() + make_interval(secs => \(shift)) ELSE NULL END
                        WHERE campaign = \(campaign.name) AND address = \(address) AND worker = \(worker) AND state = 'running'
                        RETURNING address
                        """, logger: databaseLogger)
                }
                var held = false
                for try await _ in rows { held = true }
                guard held else { return false }
                // Every ending moves the share (a success can bring the finished devices to --halt-after).
                try await Self.haltIfFailing(campaign.name, connection: connection, shift: shift, logger: databaseLogger, notices: logger)
                try await connection.query(
                    """
                    UPDATE bleota.tries SET ended_at = now() + make_interval(secs => \(shift)), outcome = \(outcome), error = \(error), error_step = \(step),
                        seconds = \(seconds), bytes = \(bytes), resends = \(resends), air_bytes = \(airBytes)
                    WHERE id = \(claimed.tryID)
                    """, logger: databaseLogger)
                return true
            }
        }
    }

    /// Every device of the campaign, in list order.
    public func status(_ name: String) async throws(CampaignError) -> CampaignStatus {
        let campaign = try await info(name)
        return try await run("reading the devices of '\(name)'") { [self] in
            let rows = try await client.query(
                """
                SELECT address, label, state, tries, worker, version_before, version_after, seconds, bytes, resends, error, error_step, device_state,
                       stage, air_bytes
                FROM bleota.devices WHERE campaign = \(name) ORDER BY position
                """, logger: databaseLogger)
            var devices: [CampaignDeviceState] = []
            for try await (address, label, state, tries, worker, before, after, seconds, bytes, resends, error, step, deviceState, stage, airBytes)
                in rows.decode((String, String, String, Int, String?, String?, String?, Double, Int, Int, String?, String?, String?, Int, Int).self)
            {
                var device = CampaignDeviceState(
                    device: address, label: label, state: .init(rawValue: state) ?? .pending, tries: tries, worker: worker,
                    versionBefore: before, versionAfter: after, seconds: seconds, bytes: bytes, resends: resends,
                    error: error, step: step, deviceState: deviceState, stage: stage)
                device.airBytes = airBytes
                devices.append(device)
            }
            return CampaignStatus(campaign: campaign, devices: devices)
        }
    }

    /// Devices not yet final (pending, running), and whether the campaign is halted or aborted.
    public func unfinished(_ name: String) async throws(CampaignError) -> (pending: Int, running: Int, halted: String?, aborted: Bool) {
        try await run("counting the devices of '\(name)'") { [self] in
            let rows = try await client.query(
                """
                SELECT count(d.address) FILTER (WHERE d.state = 'pending'), count(d.address) FILTER (WHERE d.state = 'running'),
                       CASE WHEN c.halted_at IS NOT NULL THEN coalesce(c.halt_reason, 'halted') END, c.aborted_at IS NOT NULL
                FROM bleota.campaigns c LEFT JOIN bleota.devices d ON d.campaign = c.name
                WHERE c.name = \(name) GROUP BY c.name, c.halted_at, c.halt_reason, c.aborted_at
                """, logger: databaseLogger)
            for try await (pending, running, halted, aborted) in rows.decode((Int, Int, String?, Bool).self) {
                return (pending, running, halted, aborted)
            }
            throw CampaignError.notFound(name)
        }
    }

    /// Every try of the campaign, oldest first (for status and for checking a run).
    public func tries(_ name: String) async throws(CampaignError) -> [TryRecord] {
        try await run("reading the tries of '\(name)'") { [self] in
            let rows = try await client.query(
                """
                SELECT address, try, worker, started_at, ended_at, outcome, error FROM bleota.tries WHERE campaign = \(name) ORDER BY id
                """, logger: databaseLogger)
            var records: [TryRecord] = []
            for try await (address, number, worker, started, ended, outcome, error)
                in rows.decode((String, Int, String, Date, Date?, String?, String?).self)
            {
                records.append(TryRecord(device: address, tryNumber: number, worker: worker, startedAt: started, endedAt: ended, outcome: outcome, error: error))
            }
            return records
        }
    }

    // MARK: Helpers

    /// Runs a database operation; errors become one-line ``CampaignError``s naming what was being done.
    func run<Result: Sendable>(_ doing: String, _ body: @escaping @Sendable () async throws -> Result) async throws(CampaignError) -> Result {
        if cutOff.withLock({ $0 }) { throw .database("\(doing) at \(address): no answer (cut off from the server)") }
        do { return try await withOperationTimeout(operationTimeout, body) } catch let error as CampaignError {
            if case .database(let text) = error, text.hasPrefix("no answer") { throw .database("\(doing) at \(address): \(text)") }
            throw error
        } catch {
            // A transaction's error wraps what went wrong inside it.
            if let wrapped = error as? PostgresTransactionError {
                if let inner = wrapped.closureError as? CampaignError { throw inner }
                let cause = wrapped.closureError ?? wrapped.beginError ?? wrapped.commitError ?? wrapped.rollbackError ?? error
                throw .database("\(doing) at \(address): \(Self.describe(cause))")
            }
            throw .database("\(doing) at \(address): \(Self.describe(error))")
        }
    }

    /// The server's own message when there is one ("relation … does not exist"), else the error's text.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection:
                let cause = error.underlying.map { "\($0)" } ?? "no answer"
                return "cannot connect (\(cause)): is the server running, and is the address right?"
            default:
                return "\(error.code)"
            }
        }
        return "\(error)"
    }

    /// Options as the row's `jsonb` holds them: an object of strings.
    static func json(_ options: ProtocolOptionText) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let data = (try? encoder.encode(options)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// A value as JSON text, for a `jsonb` column.
    static func json(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let data = (try? encoder.encode(value)) ?? Data("null".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    static func options(_ json: String) -> ProtocolOptionText {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] else { return [:] }
        var options = ProtocolOptionText()
        for (key, value) in object { options[key] = "\(value)" }
        return options
    }
}

/// Runs `body`, or throws ``CampaignError/database(_:)`` when it takes longer than `limit`
/// (the body is cancelled, and not waited for).
///
/// Not a task group: a group waits for its children, and a query whose connection the server
/// dropped mid-transaction (a restart) was seen to ignore cancellation and never end, which held
/// the worker for ever. The body runs in a task of its own; whichever ends first — the body, the
/// limit, or the caller's cancellation — answers, and a body that outlives the limit ends on its
/// own (its connection gone with the server's).
func withOperationTimeout<Result: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> Result) async throws -> Result {
    let race = OperationRace<Result>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Result, any Error>) in
            race.answer.withLock { $0 = continuation }
            let running = Task {
                do { race.finish(.success(try await body())) } catch { race.finish(.failure(error)) }
            }
            let timer = Task {
                do { try await Task.sleep(for: limit) } catch { return }
                race.finish(.failure(CampaignError.database("no answer in \(limit.components.seconds) s: is the server running, and is the address right?")))
            }
            race.keep([running, timer])
            // Cancelled before the answer could be waited for: the handler found nothing to end.
            if Task.isCancelled { race.finish(.failure(CancellationError())) }
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The body and the timer of ``withOperationTimeout(_:_:)``: the first to end answers, once,
/// and cancels the other.
private final class OperationRace<Result: Sendable>: Sendable {
    let answer = Mutex<CheckedContinuation<Result, any Error>?>(nil)
    private let tasks = Mutex<(kept: [Task<Void, Never>], finished: Bool)>(([], false))

    func keep(_ running: [Task<Void, Never>]) {
        let finished = tasks.withLock { state -> Bool in
            state.kept = running
            return state.finished
        }
        // Answered (or cancelled) before the tasks were kept: they are cancelled now.
        if finished { for task in running { task.cancel() } }
    }

    func finish(_ outcome: Swift.Result<Result, any Error>) {
        guard
            let continuation = answer.withLock({ slot -> CheckedContinuation<Result, any Error>? in
                defer { slot = nil }
                return slot
            })
        else { return }
        let running = tasks.withLock { state -> [Task<Void, Never>] in
            state.finished = true
            return state.kept
        }
        for task in running { task.cancel() }
        continuation.resume(with: outcome)
    }
}

/// One try of one device, as `bleota.tries` keeps it.
public struct TryRecord: Sendable, Codable, Equatable {
    public var device: String
    public var tryNumber: Int
    public var worker: String
    public var startedAt: Date
    public var endedAt: Date?
    /// updated, skipped, failed, lease-expired; nil while it runs.
    public var outcome: String?
    public var error: String?
}
#endif
