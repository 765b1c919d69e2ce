-- +goose Up
-- Spend: what each call costs, priced at admission by the version of the
-- price table then in force, and counted like its tokens.
--
-- calls keeps the price the call is charged at for its whole life (the
-- entry's four prices, per million tokens in picodollars, NULL when
-- unpriced), so that settling it never looks the price up again and a
-- new version never reprices it; reserved_cost is counted as spent while
-- the call is open, cost once it finished, reported_cost is the cost of
-- what its caller reported. calls_finished_tier, which the statistics
-- read, covers the cost too.
ALTER TABLE calls ADD COLUMN model TEXT;
ALTER TABLE calls ADD COLUMN upstream TEXT;
ALTER TABLE calls ADD COLUMN price_version INTEGER;
ALTER TABLE calls ADD COLUMN price_model TEXT;
ALTER TABLE calls ADD COLUMN price_upstream TEXT;
ALTER TABLE calls ADD COLUMN price_input INTEGER;
ALTER TABLE calls ADD COLUMN price_output INTEGER;
ALTER TABLE calls ADD COLUMN price_cache_read INTEGER;
ALTER TABLE calls ADD COLUMN price_cache_write INTEGER;
ALTER TABLE calls ADD COLUMN reserved_cost INTEGER NOT NULL DEFAULT 0 CHECK (reserved_cost >= 0);
ALTER TABLE calls ADD COLUMN cost INTEGER;
ALTER TABLE calls ADD COLUMN reported_cost INTEGER;
DROP INDEX calls_finished_tier;
CREATE INDEX calls_finished_tier ON calls (finished_at, tier, tokens, cost) WHERE finished_at IS NOT NULL;

-- call_tokens counts cost beside tokens, with its own running total, and
-- a row may now hold cost alone: a call that expired with its reservation
-- and was finished later with fewer tokens but a higher cost (a prompt
-- written to a provider's cache) adds cost only. A row adds to at least
-- one of the two totals, so (total, cost_total) strictly increases with
-- each row of a user: it joins the key, and orders rows counted at one
-- instant. call_tokens_cost finds the row where the spend reaches an
-- amount, as call_tokens_total does for tokens; it holds the rows that
-- cost something alone, so that unpriced calls write no entry of it.
CREATE TABLE call_tokens_new (
    user_id    TEXT    NOT NULL,
    ts         INTEGER NOT NULL,
    tokens     INTEGER NOT NULL CHECK (tokens >= 0),
    total      INTEGER NOT NULL,
    cost       INTEGER NOT NULL DEFAULT 0 CHECK (cost >= 0),
    cost_total INTEGER NOT NULL DEFAULT 0,
    CHECK (tokens > 0 OR cost > 0),
    PRIMARY KEY (user_id, ts, total, cost_total)
) WITHOUT ROWID;
INSERT INTO call_tokens_new (user_id, ts, tokens, total) SELECT user_id, ts, tokens, total FROM call_tokens;
DROP TABLE call_tokens;
ALTER TABLE call_tokens_new RENAME TO call_tokens;
CREATE INDEX call_tokens_total ON call_tokens (user_id, total, cost_total);
CREATE INDEX call_tokens_cost ON call_tokens (user_id, cost_total) WHERE cost > 0;

-- +goose Down
-- Rows of cost alone go; every row of tokens stays.
CREATE TABLE call_tokens_old (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL,
    tokens  INTEGER NOT NULL CHECK (tokens > 0),
    total   INTEGER NOT NULL,
    PRIMARY KEY (user_id, ts, total)
) WITHOUT ROWID;
INSERT INTO call_tokens_old (user_id, ts, tokens, total) SELECT user_id, ts, tokens, total FROM call_tokens WHERE tokens > 0;
DROP TABLE call_tokens;
ALTER TABLE call_tokens_old RENAME TO call_tokens;
CREATE UNIQUE INDEX call_tokens_total ON call_tokens (user_id, total);
DROP INDEX calls_finished_tier;
CREATE INDEX calls_finished_tier ON calls (finished_at, tier, tokens) WHERE finished_at IS NOT NULL;
ALTER TABLE calls DROP COLUMN reported_cost;
ALTER TABLE calls DROP COLUMN cost;
ALTER TABLE calls DROP COLUMN reserved_cost;
ALTER TABLE calls DROP COLUMN price_cache_write;
ALTER TABLE calls DROP COLUMN price_cache_read;
ALTER TABLE calls DROP COLUMN price_output;
ALTER TABLE calls DROP COLUMN price_input;
ALTER TABLE calls DROP COLUMN price_upstream;
ALTER TABLE calls DROP COLUMN price_model;
ALTER TABLE calls DROP COLUMN price_version;
ALTER TABLE calls DROP COLUMN upstream;
ALTER TABLE calls DROP COLUMN model;
