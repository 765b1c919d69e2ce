-- +goose Up
-- Optional limits of metered tiers; NULL sets no limit. The seeded tiers
-- meter nothing.
ALTER TABLE tiers ADD COLUMN tokens_per_minute INTEGER CHECK (tokens_per_minute BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN tokens_per_hour   INTEGER CHECK (tokens_per_hour   BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN tokens_per_day    INTEGER CHECK (tokens_per_day    BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN max_concurrent    INTEGER CHECK (max_concurrent    BETWEEN 0 AND 2147483647);

-- One row per call a metered tier opened. A call is open while finished_at
-- is NULL; one open past expires_at counts as finished then, and is
-- settled (finished_at = expires_at, expired = 1) by the next write to the
-- user's calls. Keyed by id without a rowid, so a row is one b-tree entry
-- and a call is found in one seek.
CREATE TABLE calls (
    id          TEXT    PRIMARY KEY NOT NULL,
    user_id     TEXT    NOT NULL,
    tier        TEXT    NOT NULL,
    reserved    INTEGER NOT NULL CHECK (reserved >= 0),
    opened_at   INTEGER NOT NULL, -- unix microseconds, as every time below
    expires_at  INTEGER NOT NULL,
    finished_at INTEGER,
    tokens      INTEGER,          -- what the call counts once finished
    reported    INTEGER,          -- the count its caller reported; NULL until then
    expired     INTEGER NOT NULL DEFAULT 0 CHECK (expired IN (0, 1))
) WITHOUT ROWID;
-- The only index, so that opening or finishing a call writes few pages. A
-- user's open calls (finished_at NULL sorts first) in expiry order: the
-- calls in flight, the next to expire, and those that did; then the user's
-- finished calls in finishing order, which the cleanup deletes user by
-- user, as Forget deletes all of them.
CREATE INDEX calls_user ON calls (user_id, finished_at, expires_at);

-- Finished tokens, one row per user and instant they were counted at, in
-- time order like requests. total is the user's running sum of tokens up to
-- and including the row, so the tokens after a cutoff are the newest total
-- minus the total before the oldest row after it: two seeks, whatever the
-- window holds. Rows of zero tokens are not stored, so totals strictly
-- increase and the row where enough tokens have left a window is one seek
-- on (user_id, total). Deleting a user's oldest rows keeps every difference.
CREATE TABLE call_tokens (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL,
    tokens  INTEGER NOT NULL CHECK (tokens > 0),
    total   INTEGER NOT NULL,
    PRIMARY KEY (user_id, ts)
) WITHOUT ROWID;
CREATE UNIQUE INDEX call_tokens_total ON call_tokens (user_id, total);

-- +goose Down
DROP TABLE call_tokens;
DROP TABLE calls;
ALTER TABLE tiers DROP COLUMN max_concurrent;
ALTER TABLE tiers DROP COLUMN tokens_per_day;
ALTER TABLE tiers DROP COLUMN tokens_per_hour;
ALTER TABLE tiers DROP COLUMN tokens_per_minute;
