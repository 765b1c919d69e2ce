-- +goose Up
-- Billing periods' totals. The cleanup deletes the rows of requests and of
-- finished tokens older than a day; before it does, in the same
-- transaction, it adds them to the totals of the period each row fell in,
-- under the key's billing cycle at the time (a user id, or an account's
-- pool key), and moves the key's watermarks: every row of requests at or
-- before requests_to, and of call_tokens at or before tokens_to, is in the
-- totals. A period's use is its totals plus the rows after the watermark.
-- Times are Unix microseconds, cost picodollars. Totals are kept 13
-- months after their period ends.
CREATE TABLE period_totals (
    key          TEXT    NOT NULL,
    period_start INTEGER NOT NULL,
    period_end   INTEGER NOT NULL CHECK (period_end > period_start),
    requests     INTEGER NOT NULL DEFAULT 0 CHECK (requests >= 0),
    tokens       INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    cost         INTEGER NOT NULL DEFAULT 0 CHECK (cost >= 0),
    PRIMARY KEY (key, period_start)
) WITHOUT ROWID;
CREATE INDEX period_totals_end ON period_totals (period_end);
CREATE TABLE period_marks (
    key         TEXT    NOT NULL PRIMARY KEY,
    requests_to INTEGER NOT NULL DEFAULT 0,
    tokens_to   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- +goose Down
DROP TABLE period_marks;
DROP TABLE period_totals;
