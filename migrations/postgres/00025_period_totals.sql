-- +goose Up
-- Billing periods' totals: see the SQLite migration 25.
CREATE TABLE period_totals (
    key          TEXT   COLLATE "C" NOT NULL,
    period_start BIGINT NOT NULL,
    period_end   BIGINT NOT NULL CHECK (period_end > period_start),
    requests     BIGINT NOT NULL DEFAULT 0 CHECK (requests >= 0),
    tokens       BIGINT NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    cost         BIGINT NOT NULL DEFAULT 0 CHECK (cost >= 0),
    PRIMARY KEY (key, period_start)
);
CREATE INDEX period_totals_end ON period_totals (period_end);
CREATE TABLE period_marks (
    key         TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    requests_to BIGINT NOT NULL DEFAULT 0,
    tokens_to   BIGINT NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE period_marks;
DROP TABLE period_totals;
