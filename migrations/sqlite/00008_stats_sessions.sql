-- +goose Up
-- Checks counted per minute, tier and reason: "admitted", a refusal's
-- window or kind ("minute", "hour", "day", "tokens", "concurrency",
-- "feature", "other"), or a shadow limit's would-be refusal ("shadow_minute"
-- ...). The writer adds to these rows in batches, at most one row per key,
-- and the cleanup deletes rows older than 8 days.
CREATE TABLE check_counts (
    minute INTEGER NOT NULL, -- unix seconds / 60
    tier   TEXT    NOT NULL,
    reason TEXT    NOT NULL,
    n      INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (minute, tier, reason)
) WITHOUT ROWID;

-- Admin page sessions. id_hash is the SHA-256 of the session's cookie
-- value, which is never stored; admin_hash fingerprints the admin token the
-- session signed in with, so a changed token ends every session.
CREATE TABLE admin_sessions (
    id_hash    BLOB    PRIMARY KEY NOT NULL,
    admin_hash BLOB    NOT NULL,
    csrf       TEXT    NOT NULL,
    expires_at INTEGER NOT NULL -- unix microseconds
) WITHOUT ROWID;
CREATE INDEX admin_sessions_expiry ON admin_sessions (expires_at);

-- For the statistics: the calls finished, per tier and hour.
CREATE INDEX calls_finished_tier ON calls (finished_at, tier, tokens) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX calls_finished_tier;
DROP TABLE admin_sessions;
DROP TABLE check_counts;
