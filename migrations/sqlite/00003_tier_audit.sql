-- +goose Up
-- Every change to a tier, whichever path made it, oldest first. old and new
-- are the tier as JSON with the API's field names; old is NULL when the
-- change created the tier, new when it deleted it.
CREATE TABLE tier_changes (
    id     INTEGER PRIMARY KEY,
    at     INTEGER NOT NULL, -- unix microseconds
    tier   TEXT    NOT NULL,
    source TEXT    NOT NULL, -- "api", "admin", "import" or "library"
    old    TEXT,
    new    TEXT
);

-- tier_version counts writes to tiers. The triggers bump it whoever writes,
-- this service, another process sharing the file (policyguard tiers import)
-- or the sqlite3 shell, so a running service that reads it before each
-- check knows when its cache of tiers is stale.
CREATE TABLE tier_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO tier_version (id, version) VALUES (1, 1);

-- +goose StatementBegin
CREATE TRIGGER tiers_insert_version AFTER INSERT ON tiers BEGIN
    UPDATE tier_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER tiers_update_version AFTER UPDATE ON tiers BEGIN
    UPDATE tier_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER tiers_delete_version AFTER DELETE ON tiers BEGIN
    UPDATE tier_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER tiers_delete_version;
DROP TRIGGER tiers_update_version;
DROP TRIGGER tiers_insert_version;
DROP TABLE tier_version;
DROP TABLE tier_changes;
