-- +goose Up
-- pool_recent keyed by time (see db's pool_recent.go): a commit writes
-- its last page or two whatever the accounts it admitted to, where keyed
-- by account it wrote one of its pages for each. The writer reads a
-- pool's newest rows from its own copy; other reads of them scan from a
-- window's cutoff. (Version 15 changes nothing on PostgreSQL: both
-- folders end at the same version.)
INSERT INTO requests (user_id, ts, seq, tier_id) SELECT user_id, ts, seq, tier_id FROM pool_recent;
DROP TABLE pool_recent;
CREATE TABLE pool_recent (
    ts      INTEGER NOT NULL, -- unix microseconds
    seq     INTEGER NOT NULL,
    user_id TEXT    NOT NULL,
    tier_id INTEGER,
    PRIMARY KEY (ts, seq, user_id)
) WITHOUT ROWID;

-- +goose Down
INSERT INTO requests (user_id, ts, seq, tier_id) SELECT user_id, ts, seq, tier_id FROM pool_recent;
DROP TABLE pool_recent;
CREATE TABLE pool_recent (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    tier_id INTEGER,
    PRIMARY KEY (user_id, ts, seq)
) WITHOUT ROWID;
