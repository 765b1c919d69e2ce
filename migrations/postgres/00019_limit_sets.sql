-- +goose Up
-- A set of limits is one JSON column keyed by the limit's name (the names
-- of policy.LimitFields, as the API spells them), as tiers.shadow,
-- tiers.account and accounts.limits already were: a new limit needs no
-- migration, and its range is policy's to check (a limit may exceed a
-- 32-bit integer: money is counted in picodollars). See the SQLite
-- migration 19.
--
-- tiers.limits holds every limit of the tier, null when unset. users.limits
-- holds the limits the record overrides: a name absent keeps the tier's
-- limit, null removes it. It replaces the column per limit and the
-- overrides bitmask. Both are JSONB, so that admit_batch compares the
-- record it read with the one the check was decided under as values,
-- whoever wrote them; it takes and answers the record's limits as JSON
-- text, and user_limits, which listed the columns in order, goes.
ALTER TABLE tiers ADD COLUMN limits JSONB NOT NULL DEFAULT '{}';
UPDATE tiers SET limits = jsonb_build_object(
    'requests_per_minute', requests_per_minute,
    'requests_per_hour',   requests_per_hour,
    'requests_per_day',    requests_per_day,
    'burst_allowance',     burst_allowance,
    'tokens_per_minute',   tokens_per_minute,
    'tokens_per_hour',     tokens_per_hour,
    'tokens_per_day',      tokens_per_day,
    'max_concurrent',      max_concurrent);
ALTER TABLE tiers
    DROP COLUMN requests_per_minute, DROP COLUMN requests_per_hour, DROP COLUMN requests_per_day, DROP COLUMN burst_allowance,
    DROP COLUMN tokens_per_minute, DROP COLUMN tokens_per_hour, DROP COLUMN tokens_per_day, DROP COLUMN max_concurrent;

DROP FUNCTION admit_batch(INTEGER[], BIGINT, TEXT[], BIGINT[], BIGINT[], BIGINT[], BOOLEAN[], SMALLINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[], BIGINT[]);
DROP FUNCTION user_limits(users);
ALTER TABLE users ADD COLUMN limits JSONB NOT NULL DEFAULT '{}';
UPDATE users SET limits = (
    SELECT coalesce(jsonb_object_agg(l.name, l.value), '{}') FROM (VALUES
        ('requests_per_minute', requests_per_minute, requests_per_minute IS NOT NULL),
        ('requests_per_hour',   requests_per_hour,   requests_per_hour IS NOT NULL),
        ('requests_per_day',    requests_per_day,    requests_per_day IS NOT NULL),
        ('burst_allowance',     burst_allowance,     burst_allowance IS NOT NULL),
        ('tokens_per_minute',   tokens_per_minute,   overrides & 1 <> 0),
        ('tokens_per_hour',     tokens_per_hour,     overrides & 2 <> 0),
        ('tokens_per_day',      tokens_per_day,      overrides & 4 <> 0),
        ('max_concurrent',      max_concurrent,      overrides & 8 <> 0)) AS l (name, value, set)
    WHERE l.set);
ALTER TABLE users
    DROP COLUMN requests_per_minute, DROP COLUMN requests_per_hour, DROP COLUMN requests_per_day, DROP COLUMN burst_allowance,
    DROP COLUMN tokens_per_minute, DROP COLUMN tokens_per_hour, DROP COLUMN tokens_per_day, DROP COLUMN max_concurrent,
    DROP COLUMN overrides;
