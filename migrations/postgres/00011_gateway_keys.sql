-- +goose Up
-- Keys of the model gateway (see the SQLite migration 11): only the
-- SHA-256 of a secret is stored; user_id is NULL for a service key; a
-- revoked key's row is deleted.
CREATE TABLE gateway_keys (
    id           TEXT    COLLATE "C" PRIMARY KEY,
    secret_hash  BYTEA   NOT NULL UNIQUE CHECK (length(secret_hash) = 32),
    user_id      TEXT    COLLATE "C",
    service      BOOLEAN NOT NULL,
    note         TEXT    NOT NULL DEFAULT '',
    created_at   BIGINT  NOT NULL, -- unix microseconds
    last_used_at BIGINT,           -- unix microseconds, NULL until first used
    CHECK ((user_id IS NULL) = service)
);
CREATE INDEX gateway_keys_user ON gateway_keys (user_id, created_at);

-- +goose Down
DROP TABLE gateway_keys;
