// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import Foundation
import Logging
import PostgresNIO

/// The rollout's rules as the database applies them: which stage is open, when the next opens,
/// when the failures halt the campaign, and the operator's advance, resume and abort.
///
/// Every rule runs inside a transaction on the campaign's row, so every host sees one answer:
/// a claim first ends expired leases, then halts the campaign if the failures reached its rule,
/// then opens the stages that are due, and only then takes devices, of open stages only, from a
/// campaign neither halted nor aborted. It reads the campaign's row `FOR SHARE`, so a halt
/// written by a worker's record waits for the claims under way and every later claim sees it.
extension CampaignStore {
    /// The campaign's rollout and where it stands.
    static func rollout(of name: String, on connection: PostgresConnection, logger: Logger) async throws -> (CampaignRollout, RolloutProgress) {
        let rows = try await connection.query(
            """
            SELECT stages::text, stage_wait_seconds, stage_wait_manual, seed, halt_failed_share, halt_after, halt_on,
                   open_stage, stage_opened_at, halted_at, halt_reason, failures_counted_from, aborted_at,
                   rate_count, rate_period_seconds, window_start_minute, window_end_minute, window_zone
            FROM bleota.campaigns WHERE name = \(name)
            """, logger: logger)
        for try await (
            stages, wait, manual, seed, share, after, on, open, opened, halted, reason, countedFrom, aborted, rate, period, start, end, zone
        ) in rows.decode(
            (String, Double, Bool, Int64, Double?, Int, String, Int, Date?, Date?, String?, Date?, Date?, Int?, Int, Int?, Int?, String?).self)
        {
            let stageList = (try? JSONDecoder().decode([CampaignRollout.Stage].self, from: Data(stages.utf8))) ?? []
            let rollout = CampaignRollout(
                stages: stageList, stageWait: manual ? .operatorAdvance : wait > 0 ? .seconds(wait) : .none,
                seed: UInt64(bitPattern: seed),
                halt: share.map { CampaignRollout.HaltRule(failedShare: $0, after: after, counting: .init(rawValue: on) ?? .any) },
                rate: rate.map { CampaignRollout.ClaimRate(count: $0, periodSeconds: period) },
                window: start.flatMap { start in
                    end.flatMap { end in zone.map { CampaignRollout.ClaimWindow(start: start, end: end, zone: $0) } }
                })
            let progress = RolloutProgress(
                openStage: open, stageOpenedAt: opened, haltedAt: halted, haltReason: reason, failuresCountedFrom: countedFrom,
                abortedAt: aborted)
            return (rollout, progress)
        }
        throw CampaignError.notFound(name)
    }

    /// Halts the campaign when its failures reached its rule; returns the reason when this call
    /// halted it.
    @discardableResult
    static func haltIfFailing(_ name: String, connection: PostgresConnection, shift: Double, logger: Logger, notices: Logger) async throws -> String? {
        // A clean failure left the device as it was (``CampaignDeviceState/failedCleanly``); the rest
        // ended late or unknown.
        let rows = try await connection.query(
            """
            SELECT c.halt_failed_share, c.halt_after, c.halt_on,
                   count(d.address) FILTER (WHERE d.state IN ('updated', 'skipped', 'failed')),
                   count(d.address) FILTER (WHERE d.state = 'failed' AND (d.device_state IS NULL OR d.device_state = 'old-image') AND coalesce(d.error_step, '') <> 'lease'),
                   count(d.address) FILTER (WHERE d.state = 'failed' AND NOT (coalesce(d.device_state, 'old-image') = 'old-image' AND coalesce(d.error_step, '') <> 'lease'))
            FROM bleota.campaigns c
            LEFT JOIN bleota.devices d ON d.campaign = c.name AND (c.failures_counted_from IS NULL OR d.finished_at >= c.failures_counted_from)
            WHERE c.name = \(name) AND c.halted_at IS NULL AND c.aborted_at IS NULL AND c.halt_failed_share IS NOT NULL
            GROUP BY c.name, c.halt_failed_share, c.halt_after, c.halt_on
            """, logger: logger)
        var reason: String?
        for try await (share, after, on, finished, clean, late) in rows.decode((Double, Int, String, Int, Int, Int).self) {
            let rule = CampaignRollout.HaltRule(failedShare: share, after: after, counting: .init(rawValue: on) ?? .any)
            reason = rule.verdict(finished: finished, clean: clean, late: late)
        }
        guard let reason else { return nil }
        let halted = try await connection.query(
            """
            UPDATE bleota.campaigns SET halted_at = now() + make_interval(secs => \(shift)), halt_reason = \(reason)
            WHERE name = \(name) AND halted_at IS NULL AND aborted_at IS NULL RETURNING name
            """, logger: logger)
        var did = false
        for try await _ in halted { did = true }
        guard did else { return nil }
        notices.warning("campaign '\(name)' halted: \(reason); no device is claimed until bleota fleet campaign resume")
        return reason
    }

