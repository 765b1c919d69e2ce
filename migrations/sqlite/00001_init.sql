-- +goose Up
CREATE TABLE tiers (
    name                TEXT    PRIMARY KEY NOT NULL,
    requests_per_minute INTEGER NOT NULL CHECK (requests_per_minute BETWEEN 0 AND 2147483647),
    requests_per_hour   INTEGER NOT NULL CHECK (requests_per_hour   BETWEEN 0 AND 2147483647),
    requests_per_day    INTEGER NOT NULL CHECK (requests_per_day    BETWEEN 0 AND 2147483647),
    burst_allowance     INTEGER NOT NULL CHECK (burst_allowance     BETWEEN 0 AND 2147483647),
    features            TEXT    NOT NULL DEFAULT '[]', -- JSON array of feature names; "*" = all
    description         TEXT    NOT NULL DEFAULT '',
    updated_at          INTEGER NOT NULL               -- unix microseconds
);

-- One row per admitted request. The key is (user, timestamp): a user's
-- timestamps strictly increase, so each window's oldest row is one seek.
-- seq numbers a user's rows consecutively, so a window's count is the
-- difference of two seqs instead of a scan, whatever the window holds.
-- WITHOUT ROWID makes an admission a single B-tree insert.
CREATE TABLE requests (
    user_id TEXT    NOT NULL,
    ts      INTEGER NOT NULL, -- unix microseconds
    seq     INTEGER NOT NULL,
    PRIMARY KEY (user_id, ts)
) WITHOUT ROWID;

-- Seeded plans; edit them through the API or the admin page.
INSERT INTO tiers (name, requests_per_minute, requests_per_hour, requests_per_day, burst_allowance, features, description, updated_at) VALUES
    ('free',        10,    100,    1000,   5, '["chat"]',                      'Free plan: chat only, low limits.',                 0),
    ('pro',         60,   2000,   20000,  10, '["chat","search","summarize"]', 'Pro plan: more features and higher limits.',        0),
    ('enterprise', 600,  30000,  500000, 100, '["*"]',                         'Enterprise plan: every feature, the highest limits.', 0);

-- +goose Down
DROP TABLE requests;
DROP TABLE tiers;
