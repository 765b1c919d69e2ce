-- +goose Up
-- See the SQLite migration of the same number.
DROP INDEX call_tokens_total;
DROP INDEX call_tokens_cost;

-- +goose Down
CREATE INDEX call_tokens_total ON call_tokens (user_id, total, cost_total);
CREATE INDEX call_tokens_cost ON call_tokens (user_id, cost_total) WHERE cost > 0;
