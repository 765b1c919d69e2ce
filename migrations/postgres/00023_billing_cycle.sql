-- +goose Up
-- Where a subscriber's billing periods fall: see the SQLite migration 23.
ALTER TABLE users ADD COLUMN time_zone TEXT CHECK (time_zone <> ''),
    ADD COLUMN billing_anchor SMALLINT CHECK (billing_anchor BETWEEN 1 AND 31);
ALTER TABLE accounts ADD COLUMN time_zone TEXT CHECK (time_zone <> ''),
    ADD COLUMN billing_anchor SMALLINT CHECK (billing_anchor BETWEEN 1 AND 31);

-- +goose Down
ALTER TABLE accounts DROP COLUMN billing_anchor, DROP COLUMN time_zone;
ALTER TABLE users DROP COLUMN billing_anchor, DROP COLUMN time_zone;
