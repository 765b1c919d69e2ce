-- +goose Up
-- A set of limits is one JSON column keyed by the limit's name (the names
-- of policy.LimitFields, as the API spells them), as tiers.shadow,
-- tiers.account and accounts.limits already were: a new limit needs no
-- migration, and its range is policy's to check (a limit may exceed a
-- 32-bit integer: money is counted in picodollars).
--
-- tiers.limits holds every limit of the tier, null when unset. users.limits
-- holds the limits the record overrides, as accounts.limits does: a name
-- absent keeps the tier's limit, null removes it. It replaces the column
-- per limit and the overrides bitmask, whose bits followed the order of
-- the optional limits (bit 0 tokens_per_minute to bit 3 max_concurrent).
ALTER TABLE tiers ADD COLUMN limits TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(limits));
UPDATE tiers SET limits = json_object(
    'requests_per_minute', requests_per_minute,
    'requests_per_hour',   requests_per_hour,
    'requests_per_day',    requests_per_day,
    'burst_allowance',     burst_allowance,
    'tokens_per_minute',   tokens_per_minute,
    'tokens_per_hour',     tokens_per_hour,
    'tokens_per_day',      tokens_per_day,
    'max_concurrent',      max_concurrent);
ALTER TABLE tiers DROP COLUMN requests_per_minute;
ALTER TABLE tiers DROP COLUMN requests_per_hour;
ALTER TABLE tiers DROP COLUMN requests_per_day;
ALTER TABLE tiers DROP COLUMN burst_allowance;
ALTER TABLE tiers DROP COLUMN tokens_per_minute;
ALTER TABLE tiers DROP COLUMN tokens_per_hour;
ALTER TABLE tiers DROP COLUMN tokens_per_day;
ALTER TABLE tiers DROP COLUMN max_concurrent;

ALTER TABLE users ADD COLUMN limits TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(limits));
UPDATE users SET limits = (
    SELECT json_group_object(name, value) FROM (
        SELECT 'requests_per_minute' AS name, users.requests_per_minute AS value WHERE users.requests_per_minute IS NOT NULL
        UNION ALL SELECT 'requests_per_hour', users.requests_per_hour WHERE users.requests_per_hour IS NOT NULL
        UNION ALL SELECT 'requests_per_day', users.requests_per_day WHERE users.requests_per_day IS NOT NULL
        UNION ALL SELECT 'burst_allowance', users.burst_allowance WHERE users.burst_allowance IS NOT NULL
        UNION ALL SELECT 'tokens_per_minute', users.tokens_per_minute WHERE users.overrides & 1
        UNION ALL SELECT 'tokens_per_hour', users.tokens_per_hour WHERE users.overrides & 2
        UNION ALL SELECT 'tokens_per_day', users.tokens_per_day WHERE users.overrides & 4
        UNION ALL SELECT 'max_concurrent', users.max_concurrent WHERE users.overrides & 8));
ALTER TABLE users DROP COLUMN requests_per_minute;
ALTER TABLE users DROP COLUMN requests_per_hour;
ALTER TABLE users DROP COLUMN requests_per_day;
ALTER TABLE users DROP COLUMN burst_allowance;
ALTER TABLE users DROP COLUMN tokens_per_minute;
ALTER TABLE users DROP COLUMN tokens_per_hour;
ALTER TABLE users DROP COLUMN tokens_per_day;
ALTER TABLE users DROP COLUMN max_concurrent;
ALTER TABLE users DROP COLUMN overrides;

-- +goose Down
-- The columns come back at the end of their tables, with the ranges they
-- had; a limit a later version added is dropped, and a value out of a
-- column's range fails the migration rather than being cut.
ALTER TABLE users ADD COLUMN requests_per_minute INTEGER CHECK (requests_per_minute BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN requests_per_hour   INTEGER CHECK (requests_per_hour   BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN requests_per_day    INTEGER CHECK (requests_per_day    BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN burst_allowance     INTEGER CHECK (burst_allowance     BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN tokens_per_minute   INTEGER CHECK (tokens_per_minute   BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN tokens_per_hour     INTEGER CHECK (tokens_per_hour     BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN tokens_per_day      INTEGER CHECK (tokens_per_day      BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN max_concurrent      INTEGER CHECK (max_concurrent      BETWEEN 0 AND 2147483647);
ALTER TABLE users ADD COLUMN overrides           INTEGER NOT NULL DEFAULT 0;
UPDATE users SET
    requests_per_minute = json_extract(limits, '$.requests_per_minute'),
    requests_per_hour   = json_extract(limits, '$.requests_per_hour'),
    requests_per_day    = json_extract(limits, '$.requests_per_day'),
    burst_allowance     = json_extract(limits, '$.burst_allowance'),
    tokens_per_minute   = json_extract(limits, '$.tokens_per_minute'),
    tokens_per_hour     = json_extract(limits, '$.tokens_per_hour'),
    tokens_per_day      = json_extract(limits, '$.tokens_per_day'),
    max_concurrent      = json_extract(limits, '$.max_concurrent'),
    -- | and << bind alike, left to right: each shift in parentheses.
    overrides = (json_type(limits, '$.tokens_per_minute') IS NOT NULL)
              | ((json_type(limits, '$.tokens_per_hour') IS NOT NULL) << 1)
              | ((json_type(limits, '$.tokens_per_day') IS NOT NULL) << 2)
              | ((json_type(limits, '$.max_concurrent') IS NOT NULL) << 3);
ALTER TABLE users DROP COLUMN limits;

ALTER TABLE tiers ADD COLUMN requests_per_minute INTEGER NOT NULL DEFAULT 0 CHECK (requests_per_minute BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN requests_per_hour   INTEGER NOT NULL DEFAULT 0 CHECK (requests_per_hour   BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN requests_per_day    INTEGER NOT NULL DEFAULT 0 CHECK (requests_per_day    BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN burst_allowance     INTEGER NOT NULL DEFAULT 0 CHECK (burst_allowance     BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN tokens_per_minute   INTEGER CHECK (tokens_per_minute BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN tokens_per_hour     INTEGER CHECK (tokens_per_hour   BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN tokens_per_day      INTEGER CHECK (tokens_per_day    BETWEEN 0 AND 2147483647);
ALTER TABLE tiers ADD COLUMN max_concurrent      INTEGER CHECK (max_concurrent    BETWEEN 0 AND 2147483647);
UPDATE tiers SET
    requests_per_minute = coalesce(json_extract(limits, '$.requests_per_minute'), 0),
    requests_per_hour   = coalesce(json_extract(limits, '$.requests_per_hour'), 0),
    requests_per_day    = coalesce(json_extract(limits, '$.requests_per_day'), 0),
    burst_allowance     = coalesce(json_extract(limits, '$.burst_allowance'), 0),
    tokens_per_minute   = json_extract(limits, '$.tokens_per_minute'),
    tokens_per_hour     = json_extract(limits, '$.tokens_per_hour'),
    tokens_per_day      = json_extract(limits, '$.tokens_per_day'),
    max_concurrent      = json_extract(limits, '$.max_concurrent');
ALTER TABLE tiers DROP COLUMN limits;