    /// Opens each stage that is due: every device of the stages open so far has finished, the
    /// wait after the last of them is over, and the stages open by themselves (not by an
    /// operator's advance). Returns the last stage open.
    static func openDueStages(_ name: String, connection: PostgresConnection, shift: Double, logger: Logger, notices: Logger) async throws {
        // An empty stage is due as soon as it opens: at most one pass per stage.
        while true {
            let rows = try await connection.query(
                """
                UPDATE bleota.campaigns c SET open_stage = c.open_stage + 1, stage_opened_at = now() + make_interval(secs => \(shift))
                WHERE c.name = \(name) AND c.halted_at IS NULL AND c.aborted_at IS NULL AND NOT c.stage_wait_manual
                  AND c.open_stage + 1 < c.stage_count
                  AND NOT EXISTS (
                      SELECT 1 FROM bleota.devices d
                      WHERE d.campaign = c.name AND d.stage <= c.open_stage AND d.state IN ('pending', 'running'))
                  AND coalesce(
                      (SELECT max(d.finished_at) FROM bleota.devices d WHERE d.campaign = c.name AND d.stage <= c.open_stage),
                      '-infinity') + make_interval(secs => c.stage_wait_seconds) <= now() + make_interval(secs => \(shift))
                RETURNING c.open_stage, c.stage_count
                """, logger: logger)
            var opened: (Int, Int)?
            for try await row in rows.decode((Int, Int).self) { opened = row }
            guard let (stage, count) = opened else { return }
            notices.notice("campaign '\(name)': stage \(stage + 1) of \(count) is open")
        }
    }

    /// What a claim may take now: the last stage open, and how many devices (nil: none, as the
    /// campaign is halted or aborted, outside its window, or has used its rate; `.max`: no limit).
    ///
    /// The campaign's row is read `FOR SHARE`, or `FOR UPDATE` where a rate is set: then claims
    /// take turns, so that two hosts counting the same tries cannot both claim the last place.
    /// Three statements, not one: the lock's kind depends on the first; and the tries are
    /// counted by a statement begun after the lock is held, since a statement that waited for
    /// the lock still reads with the snapshot it began with, which misses the tries the other
    /// claim just committed (PostgreSQL's READ COMMITTED).
    static func claimable(_ name: String, connection: PostgresConnection, shift: Double, logger: Logger) async throws -> (stage: Int, room: Int)? {
        var rated = false
        for try await value in try await connection.query(
            "SELECT rate_count IS NOT NULL FROM bleota.campaigns WHERE name = \(name)", logger: logger
        ).decode(Bool.self) {
            rated = value
        }
        let rows =
            rated
            ? try await connection.query(
                "SELECT open_stage, halted_at IS NULL AND aborted_at IS NULL FROM bleota.campaigns WHERE name = \(name) FOR UPDATE", logger: logger)
            : try await connection.query(
                "SELECT open_stage, halted_at IS NULL AND aborted_at IS NULL FROM bleota.campaigns WHERE name = \(name) FOR SHARE", logger: logger)
        var open: Int?
        for try await (stage, claimable) in rows.decode((Int, Bool).self) where claimable { open = stage }
        guard let open else { return nil }
        // The window is read in the campaign's time zone by the server, whose clock every host shares.
        let limits = try await connection.query(
            """
            SELECT c.rate_count, c.rate_period_seconds, c.window_start_minute, c.window_end_minute, c.window_zone,
                   CASE WHEN c.window_zone IS NOT NULL THEN
                       (extract(hour FROM (now() + make_interval(secs => \(shift))) AT TIME ZONE c.window_zone) * 60
                        + extract(minute FROM (now() + make_interval(secs => \(shift))) AT TIME ZONE c.window_zone))::integer END,
                   (SELECT count(*) FROM bleota.tries t WHERE t.campaign = c.name
                      AND t.started_at > now() + make_interval(secs => \(shift)) - make_interval(secs => c.rate_period_seconds))::integer
            FROM bleota.campaigns c WHERE c.name = \(name)
            """, logger: logger)
        for try await (rate, _, start, end, zone, minute, recent) in limits.decode((Int?, Int, Int?, Int?, String?, Int?, Int).self) {
            if let start, let end, let zone, let minute, !CampaignRollout.ClaimWindow(start: start, end: end, zone: zone).contains(minute: minute) {
                return nil
            }
            guard let rate else { return (open, .max) }
            let room = rate - recent
            return room > 0 ? (open, room) : nil
        }
        return nil
    }

