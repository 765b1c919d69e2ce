-- +goose Up
-- As SQLite's migration 17: calls_user, which kept every call of a user
-- and moved a call's entry when it finished, becomes calls_open (the open
-- calls only, per user in expiry order, which admit_batch, finish_call
-- and the statistics read) and calls_finished_user (the finished calls per
-- user, for Forget). The cleanup deletes finished calls through
-- calls_finished_tier.
DROP INDEX calls_user;
CREATE INDEX calls_open ON calls (user_id, expires_at) WHERE finished_at IS NULL;
CREATE INDEX calls_finished_user ON calls (user_id) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX calls_finished_user;
DROP INDEX calls_open;
CREATE INDEX calls_user ON calls (user_id, finished_at NULLS FIRST, expires_at);
