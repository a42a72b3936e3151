/// The tables of the `bleota` schema, as numbered migrations.
///
/// bleota creates and migrates its own schema: every command that opens a
/// campaign database first applies the migrations it knows and the database
/// lacks, in one transaction under an advisory lock (so workers starting
/// together migrate once), and refuses a database migrated by a newer bleota.
/// A migration is never edited once released; a change is a new one.
public enum CampaignSchema {
    public struct Migration: Sendable {
        public var version: Int
        public var description: String
        public var statements: [String]
    }

    /// The advisory lock key every migration takes (`pg_advisory_xact_lock`): "bleota" in ASCII.
    static let migrationLock: Int64 = 0x626C_656F_7461

    public static var latestVersion: Int { migrations.last!.version }

    public static let migrations: [Migration] = [
        Migration(
            version: 1, description: "campaigns, their images, devices and tries",
            statements: [
                """
                CREATE TABLE bleota.images (
                    sha256 bytea PRIMARY KEY CHECK (length(sha256) = 32),
                    size bigint NOT NULL,
                    bytes bytea NOT NULL,
                    stored_at timestamptz NOT NULL DEFAULT now())
                """,
                """
                CREATE TABLE bleota.campaigns (
                    name text PRIMARY KEY,
                    image_sha256 bytea NOT NULL REFERENCES bleota.images (sha256),
                    image_name text NOT NULL,
                    protocol text,
                    protocol_options jsonb NOT NULL DEFAULT '{}',
                    version_label text,
                    force boolean NOT NULL DEFAULT false,
                    attempts integer NOT NULL CHECK (attempts BETWEEN 1 AND 10),
                    backoff_seconds double precision NOT NULL CHECK (backoff_seconds >= 0),
                    lease_seconds double precision NOT NULL CHECK (lease_seconds > 0),
                    created_at timestamptz NOT NULL DEFAULT now())
                """,
                """
                CREATE TABLE bleota.devices (
                    campaign text NOT NULL REFERENCES bleota.campaigns (name) ON DELETE CASCADE,
                    address text NOT NULL,
                    position integer NOT NULL,
                    label text NOT NULL,
                    adapter text,
                    protocol text,
                    options jsonb NOT NULL DEFAULT '{}',
                    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'updated', 'skipped', 'failed')),
                    tries integer NOT NULL DEFAULT 0,
                    not_before timestamptz NOT NULL DEFAULT now(),
                    worker text,
                    lease_expires timestamptz,
                    version_before text,
                    version_after text,
                    seconds double precision NOT NULL DEFAULT 0,
                    bytes bigint NOT NULL DEFAULT 0,
                    resends integer NOT NULL DEFAULT 0,
                    error text,
                    error_step text,
                    device_state text,
                    finished_at timestamptz,
                    PRIMARY KEY (campaign, address),
                    CHECK (state <> 'running' OR (worker IS NOT NULL AND lease_expires IS NOT NULL)))
                """,
                "CREATE INDEX devices_waiting ON bleota.devices (campaign, state, not_before, position)",
                """
                CREATE TABLE bleota.tries (
                    id bigserial PRIMARY KEY,
                    campaign text NOT NULL,
                    address text NOT NULL,
                    try integer NOT NULL,
                    worker text NOT NULL,
                    started_at timestamptz NOT NULL DEFAULT now(),
                    ended_at timestamptz,
                    outcome text CHECK (outcome IN ('updated', 'skipped', 'failed', 'lease-expired')),
                    error text,
                    error_step text,
                    seconds double precision,
                    bytes bigint,
                    resends integer,
                    FOREIGN KEY (campaign, address) REFERENCES bleota.devices (campaign, address) ON DELETE CASCADE)
                """,
                "CREATE INDEX tries_by_device ON bleota.tries (campaign, address, try)",
            ]),
        Migration(
            version: 2, description: "rollouts: stages, halting, aborting, a claim rate and window",
            statements: [
                """
                ALTER TABLE bleota.campaigns
                    ADD COLUMN stages jsonb NOT NULL DEFAULT '[]',
                    ADD COLUMN stage_count integer NOT NULL DEFAULT 1 CHECK (stage_count >= 1),
                    ADD COLUMN stage_wait_seconds double precision NOT NULL DEFAULT 0 CHECK (stage_wait_seconds >= 0),
                    ADD COLUMN stage_wait_manual boolean NOT NULL DEFAULT false,
                    ADD COLUMN seed bigint NOT NULL DEFAULT 0,
                    ADD COLUMN open_stage integer NOT NULL DEFAULT 0,
                    ADD COLUMN stage_opened_at timestamptz,
                    ADD COLUMN halt_failed_share double precision CHECK (halt_failed_share > 0 AND halt_failed_share <= 1),
                    ADD COLUMN halt_after integer NOT NULL DEFAULT 1 CHECK (halt_after >= 1),
                    ADD COLUMN halt_on text NOT NULL DEFAULT 'any' CHECK (halt_on IN ('any', 'clean', 'late')),
                    ADD COLUMN halted_at timestamptz,
                    ADD COLUMN halt_reason text,
                    ADD COLUMN failures_counted_from timestamptz,
                    ADD COLUMN aborted_at timestamptz,
                    ADD COLUMN rate_count integer CHECK (rate_count > 0),
                    ADD COLUMN rate_period_seconds integer NOT NULL DEFAULT 60 CHECK (rate_period_seconds IN (60, 3600)),
                    ADD COLUMN window_start_minute integer CHECK (window_start_minute BETWEEN 0 AND 1439),
                    ADD COLUMN window_end_minute integer CHECK (window_end_minute BETWEEN 0 AND 1439),
                    ADD COLUMN window_zone text,
                    ADD CHECK (open_stage >= 0 AND open_stage < stage_count)
                """,
                "ALTER TABLE bleota.devices ADD COLUMN stage integer NOT NULL DEFAULT 0",
            ]),
        Migration(
            version: 3, description: "cohorts by version, bytes over the air, devices that need pairing",
            statements: [
                "ALTER TABLE bleota.campaigns ADD COLUMN from_versions text[] NOT NULL DEFAULT '{}'",
                """
                ALTER TABLE bleota.devices
                    ADD COLUMN air_bytes bigint,
                    ADD COLUMN pairing text CHECK (pairing = 'bonded' OR pairing ~ '^passkey:[0-9]{1,6}$'),
                    DROP CONSTRAINT devices_state_check,
                    ADD CONSTRAINT devices_state_check CHECK (state IN ('pending', 'running', 'updated', 'skipped', 'failed', 'other-version'))
                """,
                // A row written before: only whole images went over the air then.
                "UPDATE bleota.devices SET air_bytes = bytes",
                "ALTER TABLE bleota.devices ALTER COLUMN air_bytes SET DEFAULT 0, ALTER COLUMN air_bytes SET NOT NULL",
                """
                ALTER TABLE bleota.tries
                    ADD COLUMN air_bytes bigint,
                    DROP CONSTRAINT tries_outcome_check,
                    ADD CONSTRAINT tries_outcome_check CHECK (outcome IN ('updated', 'skipped', 'failed', 'lease-expired', 'other-version'))
                """,
            ]),
    ]
}
