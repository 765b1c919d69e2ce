-- +goose Up
-- Organizations. An account is a subscription its members share: tier
-- names its plan, whose tiers.account holds the pooled limits of an
-- account on it; limits overrides them, field by field, as a JSON object
-- with the API's field names ({"tokens_per_day": 2000000,
-- "max_concurrent": null}: absent keeps the plan's, null removes it).
CREATE TABLE accounts (
    account_id TEXT    PRIMARY KEY NOT NULL,
    tier       TEXT    NOT NULL,
    limits     TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(limits)),
    note       TEXT    NOT NULL DEFAULT '',
    updated_at INTEGER NOT NULL -- unix microseconds
) WITHOUT ROWID;
CREATE INDEX accounts_tier ON accounts (tier);

-- The pooled limits of an account on a tier: NULL for none, or a JSON
-- object of every limit field (null: no limit).
ALTER TABLE tiers ADD COLUMN account TEXT CHECK (account IS NULL OR json_valid(account));

-- The account a user belongs to; NULL for none.
ALTER TABLE users ADD COLUMN account TEXT;
CREATE INDEX users_account ON users (account, user_id) WHERE account IS NOT NULL;

-- The account whose pool a member's call also counts in, under the id
-- <id>-pool and the pool's key as user_id; NULL for none.
ALTER TABLE calls ADD COLUMN account TEXT;

-- +goose Down
ALTER TABLE calls DROP COLUMN account;
DROP INDEX users_account;
ALTER TABLE users DROP COLUMN account;
ALTER TABLE tiers DROP COLUMN account;
DROP TABLE accounts;
