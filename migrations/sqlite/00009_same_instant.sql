-- +goose Up
-- Requests checked at one instant are recorded at that instant, together,
-- so they leave every window together: a user's timestamps no longer
-- strictly increase, they only never decrease. seq, which numbers a user's
-- rows consecutively, joins the key to tell rows at one instant apart;
-- ordering by (ts, seq) is ordering by seq, so the count of a window is
-- still two seeks. Finished tokens likewise: their running total, which
-- strictly increases, joins theirs. Every row is kept as it is.
CREATE TABLE requests_new (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL, -- unix microseconds
    seq     INTEGER NOT NULL,
    tier_id INTEGER,
    PRIMARY KEY (user_id, ts, seq)
) WITHOUT ROWID;
INSERT INTO requests_new (user_id, ts, seq, tier_id) SELECT user_id, ts, seq, tier_id FROM requests;
DROP TABLE requests;
ALTER TABLE requests_new RENAME TO requests;

CREATE TABLE call_tokens_new (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL,
    tokens  INTEGER NOT NULL CHECK (tokens > 0),
    total   INTEGER NOT NULL,
    PRIMARY KEY (user_id, ts, total)
) WITHOUT ROWID;
INSERT INTO call_tokens_new (user_id, ts, tokens, total) SELECT user_id, ts, tokens, total FROM call_tokens;
DROP TABLE call_tokens;
ALTER TABLE call_tokens_new RENAME TO call_tokens;
CREATE UNIQUE INDEX call_tokens_total ON call_tokens (user_id, total);

-- +goose Down
-- The old keys need strictly increasing times: rows at one instant move
-- apart by a microsecond each, as the old store recorded them, and every
-- row is kept. ts - rank's running maximum plus the rank is the least such
-- shift that never moves a row earlier.
CREATE TABLE requests_old (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    tier_id INTEGER,
    PRIMARY KEY (user_id, ts)
) WITHOUT ROWID;
INSERT INTO requests_old (user_id, ts, seq, tier_id)
    SELECT user_id, max(ts - seq) OVER (PARTITION BY user_id ORDER BY seq) + seq, seq, tier_id FROM requests;
DROP TABLE requests;
ALTER TABLE requests_old RENAME TO requests;

CREATE TABLE call_tokens_old (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL,
    tokens  INTEGER NOT NULL CHECK (tokens > 0),
    total   INTEGER NOT NULL,
    PRIMARY KEY (user_id, ts)
) WITHOUT ROWID;
INSERT INTO call_tokens_old (user_id, ts, tokens, total)
    SELECT user_id, max(ts - rank) OVER (PARTITION BY user_id ORDER BY total) + rank, tokens, total
    FROM (SELECT *, row_number() OVER (PARTITION BY user_id ORDER BY total) AS rank FROM call_tokens);
DROP TABLE call_tokens;
ALTER TABLE call_tokens_old RENAME TO call_tokens;
CREATE UNIQUE INDEX call_tokens_total ON call_tokens (user_id, total);
