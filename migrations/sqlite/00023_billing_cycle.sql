-- +goose Up
-- Where a subscriber's billing periods fall: an IANA time zone name and
-- the day of the month they start on. NULL keeps the default: a member's
-- account's, else the service's -time-zone and the 1st.
ALTER TABLE users ADD COLUMN time_zone TEXT CHECK (time_zone <> '');
ALTER TABLE users ADD COLUMN billing_anchor INTEGER CHECK (billing_anchor BETWEEN 1 AND 31);
ALTER TABLE accounts ADD COLUMN time_zone TEXT CHECK (time_zone <> '');
ALTER TABLE accounts ADD COLUMN billing_anchor INTEGER CHECK (billing_anchor BETWEEN 1 AND 31);

-- +goose Down
ALTER TABLE accounts DROP COLUMN billing_anchor;
ALTER TABLE accounts DROP COLUMN time_zone;
ALTER TABLE users DROP COLUMN billing_anchor;
ALTER TABLE users DROP COLUMN time_zone;