-- +goose StatementBegin
CREATE FUNCTION admit_batch(
    p_keys      INTEGER[],
    p_version   BIGINT,
    p_users     TEXT[],
    p_now       BIGINT[],
    p_ceil      BIGINT[],
    p_tier_id   BIGINT[],
    p_tier_same BOOLEAN[],
    p_user_mode SMALLINT[],
    p_user_tier TEXT[],
    p_user_lim  TEXT[],   -- the record's users.limits, as JSON
    p_call_id   TEXT[],
    p_call_tier TEXT[],
    p_tokens    BIGINT[],
    p_tok_lim   BIGINT[],
    p_max_conc  BIGINT[],
    p_expires   BIGINT[]
) RETURNS TABLE (
    o_status       SMALLINT,
    o_version      BIGINT,
    o_last_ts      BIGINT,  -- the user's newest request before this one; NULL for none
    o_last_seq     BIGINT,
    o_ts1          BIGINT,  -- the oldest request in the minute window; NULL for none
    o_seq1         BIGINT,
    o_ts2          BIGINT,  -- the hour's
    o_seq2         BIGINT,
    o_ts3          BIGINT,  -- the day's
    o_seq3         BIGINT,
    o_user_found   BOOLEAN, -- the record, when one was to be confirmed
    o_user_tier    TEXT,
    o_lims         TEXT,    -- the record's users.limits, as JSON
    o_user_note    TEXT,
    o_user_updated BIGINT,
    o_recorded     BOOLEAN,
    o_rec_ts       BIGINT,
    o_open         BIGINT,  -- metered: calls open and tokens reserved, once settled
    o_reserved     BIGINT,
    o_tok_last_ts  BIGINT,  -- the newest finished tokens; NULL for none
    o_tok_total    BIGINT,
    o_tts1         BIGINT,  -- the oldest finished tokens in the minute window, and the total before them
    o_tbefore1     BIGINT,
    o_tts2         BIGINT,
    o_tbefore2     BIGINT,
    o_tts3         BIGINT,
    o_tbefore3     BIGINT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    k       INTEGER;
    ver     BIGINT;
    u       TEXT;
    t_now   BIGINT;
    c1      BIGINT;
    c2      BIGINT;
    c3      BIGINT;
    b       INTEGER;
    allowed BOOLEAN;
    n_calls BIGINT;
    fin     BIGINT;
    ex      RECORD;
    t_at    BIGINT;
    acct    TEXT;
    lims    JSONB;
BEGIN
    FOREACH k IN ARRAY p_keys LOOP
        PERFORM pg_advisory_xact_lock(1, k);
    END LOOP;
    SELECT v.version INTO ver FROM tier_version AS v WHERE v.id = 1;
    FOR i IN 1 .. coalesce(cardinality(p_users), 0) LOOP
        o_status := 0; o_version := ver;
        o_last_ts := NULL; o_last_seq := NULL;
        o_ts1 := NULL; o_seq1 := NULL; o_ts2 := NULL; o_seq2 := NULL; o_ts3 := NULL; o_seq3 := NULL;
        o_user_found := NULL; o_user_tier := NULL; o_user_note := NULL; o_user_updated := NULL;
        o_lims := NULL;
        o_recorded := false; o_rec_ts := NULL;
        o_open := NULL; o_reserved := NULL; o_tok_last_ts := NULL; o_tok_total := NULL;
        o_tts1 := NULL; o_tbefore1 := NULL; o_tts2 := NULL; o_tbefore2 := NULL; o_tts3 := NULL; o_tbefore3 := NULL;
        u := p_users[i];
        t_now := p_now[i];

        IF ver <> p_version OR NOT p_tier_same[i] THEN
            o_status := 1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF p_user_mode[i] <> 0 THEN
            SELECT r.tier, r.limits, r.note, r.updated_at, r.account
              INTO o_user_tier, lims, o_user_note, o_user_updated, acct
              FROM users AS r WHERE r.user_id = u;
            o_user_found := FOUND;
            o_lims := lims::text;
            IF p_user_mode[i] = 1 AND o_user_found
               OR p_user_mode[i] = 2 AND NOT (o_user_found
                   AND acct IS NULL
                   AND o_user_tier IS NOT DISTINCT FROM p_user_tier[i]
                   AND lims = p_user_lim[i]::jsonb) THEN -- as values: members in any order and spacing
                o_status := 2;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;

        -- The windows: the oldest row after each cutoff, from the longest
        -- window to the shortest; a row after a shorter window's cutoff is
        -- that window's oldest too.
        c1 := t_now - 60000000;
        c2 := t_now - 3600000000;
        c3 := t_now - 86400000000;
        SELECT r.ts, r.seq INTO o_last_ts, o_last_seq FROM requests AS r
            WHERE r.user_id = u ORDER BY r.ts DESC, r.seq DESC LIMIT 1;
        IF o_last_ts > c3 THEN
            SELECT r.ts, r.seq INTO o_ts3, o_seq3 FROM requests AS r
                WHERE r.user_id = u AND r.ts > c3 ORDER BY r.ts, r.seq LIMIT 1;
            IF o_ts3 > c2 THEN
                o_ts2 := o_ts3; o_seq2 := o_seq3;
            ELSIF o_last_ts > c2 THEN
                SELECT r.ts, r.seq INTO o_ts2, o_seq2 FROM requests AS r
                    WHERE r.user_id = u AND r.ts > c2 ORDER BY r.ts, r.seq LIMIT 1;
            END IF;
            IF o_ts2 > c1 THEN
                o_ts1 := o_ts2; o_seq1 := o_seq2;
            ELSIF o_last_ts > c1 THEN
                SELECT r.ts, r.seq INTO o_ts1, o_seq1 FROM requests AS r
                    WHERE r.user_id = u AND r.ts > c1 ORDER BY r.ts, r.seq LIMIT 1;
            END IF;
        END IF;
        b := (i - 1) * 3;
        allowed := coalesce(o_last_seq - o_seq1 + 1, 0) < p_ceil[b + 1]
               AND coalesce(o_last_seq - o_seq2 + 1, 0) < p_ceil[b + 2]
               AND coalesce(o_last_seq - o_seq3 + 1, 0) < p_ceil[b + 3];

        IF p_call_id[i] IS NOT NULL THEN
            -- Settle the calls that expired by now, each at its expiry
            -- (or at the newest finished tokens', when the clock stepped
            -- back) with its reservation, in expiry order.
            SELECT t.ts, t.total INTO o_tok_last_ts, o_tok_total FROM call_tokens AS t
                WHERE t.user_id = u ORDER BY t.ts DESC, t.total DESC LIMIT 1;
            FOR ex IN SELECT c.id, c.reserved, c.expires_at FROM calls AS c
                    WHERE c.user_id = u AND c.finished_at IS NULL AND c.expires_at <= t_now
                    ORDER BY c.expires_at, c.id LOOP
                t_at := greatest(ex.expires_at, o_tok_last_ts);
                IF ex.reserved > 0 THEN
                    o_tok_total := coalesce(o_tok_total, 0) + ex.reserved;
                    o_tok_last_ts := t_at;
                    INSERT INTO call_tokens (user_id, ts, tokens, total) VALUES (u, t_at, ex.reserved, o_tok_total);
                END IF;
                UPDATE calls SET finished_at = t_at, tokens = reserved, expired = 1 WHERE id = ex.id;
            END LOOP;
            SELECT count(*), coalesce(sum(c.reserved), 0) INTO o_open, o_reserved FROM calls AS c
                WHERE c.user_id = u AND c.finished_at IS NULL;
            IF o_tok_last_ts > c3 THEN
                SELECT t.ts, t.total - t.tokens INTO o_tts3, o_tbefore3 FROM call_tokens AS t
                    WHERE t.user_id = u AND t.ts > c3 ORDER BY t.ts, t.total LIMIT 1;
                IF o_tts3 > c2 THEN
                    o_tts2 := o_tts3; o_tbefore2 := o_tbefore3;
                ELSIF o_tok_last_ts > c2 THEN
                    SELECT t.ts, t.total - t.tokens INTO o_tts2, o_tbefore2 FROM call_tokens AS t
                        WHERE t.user_id = u AND t.ts > c2 ORDER BY t.ts, t.total LIMIT 1;
                END IF;
                IF o_tts2 > c1 THEN
                    o_tts1 := o_tts2; o_tbefore1 := o_tbefore2;
                ELSIF o_tok_last_ts > c1 THEN
                    SELECT t.ts, t.total - t.tokens INTO o_tts1, o_tbefore1 FROM call_tokens AS t
                        WHERE t.user_id = u AND t.ts > c1 ORDER BY t.ts, t.total LIMIT 1;
                END IF;
            END IF;
            -- A call fits when the calls in flight are below
            -- max_concurrent and, in each window with a token limit, the
            -- finished tokens plus the reservations and its own are at
            -- most the limit.
            n_calls := p_tokens[i] + o_reserved;
            b := (i - 1) * 3;
            allowed := allowed
                AND (p_max_conc[i] IS NULL OR o_open < p_max_conc[i])
                AND (p_tok_lim[b + 1] IS NULL OR coalesce(o_tok_total - o_tbefore1, 0) + n_calls <= p_tok_lim[b + 1])
                AND (p_tok_lim[b + 2] IS NULL OR coalesce(o_tok_total - o_tbefore2, 0) + n_calls <= p_tok_lim[b + 2])
                AND (p_tok_lim[b + 3] IS NULL OR coalesce(o_tok_total - o_tbefore3, 0) + n_calls <= p_tok_lim[b + 3]);
        END IF;

        IF allowed THEN
            -- Recorded at the check's instant, or at the newest request's
            -- when the clock stepped back, numbered after it.
            o_recorded := true;
            o_rec_ts := greatest(t_now, o_last_ts);
            INSERT INTO requests (user_id, ts, seq, tier_id)
                VALUES (u, o_rec_ts, coalesce(o_last_seq, 0) + 1, nullif(p_tier_id[i], 0));
            IF p_call_id[i] IS NOT NULL THEN
                INSERT INTO calls (id, user_id, tier, reserved, opened_at, expires_at)
                    VALUES (p_call_id[i], u, p_call_tier[i], p_tokens[i], t_now, p_expires[i]);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd


-- +goose Down
-- The columns come back at the end of their tables, with the ranges they
-- had; a limit a later version added is dropped, and a value out of a
-- column's range fails the migration rather than being cut.
DROP FUNCTION admit_batch(INTEGER[], BIGINT, TEXT[], BIGINT[], BIGINT[], BIGINT[], BOOLEAN[], SMALLINT[], TEXT[], TEXT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[], BIGINT[]);
ALTER TABLE users
    ADD COLUMN requests_per_minute BIGINT CHECK (requests_per_minute BETWEEN 0 AND 2147483647),
    ADD COLUMN requests_per_hour   BIGINT CHECK (requests_per_hour   BETWEEN 0 AND 2147483647),
    ADD COLUMN requests_per_day    BIGINT CHECK (requests_per_day    BETWEEN 0 AND 2147483647),
    ADD COLUMN burst_allowance     BIGINT CHECK (burst_allowance     BETWEEN 0 AND 2147483647),
    ADD COLUMN tokens_per_minute   BIGINT CHECK (tokens_per_minute   BETWEEN 0 AND 2147483647),
    ADD COLUMN tokens_per_hour     BIGINT CHECK (tokens_per_hour     BETWEEN 0 AND 2147483647),
    ADD COLUMN tokens_per_day      BIGINT CHECK (tokens_per_day      BETWEEN 0 AND 2147483647),
    ADD COLUMN max_concurrent      BIGINT CHECK (max_concurrent      BETWEEN 0 AND 2147483647),
    ADD COLUMN overrides           BIGINT NOT NULL DEFAULT 0;
UPDATE users SET
    requests_per_minute = (limits->>'requests_per_minute')::bigint,
    requests_per_hour   = (limits->>'requests_per_hour')::bigint,
    requests_per_day    = (limits->>'requests_per_day')::bigint,
    burst_allowance     = (limits->>'burst_allowance')::bigint,
    tokens_per_minute   = (limits->>'tokens_per_minute')::bigint,
    tokens_per_hour     = (limits->>'tokens_per_hour')::bigint,
    tokens_per_day      = (limits->>'tokens_per_day')::bigint,
    max_concurrent      = (limits->>'max_concurrent')::bigint,
    -- | and << bind alike, left to right: each shift in parentheses.
    overrides = (limits ? 'tokens_per_minute')::int | ((limits ? 'tokens_per_hour')::int << 1)
              | ((limits ? 'tokens_per_day')::int << 2) | ((limits ? 'max_concurrent')::int << 3);
ALTER TABLE users DROP COLUMN limits;
-- +goose StatementBegin
CREATE FUNCTION user_limits(r users) RETURNS BIGINT[] LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[r.requests_per_minute, r.requests_per_hour, r.requests_per_day, r.burst_allowance, r.tokens_per_minute, r.tokens_per_hour, r.tokens_per_day, r.max_concurrent]
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION admit_batch(
    p_keys      INTEGER[],
    p_version   BIGINT,
    p_users     TEXT[],
    p_now       BIGINT[],
    p_ceil      BIGINT[],
    p_tier_id   BIGINT[],
    p_tier_same BOOLEAN[],
    p_user_mode SMALLINT[],
    p_user_tier TEXT[],
    p_user_lim  BIGINT[],
    p_user_over BIGINT[],
    p_call_id   TEXT[],
    p_call_tier TEXT[],
    p_tokens    BIGINT[],
    p_tok_lim   BIGINT[],
    p_max_conc  BIGINT[],
    p_expires   BIGINT[]
) RETURNS TABLE (
    o_status       SMALLINT,
    o_version      BIGINT,
    o_last_ts      BIGINT,  -- the user's newest request before this one; NULL for none
    o_last_seq     BIGINT,
    o_ts1          BIGINT,  -- the oldest request in the minute window; NULL for none
    o_seq1         BIGINT,
    o_ts2          BIGINT,  -- the hour's
    o_seq2         BIGINT,
    o_ts3          BIGINT,  -- the day's
    o_seq3         BIGINT,
    o_user_found   BOOLEAN, -- the record, when one was to be confirmed
    o_user_tier    TEXT,
    o_lims         BIGINT[], -- the record's limits: user_limits(r)
    o_user_over    BIGINT,
    o_user_note    TEXT,
    o_user_updated BIGINT,
    o_recorded     BOOLEAN,
    o_rec_ts       BIGINT,
    o_open         BIGINT,  -- metered: calls open and tokens reserved, once settled
    o_reserved     BIGINT,
    o_tok_last_ts  BIGINT,  -- the newest finished tokens; NULL for none
    o_tok_total    BIGINT,
    o_tts1         BIGINT,  -- the oldest finished tokens in the minute window, and the total before them
    o_tbefore1     BIGINT,
    o_tts2         BIGINT,
    o_tbefore2     BIGINT,
    o_tts3         BIGINT,
    o_tbefore3     BIGINT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    k       INTEGER;
    ver     BIGINT;
    u       TEXT;
    t_now   BIGINT;
    c1      BIGINT;
    c2      BIGINT;
    c3      BIGINT;
    b       INTEGER;
    allowed BOOLEAN;
    n_calls BIGINT;
    fin     BIGINT;
    ex      RECORD;
    t_at    BIGINT;
    acct    TEXT;
    n_lims  INTEGER := coalesce(cardinality(p_user_lim) / nullif(cardinality(p_users), 0), 0);
BEGIN
    FOREACH k IN ARRAY p_keys LOOP
        PERFORM pg_advisory_xact_lock(1, k);
    END LOOP;
    SELECT v.version INTO ver FROM tier_version AS v WHERE v.id = 1;
    FOR i IN 1 .. coalesce(cardinality(p_users), 0) LOOP
        o_status := 0; o_version := ver;
        o_last_ts := NULL; o_last_seq := NULL;
        o_ts1 := NULL; o_seq1 := NULL; o_ts2 := NULL; o_seq2 := NULL; o_ts3 := NULL; o_seq3 := NULL;
        o_user_found := NULL; o_user_tier := NULL; o_user_over := NULL; o_user_note := NULL; o_user_updated := NULL;
        o_lims := NULL;
        o_recorded := false; o_rec_ts := NULL;
        o_open := NULL; o_reserved := NULL; o_tok_last_ts := NULL; o_tok_total := NULL;
        o_tts1 := NULL; o_tbefore1 := NULL; o_tts2 := NULL; o_tbefore2 := NULL; o_tts3 := NULL; o_tbefore3 := NULL;
        u := p_users[i];
        t_now := p_now[i];

        IF ver <> p_version OR NOT p_tier_same[i] THEN
            o_status := 1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF p_user_mode[i] <> 0 THEN
            SELECT r.tier, user_limits(r), r.overrides, r.note, r.updated_at, r.account
              INTO o_user_tier, o_lims, o_user_over, o_user_note, o_user_updated, acct
              FROM users AS r WHERE r.user_id = u;
            o_user_found := FOUND;
            b := (i - 1) * n_lims;
            IF p_user_mode[i] = 1 AND o_user_found
               OR p_user_mode[i] = 2 AND NOT (o_user_found
                   AND acct IS NULL
                   AND o_user_tier IS NOT DISTINCT FROM p_user_tier[i]
                   AND o_lims = p_user_lim[b + 1 : b + n_lims] -- NULLs compare equal in arrays
                   AND o_user_over = p_user_over[i]) THEN
                o_status := 2;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;

        -- The windows: the oldest row after each cutoff, from the longest
        -- window to the shortest; a row after a shorter window's cutoff is
        -- that window's oldest too.
        c1 := t_now - 60000000;
        c2 := t_now - 3600000000;
        c3 := t_now - 86400000000;
        SELECT r.ts, r.seq INTO o_last_ts, o_last_seq FROM requests AS r
            WHERE r.user_id = u ORDER BY r.ts DESC, r.seq DESC LIMIT 1;
        IF o_last_ts > c3 THEN
            SELECT r.ts, r.seq INTO o_ts3, o_seq3 FROM requests AS r
                WHERE r.user_id = u AND r.ts > c3 ORDER BY r.ts, r.seq LIMIT 1;
            IF o_ts3 > c2 THEN
                o_ts2 := o_ts3; o_seq2 := o_seq3;
            ELSIF o_last_ts > c2 THEN
                SELECT r.ts, r.seq INTO o_ts2, o_seq2 FROM requests AS r
                    WHERE r.user_id = u AND r.ts > c2 ORDER BY r.ts, r.seq LIMIT 1;
            END IF;
            IF o_ts2 > c1 THEN
                o_ts1 := o_ts2; o_seq1 := o_seq2;
            ELSIF o_last_ts > c1 THEN
                SELECT r.ts, r.seq INTO o_ts1, o_seq1 FROM requests AS r
                    WHERE r.user_id = u AND r.ts > c1 ORDER BY r.ts, r.seq LIMIT 1;
            END IF;
        END IF;
        b := (i - 1) * 3;
        allowed := coalesce(o_last_seq - o_seq1 + 1, 0) < p_ceil[b + 1]
               AND coalesce(o_last_seq - o_seq2 + 1, 0) < p_ceil[b + 2]
               AND coalesce(o_last_seq - o_seq3 + 1, 0) < p_ceil[b + 3];

        IF p_call_id[i] IS NOT NULL THEN
            -- Settle the calls that expired by now, each at its expiry
            -- (or at the newest finished tokens', when the clock stepped
            -- back) with its reservation, in expiry order.
            SELECT t.ts, t.total INTO o_tok_last_ts, o_tok_total FROM call_tokens AS t
                WHERE t.user_id = u ORDER BY t.ts DESC, t.total DESC LIMIT 1;
            FOR ex IN SELECT c.id, c.reserved, c.expires_at FROM calls AS c
                    WHERE c.user_id = u AND c.finished_at IS NULL AND c.expires_at <= t_now
                    ORDER BY c.expires_at, c.id LOOP
                t_at := greatest(ex.expires_at, o_tok_last_ts);
                IF ex.reserved > 0 THEN
                    o_tok_total := coalesce(o_tok_total, 0) + ex.reserved;
                    o_tok_last_ts := t_at;
                    INSERT INTO call_tokens (user_id, ts, tokens, total) VALUES (u, t_at, ex.reserved, o_tok_total);
                END IF;
                UPDATE calls SET finished_at = t_at, tokens = reserved, expired = 1 WHERE id = ex.id;
            END LOOP;
            SELECT count(*), coalesce(sum(c.reserved), 0) INTO o_open, o_reserved FROM calls AS c
                WHERE c.user_id = u AND c.finished_at IS NULL;
            IF o_tok_last_ts > c3 THEN
                SELECT t.ts, t.total - t.tokens INTO o_tts3, o_tbefore3 FROM call_tokens AS t
                    WHERE t.user_id = u AND t.ts > c3 ORDER BY t.ts, t.total LIMIT 1;
                IF o_tts3 > c2 THEN
                    o_tts2 := o_tts3; o_tbefore2 := o_tbefore3;
                ELSIF o_tok_last_ts > c2 THEN
                    SELECT t.ts, t.total - t.tokens INTO o_tts2, o_tbefore2 FROM call_tokens AS t
                        WHERE t.user_id = u AND t.ts > c2 ORDER BY t.ts, t.total LIMIT 1;
                END IF;
                IF o_tts2 > c1 THEN
                    o_tts1 := o_tts2; o_tbefore1 := o_tbefore2;
                ELSIF o_tok_last_ts > c1 THEN
                    SELECT t.ts, t.total - t.tokens INTO o_tts1, o_tbefore1 FROM call_tokens AS t
                        WHERE t.user_id = u AND t.ts > c1 ORDER BY t.ts, t.total LIMIT 1;
                END IF;
            END IF;
            -- A call fits when the calls in flight are below
            -- max_concurrent and, in each window with a token limit, the
            -- finished tokens plus the reservations and its own are at
            -- most the limit.
            n_calls := p_tokens[i] + o_reserved;
            b := (i - 1) * 3;
            allowed := allowed
                AND (p_max_conc[i] IS NULL OR o_open < p_max_conc[i])
                AND (p_tok_lim[b + 1] IS NULL OR coalesce(o_tok_total - o_tbefore1, 0) + n_calls <= p_tok_lim[b + 1])
                AND (p_tok_lim[b + 2] IS NULL OR coalesce(o_tok_total - o_tbefore2, 0) + n_calls <= p_tok_lim[b + 2])
                AND (p_tok_lim[b + 3] IS NULL OR coalesce(o_tok_total - o_tbefore3, 0) + n_calls <= p_tok_lim[b + 3]);
        END IF;

        IF allowed THEN
            -- Recorded at the check's instant, or at the newest request's
            -- when the clock stepped back, numbered after it.
            o_recorded := true;
            o_rec_ts := greatest(t_now, o_last_ts);
            INSERT INTO requests (user_id, ts, seq, tier_id)
                VALUES (u, o_rec_ts, coalesce(o_last_seq, 0) + 1, nullif(p_tier_id[i], 0));
            IF p_call_id[i] IS NOT NULL THEN
                INSERT INTO calls (id, user_id, tier, reserved, opened_at, expires_at)
                    VALUES (p_call_id[i], u, p_call_tier[i], p_tokens[i], t_now, p_expires[i]);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd


ALTER TABLE tiers
    ADD COLUMN requests_per_minute BIGINT NOT NULL DEFAULT 0 CHECK (requests_per_minute BETWEEN 0 AND 2147483647),
    ADD COLUMN requests_per_hour   BIGINT NOT NULL DEFAULT 0 CHECK (requests_per_hour   BETWEEN 0 AND 2147483647),
    ADD COLUMN requests_per_day    BIGINT NOT NULL DEFAULT 0 CHECK (requests_per_day    BETWEEN 0 AND 2147483647),
    ADD COLUMN burst_allowance     BIGINT NOT NULL DEFAULT 0 CHECK (burst_allowance     BETWEEN 0 AND 2147483647),
    ADD COLUMN tokens_per_minute   BIGINT CHECK (tokens_per_minute BETWEEN 0 AND 2147483647),
    ADD COLUMN tokens_per_hour     BIGINT CHECK (tokens_per_hour   BETWEEN 0 AND 2147483647),
    ADD COLUMN tokens_per_day      BIGINT CHECK (tokens_per_day    BETWEEN 0 AND 2147483647),
    ADD COLUMN max_concurrent      BIGINT CHECK (max_concurrent    BETWEEN 0 AND 2147483647);
UPDATE tiers SET
    requests_per_minute = coalesce((limits->>'requests_per_minute')::bigint, 0),
    requests_per_hour   = coalesce((limits->>'requests_per_hour')::bigint, 0),
    requests_per_day    = coalesce((limits->>'requests_per_day')::bigint, 0),
    burst_allowance     = coalesce((limits->>'burst_allowance')::bigint, 0),
    tokens_per_minute   = (limits->>'tokens_per_minute')::bigint,
    tokens_per_hour     = (limits->>'tokens_per_hour')::bigint,
    tokens_per_day      = (limits->>'tokens_per_day')::bigint,
    max_concurrent      = (limits->>'max_concurrent')::bigint;
ALTER TABLE tiers DROP COLUMN limits;
