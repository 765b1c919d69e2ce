-- +goose Up
-- What an admin set for one user: the tier their checks are decided under
-- (NULL: the check's own tier, or the default) and overrides of its limits.
-- A NULL override keeps the tier's limit. The optional limits (tokens,
-- max_concurrent) can also be removed for the user: *_set = 1 with a NULL
-- value. A record outlives its user's requests.
CREATE TABLE users (
    user_id             TEXT    PRIMARY KEY NOT NULL,
    tier                TEXT,
    requests_per_minute INTEGER CHECK (requests_per_minute BETWEEN 0 AND 2147483647),
    requests_per_hour   INTEGER CHECK (requests_per_hour   BETWEEN 0 AND 2147483647),
    requests_per_day    INTEGER CHECK (requests_per_day    BETWEEN 0 AND 2147483647),
    burst_allowance     INTEGER CHECK (burst_allowance     BETWEEN 0 AND 2147483647),
    tokens_per_minute   INTEGER CHECK (tokens_per_minute   BETWEEN 0 AND 2147483647),
    tokens_per_hour     INTEGER CHECK (tokens_per_hour     BETWEEN 0 AND 2147483647),
    tokens_per_day      INTEGER CHECK (tokens_per_day      BETWEEN 0 AND 2147483647),
    max_concurrent      INTEGER CHECK (max_concurrent      BETWEEN 0 AND 2147483647),
    overrides           INTEGER NOT NULL DEFAULT 0, -- bit i set: optional limit i (in the order above) is overridden
    note                TEXT    NOT NULL DEFAULT '',
    updated_at          INTEGER NOT NULL            -- unix microseconds
) WITHOUT ROWID;
-- How many users a tier has, before it is deleted.
CREATE INDEX users_tier ON users (tier) WHERE tier IS NOT NULL;

-- Every change to a user record, oldest first, as tier_changes keeps
-- tiers: old and new are the record as JSON with the API's field names.
CREATE TABLE user_changes (
    id      INTEGER PRIMARY KEY,
    at      INTEGER NOT NULL, -- unix microseconds
    user_id TEXT    NOT NULL,
    source  TEXT    NOT NULL, -- "api", "admin", "import" or "library"
    old     TEXT,
    new     TEXT
);
CREATE INDEX user_changes_user ON user_changes (user_id, id);

-- +goose Down
DROP TABLE user_changes;
DROP TABLE users;
