-- +goose Up
-- call_tokens_total and call_tokens_cost found the row where a user's
-- running total of tokens or cost reaches an amount, for a refusal's
-- retry_after, at the price of a page of each, keyed by user, written by
-- every commit for each user it finished a call of: a quarter of what a
-- gateway call wrote once each user's rows filled pages of their own.
-- A user's rows are in the same order by time as by either total, so
-- that row is now found by probing the key by time (see db's calls.go).
DROP INDEX call_tokens_total;
DROP INDEX call_tokens_cost;

-- +goose Down
CREATE INDEX call_tokens_total ON call_tokens (user_id, total, cost_total);
CREATE INDEX call_tokens_cost ON call_tokens (user_id, cost_total) WHERE cost > 0;
