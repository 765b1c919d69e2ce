-- +goose Up
-- Shadow limits of a tier: NULL, or a JSON object of the four request
-- limits ({"requests_per_minute", "requests_per_hour", "requests_per_day",
-- "burst_allowance"}) every check under the tier is also decided against,
-- never refused by.
ALTER TABLE tiers ADD COLUMN shadow TEXT CHECK (shadow IS NULL OR json_valid(shadow));

-- A number per tier name, recorded with each request checked under it so
-- that a preview can replay the requests of one tier. A name keeps its
-- number for good, through deletion and re-creation, so the rows of a tier
-- deleted and made again are still its rows. The trigger numbers a tier
-- whoever inserts it, this service, another process or the sqlite3 shell.
CREATE TABLE tier_ids (
    id   INTEGER PRIMARY KEY,
    name TEXT    NOT NULL UNIQUE
);
INSERT INTO tier_ids (name) SELECT name FROM tiers ORDER BY name;
-- +goose StatementBegin
CREATE TRIGGER tiers_insert_id AFTER INSERT ON tiers BEGIN
    INSERT OR IGNORE INTO tier_ids (name) VALUES (NEW.name);
END;
-- +goose StatementEnd

-- The tier a request was checked under (tier_ids.id); NULL for requests
-- recorded before this column, which previews leave out. No index: a
-- preview reads the table in key order, which groups it by user in time
-- order already, and an index would cost every admission a second insert.
ALTER TABLE requests ADD COLUMN tier_id INTEGER;

-- +goose Down
ALTER TABLE requests DROP COLUMN tier_id;
DROP TRIGGER tiers_insert_id;
DROP TABLE tier_ids;
ALTER TABLE tiers DROP COLUMN shadow;
