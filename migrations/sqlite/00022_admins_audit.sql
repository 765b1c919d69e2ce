-- +goose Up
-- Named admins, each with one role and its own token, of which only the
-- SHA-256 is kept. A revoked admin's row stays, for the audit log's sake;
-- its name may then be given to a new admin, who replaces the row.
CREATE TABLE admins (
    name         TEXT    PRIMARY KEY NOT NULL,
    role         TEXT    NOT NULL CHECK (role IN ('viewer', 'support', 'admin')),
    note         TEXT    NOT NULL DEFAULT '',
    token_hash   BLOB    NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at   INTEGER NOT NULL, -- unix microseconds
    last_used_at INTEGER,          -- unix microseconds, NULL until first used
    revoked_at   INTEGER           -- unix microseconds, NULL while the admin is live
) WITHOUT ROWID;

-- Every change, of whatever kind, newest last: who made it (an admin's
-- name, "bootstrap" for the -admin-token, a command's name, "unknown"
-- before this log named anyone), what kind of thing it changed and which
-- one, and the thing before and after as JSON with the API's field names
-- (NULL for none). Each entry commits with its change.
CREATE TABLE audit_log (
    id      INTEGER PRIMARY KEY,
    at      INTEGER NOT NULL, -- unix microseconds
    actor   TEXT    NOT NULL,
    kind    TEXT    NOT NULL, -- "tiers", "users", "accounts", "keys", "usage", "prices", "admins"
    subject TEXT    NOT NULL,
    action  TEXT    NOT NULL, -- "created", "updated", "deleted", "revoked", "forgotten"
    source  TEXT    NOT NULL, -- "api", "admin", "import" or "library"
    old     TEXT,
    new     TEXT
);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_kind ON audit_log (kind, id);
CREATE INDEX audit_log_at ON audit_log (at);

-- The changes logged before, under the actor "unknown", in their order.
INSERT INTO audit_log (at, actor, kind, subject, action, source, old, new)
SELECT at, 'unknown', kind, subject,
       CASE WHEN old IS NULL THEN 'created' WHEN new IS NULL THEN 'deleted' ELSE 'updated' END,
       source, old, new
FROM (
    SELECT at, id, 0 AS t, 'tiers' AS kind, tier AS subject, source, old, new FROM tier_changes
    UNION ALL
    SELECT at, id, 1, 'users', user_id, source, old, new FROM user_changes
    UNION ALL
    SELECT created_at, id, 2, 'prices', CAST(id AS TEXT), source, NULL, json_object('version', id, 'effective_from', strftime('%Y-%m-%dT%H:%M:%SZ', effective_from / 1000000, 'unixepoch')) FROM price_versions
) ORDER BY at, t, id;

-- The tier and user audit logs gain the actor too.
ALTER TABLE tier_changes ADD COLUMN actor TEXT NOT NULL DEFAULT 'unknown';
ALTER TABLE user_changes ADD COLUMN actor TEXT NOT NULL DEFAULT 'unknown';

-- A page session belongs to a named admin, or to the -admin-token ('').
ALTER TABLE admin_sessions ADD COLUMN admin_name TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE admin_sessions DROP COLUMN admin_name;
ALTER TABLE user_changes DROP COLUMN actor;
ALTER TABLE tier_changes DROP COLUMN actor;
DROP TABLE audit_log;
DROP TABLE admins;