    /// What an operator's command did.
    public struct OperatorResult: Sendable, Equatable {
        public var info: CampaignInfo
        /// One line for the operator.
        public var sentence: String
    }

    /// Opens the next stage now (`bleota fleet campaign advance`), whether or not the stages open
    /// so far have finished. `seen`: the stage the operator last saw open; when another operator
    /// advanced since, nothing changes and the error says so.
    public func advance(_ name: String, from seen: Int? = nil) async throws(CampaignError) -> OperatorResult {
        let before = try await info(name)
        if before.progress.isAborted { throw .notNow("campaign '\(name)' was aborted: nothing opens again; create a new campaign") }
        if before.progress.isHalted {
            throw .notNow("campaign '\(name)' is halted (\(before.progress.haltReason ?? "its halt rule")): resume it first with bleota fleet campaign resume")
        }
        let count = before.rollout.effectiveStages.count
        let expected = seen ?? before.progress.openStage
        guard expected + 1 < count else { throw .notNow("campaign '\(name)' has every stage open already (\(count) of \(count))") }
        let moved: Bool = try await run("advancing '\(name)'") { [self] in
            let rows = try await client.query(
                """
                UPDATE bleota.campaigns SET open_stage = open_stage + 1, stage_opened_at = now() + make_interval(secs => \(shift))
                WHERE name = \(name) AND open_stage = \(expected) AND halted_at IS NULL AND aborted_at IS NULL AND open_stage + 1 < stage_count
                RETURNING open_stage
                """, logger: databaseLogger)
            for try await _ in rows { return true }
            return false
        }
        let after = try await info(name)
        guard moved else {
            throw .notNow(
                "campaign '\(name)' is at stage \(after.progress.openStage + 1) of \(count) now, not \(expected + 1): another operator or its stage wait opened it; nothing changed"
            )
        }
        let stage = after.rollout.effectiveStages[after.progress.openStage]
        return OperatorResult(info: after, sentence: "campaign '\(name)': stage \(after.progress.openStage + 1) of \(count) (\(stage.text)) is open")
    }

    /// Lets a halted campaign go on (`bleota fleet campaign resume`): claims start again, and its
    /// halt rule counts the failures of devices that finish from now on.
    public func resume(_ name: String) async throws(CampaignError) -> OperatorResult {
        let resumed: String? = try await run("resuming '\(name)'") { [self] in
            let rows = try await client.query(
                """
                UPDATE bleota.campaigns SET halted_at = NULL, failures_counted_from = now() + make_interval(secs => \(shift))
                WHERE name = \(name) AND halted_at IS NOT NULL AND aborted_at IS NULL
                RETURNING halt_reason
                """, logger: databaseLogger)
            for try await reason in rows.decode(String?.self) { return reason ?? "" }
            return nil
        }
        let after = try await info(name)
        guard let reason = resumed else {
            if after.progress.isAborted { throw .notNow("campaign '\(name)' was aborted: it cannot be resumed; create a new campaign") }
            throw .notNow("campaign '\(name)' is not halted: nothing to resume")
        }
        return OperatorResult(
            info: after, sentence: "campaign '\(name)' resumed (it had halted: \(reason)); failures count afresh from now")
    }

    /// Stops a campaign for good (`bleota fleet campaign abort`): no device is claimed again;
    /// updates under way finish and are recorded.
    public func abort(_ name: String) async throws(CampaignError) -> OperatorResult {
        let aborted: Bool = try await run("aborting '\(name)'") { [self] in
            let rows = try await client.query(
                """
                UPDATE bleota.campaigns SET aborted_at = now() + make_interval(secs => \(shift))
                WHERE name = \(name) AND aborted_at IS NULL RETURNING name
                """, logger: databaseLogger)
            for try await _ in rows { return true }
            return false
        }
        let after = try await info(name)
        guard aborted else { throw .notNow("campaign '\(name)' was aborted already") }
        return OperatorResult(info: after, sentence: "campaign '\(name)' aborted: no device is claimed again; updates under way finish")
    }
}
#endif
