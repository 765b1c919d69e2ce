-- +goose Up
-- Organizations (see the SQLite migration 13).
CREATE TABLE accounts (
    account_id TEXT   COLLATE "C" PRIMARY KEY,
    tier       TEXT   COLLATE "C" NOT NULL,
    limits     TEXT   NOT NULL DEFAULT '{}',
    note       TEXT   NOT NULL DEFAULT '',
    updated_at BIGINT NOT NULL -- unix microseconds
);
CREATE INDEX accounts_tier ON accounts (tier);
ALTER TABLE tiers ADD COLUMN account TEXT;
ALTER TABLE users ADD COLUMN account TEXT COLLATE "C";
CREATE INDEX users_account ON users (account, user_id) WHERE account IS NOT NULL;
ALTER TABLE calls ADD COLUMN account TEXT COLLATE "C";

-- +goose Down
ALTER TABLE calls DROP COLUMN account;
DROP INDEX users_account;
ALTER TABLE users DROP COLUMN account;
ALTER TABLE tiers DROP COLUMN account;
DROP TABLE accounts;
