-- +goose Up
-- The price table, by version. A version is the whole table in force from
-- effective_from until the next version's; versions are never changed, so
-- a call is always priced as it was when admitted, and the versions are
-- their own audit log (created_at, source). Amounts are picodollars per
-- million tokens (policy.Money), times unix microseconds.
CREATE TABLE price_versions (
    id             INTEGER PRIMARY KEY,
    effective_from INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    source         TEXT    NOT NULL -- "api", "admin", "import" or "library"
);

-- upstream is '' for an entry of every upstream.
CREATE TABLE prices (
    version_id  INTEGER NOT NULL REFERENCES price_versions (id) ON DELETE CASCADE,
    model       TEXT    NOT NULL CHECK (model <> ''),
    upstream    TEXT    NOT NULL DEFAULT '',
    input       INTEGER NOT NULL CHECK (input >= 0),
    output      INTEGER NOT NULL CHECK (output >= 0),
    cache_read  INTEGER NOT NULL CHECK (cache_read >= 0),
    cache_write INTEGER NOT NULL CHECK (cache_write >= 0),
    PRIMARY KEY (version_id, model, upstream)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE prices;
DROP TABLE price_versions;
