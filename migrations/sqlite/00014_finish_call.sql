-- +goose Up
-- An account pool's newest rows of requests, before the writer merges them
-- into requests in bulk (see db's pool_recent.go): keyed like requests,
-- and small, so that a commit writes a few of its pages whatever the
-- accounts it admitted to. (Version 14 also adds PostgreSQL's finish_call,
-- which SQLite has no use for: both folders end at the same version.)
CREATE TABLE pool_recent (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL, -- unix microseconds
    seq     INTEGER NOT NULL,
    tier_id INTEGER,
    PRIMARY KEY (user_id, ts, seq)
) WITHOUT ROWID;

-- +goose Down
INSERT INTO requests (user_id, ts, seq, tier_id) SELECT user_id, ts, seq, tier_id FROM pool_recent;
DROP TABLE pool_recent;
