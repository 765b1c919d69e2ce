-- +goose Up
-- admit_batch answers a record's limits as one array, user_limits(r),
-- rather than a column per limit, and reads the limits it confirms as
-- slices of p_user_lim as long as that array: a new limit adds its column
-- to users and redefines user_limits, in the order of db.userColumns (the
-- order of policy.LimitFields), and leaves admit_batch as it is. Only the
-- record's read and its confirmation differ from version 13.
-- +goose StatementBegin
CREATE FUNCTION user_limits(r users) RETURNS BIGINT[] LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[r.requests_per_minute, r.requests_per_hour, r.requests_per_day, r.burst_allowance, r.tokens_per_minute, r.tokens_per_hour, r.tokens_per_day, r.max_concurrent]
$$;
-- +goose StatementEnd
DROP FUNCTION admit_batch(INTEGER[], BIGINT, TEXT[], BIGINT[], BIGINT[], BIGINT[], BOOLEAN[], SMALLINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[], BIGINT[]);
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

-- +goose Down
DROP FUNCTION admit_batch(INTEGER[], BIGINT, TEXT[], BIGINT[], BIGINT[], BIGINT[], BOOLEAN[], SMALLINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[], BIGINT[]);
DROP FUNCTION user_limits(users);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION admit_batch(
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
    o_lim1         BIGINT,
    o_lim2         BIGINT,
    o_lim3         BIGINT,
    o_lim4         BIGINT,
    o_lim5         BIGINT,
    o_lim6         BIGINT,
    o_lim7         BIGINT,
    o_lim8         BIGINT,
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
        o_lim1 := NULL; o_lim2 := NULL; o_lim3 := NULL; o_lim4 := NULL;
        o_lim5 := NULL; o_lim6 := NULL; o_lim7 := NULL; o_lim8 := NULL;
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
            SELECT r.tier, r.requests_per_minute, r.requests_per_hour, r.requests_per_day, r.burst_allowance,
                   r.tokens_per_minute, r.tokens_per_hour, r.tokens_per_day, r.max_concurrent,
                   r.overrides, r.note, r.updated_at, r.account
              INTO o_user_tier, o_lim1, o_lim2, o_lim3, o_lim4, o_lim5, o_lim6, o_lim7, o_lim8,
                   o_user_over, o_user_note, o_user_updated, acct
              FROM users AS r WHERE r.user_id = u;
            o_user_found := FOUND;
            b := (i - 1) * 8;
            IF p_user_mode[i] = 1 AND o_user_found
               OR p_user_mode[i] = 2 AND NOT (o_user_found
                   AND acct IS NULL
                   AND o_user_tier IS NOT DISTINCT FROM p_user_tier[i]
                   AND o_lim1 IS NOT DISTINCT FROM p_user_lim[b + 1]
                   AND o_lim2 IS NOT DISTINCT FROM p_user_lim[b + 2]
                   AND o_lim3 IS NOT DISTINCT FROM p_user_lim[b + 3]
                   AND o_lim4 IS NOT DISTINCT FROM p_user_lim[b + 4]
                   AND o_lim5 IS NOT DISTINCT FROM p_user_lim[b + 5]
                   AND o_lim6 IS NOT DISTINCT FROM p_user_lim[b + 6]
                   AND o_lim7 IS NOT DISTINCT FROM p_user_lim[b + 7]
                   AND o_lim8 IS NOT DISTINCT FROM p_user_lim[b + 8]
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
