-- +goose Up
-- calls_user listed every call of a user, open ones first, keyed by
-- (user_id, finished_at, expires_at): finishing a call moved its entry from
-- the user's open calls to the end of the user's finished ones, and the
-- index kept a day of them. Once each user's calls filled pages of their
-- own, a batch of finishes of k users wrote about 2k pages of it, where at
-- first they had shared a few. Two partial indexes replace it:
--
-- calls_open holds the open calls only, per user in expiry order: as many
-- entries as calls in flight however long the service runs, in a few
-- pages that every batch shares. Finishing a call drops its entry.
--
-- calls_finished_user holds the finished calls per user, in id order (ids
-- of calls opened close in time sort close together), written once when
-- a call finishes and never moved, for Forget alone, which deletes a
-- user's finished calls too. Without it Forget would scan a day of every
-- user's calls in the writer's transaction, every check waiting behind it.
-- Being partial, it is never a candidate for the reads of open calls.
--
-- The cleanup deletes finished calls through calls_finished_tier, in
-- finishing order, whoever they belong to.
DROP INDEX calls_user;
CREATE INDEX calls_open ON calls (user_id, expires_at) WHERE finished_at IS NULL;
CREATE INDEX calls_finished_user ON calls (user_id) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX calls_finished_user;
DROP INDEX calls_open;
CREATE INDEX calls_user ON calls (user_id, finished_at, expires_at);
