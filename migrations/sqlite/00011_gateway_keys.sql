-- +goose Up
-- Keys of the model gateway. secret_hash is the SHA-256 of the key's
-- secret, which is never stored; the gateway finds a key by it. user_id is
-- the user the key speaks for, NULL for a service key, which names its
-- user in each request. Revoking a key deletes its row, so its secret can
-- never come back.
CREATE TABLE gateway_keys (
    id           TEXT    PRIMARY KEY NOT NULL,
    secret_hash  BLOB    NOT NULL UNIQUE CHECK (length(secret_hash) = 32),
    user_id      TEXT,
    service      INTEGER NOT NULL CHECK (service IN (0, 1)),
    note         TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL, -- unix microseconds
    last_used_at INTEGER,          -- unix microseconds, NULL until first used
    CHECK ((user_id IS NULL) = (service = 1))
);
CREATE INDEX gateway_keys_user ON gateway_keys (user_id, created_at);

-- +goose Down
DROP TABLE gateway_keys;
