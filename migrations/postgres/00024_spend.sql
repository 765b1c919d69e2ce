-- +goose Up
-- Spend: as SQLite's migration 21. calls keeps the price each call is
-- charged at and its reserved, settled and reported cost; call_tokens
-- counts cost beside tokens with its own running total, a row holding
-- cost alone when a late finish adds cost only, so (total, cost_total)
-- joins the key. admit_batch, finish_call and keepalive_call settle and
-- answer the cost too: finish_one prices what a finish reports as
-- policy.Call.Settle does, in exact numeric arithmetic, rounded up once.
-- admit_batch, which decides checks without spend limits alone (see
-- db.plannable), answers the oldest row holding tokens after each cutoff,
-- passing over rows of cost alone.
DROP FUNCTION keepalive_call(TEXT, BIGINT, BIGINT);
DROP FUNCTION finish_call(TEXT, BIGINT, BIGINT);
DROP FUNCTION finish_one(TEXT, BIGINT, BIGINT);
DROP FUNCTION call_state_of(SMALLINT, calls);
DROP TYPE call_state;
DROP FUNCTION admit_batch(INTEGER[], BIGINT, TEXT[], BIGINT[], BIGINT[], BIGINT[], BOOLEAN[], SMALLINT[], TEXT[], TEXT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[], BIGINT[]);
ALTER TABLE calls
    ADD COLUMN model TEXT COLLATE "C",
    ADD COLUMN upstream TEXT COLLATE "C",
    ADD COLUMN price_version BIGINT,
    ADD COLUMN price_model TEXT COLLATE "C",
    ADD COLUMN price_upstream TEXT COLLATE "C",
    ADD COLUMN price_input BIGINT,
    ADD COLUMN price_output BIGINT,
    ADD COLUMN price_cache_read BIGINT,
    ADD COLUMN price_cache_write BIGINT,
    ADD COLUMN reserved_cost BIGINT NOT NULL DEFAULT 0 CHECK (reserved_cost >= 0),
    ADD COLUMN cost BIGINT,
    ADD COLUMN reported_cost BIGINT;
DROP INDEX calls_finished_tier;
CREATE INDEX calls_finished_tier ON calls (finished_at, tier, tokens, cost) WHERE finished_at IS NOT NULL;

ALTER TABLE call_tokens
    ADD COLUMN cost BIGINT NOT NULL DEFAULT 0 CHECK (cost >= 0),
    ADD COLUMN cost_total BIGINT NOT NULL DEFAULT 0,
    DROP CONSTRAINT call_tokens_tokens_check,
    ADD CONSTRAINT call_tokens_tokens_nonnegative CHECK (tokens >= 0),
    ADD CONSTRAINT call_tokens_amount_check CHECK (tokens > 0 OR cost > 0),
    DROP CONSTRAINT call_tokens_pkey,
    ADD PRIMARY KEY (user_id, ts, total, cost_total);
DROP INDEX call_tokens_total;
CREATE INDEX call_tokens_total ON call_tokens (user_id, total, cost_total);
CREATE INDEX call_tokens_cost ON call_tokens (user_id, cost_total) WHERE cost > 0;

CREATE TYPE call_state AS (
    status         SMALLINT,
    user_id        TEXT,
    tier           TEXT,
    reserved       BIGINT,
    opened_at      BIGINT,
    expires_at     BIGINT,
    finished_at    BIGINT,
    tokens         BIGINT,
    reported       BIGINT,
    expired        SMALLINT,
    account        TEXT,
    model          TEXT,
    upstream       TEXT,
    price_version  BIGINT,
    price_model    TEXT,
    price_upstream TEXT,
    price_input    BIGINT,
    price_output   BIGINT,
    price_cache_read  BIGINT,
    price_cache_write BIGINT,
    reserved_cost  BIGINT,
    cost           BIGINT,
    reported_cost  BIGINT
);

-- +goose StatementBegin
CREATE FUNCTION call_state_of(p_status SMALLINT, c calls) RETURNS call_state
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_status, c.user_id, c.tier, c.reserved, c.opened_at, c.expires_at,
           c.finished_at, c.tokens, c.reported, c.expired, c.account,
           c.model, c.upstream, c.price_version, c.price_model, c.price_upstream,
           c.price_input, c.price_output, c.price_cache_read, c.price_cache_write,
           c.reserved_cost, c.cost, c.reported_cost
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION finish_one(p_id TEXT, p_tokens BIGINT, p_in BIGINT, p_out BIGINT, p_cache_read BIGINT, p_cache_write BIGINT, p_now BIGINT)
RETURNS call_state
LANGUAGE plpgsql AS $$
DECLARE
    c       calls%ROWTYPE;
    ex      RECORD;
    v_count BIGINT;
    v_cost  BIGINT;
    v_add   BIGINT;
    v_addc  BIGINT;
    v_ts    BIGINT; -- the user's newest finished amounts
    v_total BIGINT;
    v_ctot  BIGINT;
    t_at    BIGINT;
BEGIN
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    -- policy.Call.Settle: usage priced kind by kind, tokens alone at the
    -- highest price, nothing reported at the reservation; the sum rounded
    -- up to the picodollar once, and at most the largest amount.
    v_count := coalesce(p_tokens, c.reserved);
    IF p_tokens IS NULL THEN
        v_cost := c.reserved_cost;
    ELSIF c.price_input IS NULL THEN
        v_cost := 0;
    ELSIF p_in IS NOT NULL THEN
        v_cost := least(ceil((p_in::numeric * c.price_input + p_out::numeric * c.price_output
            + p_cache_read::numeric * c.price_cache_read + p_cache_write::numeric * c.price_cache_write) / 1000000),
            9223372036854775807)::bigint;
    ELSE
        v_cost := least(ceil(p_tokens::numeric * greatest(c.price_input, c.price_output, c.price_cache_read, c.price_cache_write) / 1000000),
            9223372036854775807)::bigint;
    END IF;
    IF c.reported IS NOT NULL THEN
        RETURN call_state_of(CASE WHEN c.reported = v_count AND coalesce(c.reported_cost, 0) = v_cost THEN 0 ELSE 2 END::SMALLINT, c);
    END IF;
    SELECT t.ts, t.total, t.cost_total INTO v_ts, v_total, v_ctot FROM call_tokens AS t
        WHERE t.user_id = c.user_id ORDER BY t.ts DESC, t.total DESC, t.cost_total DESC LIMIT 1;
    FOR ex IN SELECT x.id, x.reserved, x.reserved_cost, x.expires_at FROM calls AS x
            WHERE x.user_id = c.user_id AND x.finished_at IS NULL AND x.expires_at <= p_now
            ORDER BY x.expires_at, x.id LOOP
        t_at := greatest(ex.expires_at, v_ts);
        IF ex.reserved > 0 OR ex.reserved_cost > 0 THEN
            v_total := coalesce(v_total, 0) + ex.reserved;
            v_ctot := coalesce(v_ctot, 0) + ex.reserved_cost;
            v_ts := t_at;
            INSERT INTO call_tokens (user_id, ts, tokens, total, cost, cost_total)
                VALUES (c.user_id, t_at, ex.reserved, v_total, ex.reserved_cost, v_ctot);
        END IF;
        UPDATE calls SET finished_at = t_at, tokens = reserved, cost = reserved_cost, expired = 1 WHERE id = ex.id;
    END LOOP;
    IF c.finished_at IS NULL AND c.expires_at <= p_now THEN
        SELECT * INTO c FROM calls WHERE id = p_id; -- settled just now
    END IF;
    IF c.finished_at IS NOT NULL THEN
        -- Expired before its caller finished it: the reservation is
        -- counted; only tokens or cost above it add, now.
        v_add := greatest(v_count - c.reserved, 0);
        v_addc := greatest(v_cost - c.reserved_cost, 0);
        c.tokens := greatest(c.reserved, v_count);
        c.cost := greatest(c.reserved_cost, v_cost);
    ELSE
        v_add := v_count;
        v_addc := v_cost;
        c.finished_at := greatest(p_now, v_ts);
        c.tokens := v_count;
        c.cost := v_cost;
    END IF;
    c.reported := v_count;
    c.reported_cost := v_cost;
    IF v_add > 0 OR v_addc > 0 THEN
        v_total := coalesce(v_total, 0) + v_add;
        v_ctot := coalesce(v_ctot, 0) + v_addc;
        INSERT INTO call_tokens (user_id, ts, tokens, total, cost, cost_total)
            VALUES (c.user_id, greatest(p_now, v_ts), v_add, v_total, v_addc, v_ctot);
    END IF;
    UPDATE calls SET finished_at = c.finished_at, tokens = c.tokens, reported = c.reported,
        cost = c.cost, reported_cost = c.reported_cost WHERE id = p_id;
    RETURN call_state_of(0::SMALLINT, c);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION finish_call(p_id TEXT, p_tokens BIGINT, p_in BIGINT, p_out BIGINT, p_cache_read BIGINT, p_cache_write BIGINT, p_now BIGINT)
RETURNS call_state
LANGUAGE plpgsql AS $$
DECLARE
    v_user    TEXT;
    v_account TEXT;
    r         call_state;
    p         call_state;
BEGIN
    SELECT c.user_id, c.account INTO v_user, v_account FROM calls AS c WHERE c.id = p_id;
    IF NOT FOUND OR starts_with(v_user, E'\x01account:') THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    IF v_account IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(5, lock_key(E'\x01account:' || v_account));
    END IF;
    PERFORM pg_advisory_xact_lock(1, lock_key(v_user));
    r := finish_one(p_id, p_tokens, p_in, p_out, p_cache_read, p_cache_write, p_now);
    IF r.status = 0 AND r.account IS NOT NULL THEN
        p := finish_one(p_id || '-pool', p_tokens, p_in, p_out, p_cache_read, p_cache_write, p_now);
        IF p.status = 2 THEN
            RAISE EXCEPTION 'call "%-pool" already finished with % tokens', p_id, p.reported USING ERRCODE = 'PG409';
        END IF;
    END IF;
    RETURN r;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION keepalive_call(p_id TEXT, p_now BIGINT, p_expires BIGINT)
RETURNS call_state
LANGUAGE plpgsql AS $$
DECLARE
    c calls%ROWTYPE;
BEGIN
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND OR starts_with(c.user_id, E'\x01account:') THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    IF c.account IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(5, lock_key(E'\x01account:' || c.account));
    END IF;
    PERFORM pg_advisory_xact_lock(1, lock_key(c.user_id));
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    IF c.finished_at IS NOT NULL OR c.expires_at <= p_now THEN
        RETURN call_state_of(2::SMALLINT, c);
    END IF;
    c.expires_at := p_expires;
    UPDATE calls SET expires_at = p_expires WHERE id = p_id;
    IF c.account IS NOT NULL THEN
        UPDATE calls SET expires_at = p_expires WHERE id = p_id || '-pool';
    END IF;
    RETURN call_state_of(0::SMALLINT, c);
END
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
    p_user_lim  TEXT[],   -- the record's users.limits, as JSON
    p_call_id   TEXT[],
    p_call_tier TEXT[],
    p_call_model TEXT[],    -- the check's model, stored though unpriced; NULL for none
    p_call_upstream TEXT[],
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
    v_cost  BIGINT; -- the newest running total of cost, settling
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
            SELECT t.ts, t.total, t.cost_total INTO o_tok_last_ts, o_tok_total, v_cost FROM call_tokens AS t
                WHERE t.user_id = u ORDER BY t.ts DESC, t.total DESC, t.cost_total DESC LIMIT 1;
            FOR ex IN SELECT c.id, c.reserved, c.reserved_cost, c.expires_at FROM calls AS c
                    WHERE c.user_id = u AND c.finished_at IS NULL AND c.expires_at <= t_now
                    ORDER BY c.expires_at, c.id LOOP
                t_at := greatest(ex.expires_at, o_tok_last_ts);
                IF ex.reserved > 0 OR ex.reserved_cost > 0 THEN
                    o_tok_total := coalesce(o_tok_total, 0) + ex.reserved;
                    v_cost := coalesce(v_cost, 0) + ex.reserved_cost;
                    o_tok_last_ts := t_at;
                    INSERT INTO call_tokens (user_id, ts, tokens, total, cost, cost_total)
                        VALUES (u, t_at, ex.reserved, o_tok_total, ex.reserved_cost, v_cost);
                END IF;
                UPDATE calls SET finished_at = t_at, tokens = reserved, cost = reserved_cost, expired = 1 WHERE id = ex.id;
            END LOOP;
            SELECT count(*), coalesce(sum(c.reserved), 0) INTO o_open, o_reserved FROM calls AS c
                WHERE c.user_id = u AND c.finished_at IS NULL;
            IF o_tok_last_ts > c3 THEN
                SELECT t.ts, t.total - t.tokens INTO o_tts3, o_tbefore3 FROM call_tokens AS t
                    WHERE t.user_id = u AND t.ts > c3 AND t.tokens > 0 ORDER BY t.ts, t.total, t.cost_total LIMIT 1;
                IF o_tts3 > c2 THEN
                    o_tts2 := o_tts3; o_tbefore2 := o_tbefore3;
                ELSIF o_tok_last_ts > c2 THEN
                    SELECT t.ts, t.total - t.tokens INTO o_tts2, o_tbefore2 FROM call_tokens AS t
                        WHERE t.user_id = u AND t.ts > c2 AND t.tokens > 0 ORDER BY t.ts, t.total, t.cost_total LIMIT 1;
                END IF;
                IF o_tts2 > c1 THEN
                    o_tts1 := o_tts2; o_tbefore1 := o_tbefore2;
                ELSIF o_tok_last_ts > c1 THEN
                    SELECT t.ts, t.total - t.tokens INTO o_tts1, o_tbefore1 FROM call_tokens AS t
                        WHERE t.user_id = u AND t.ts > c1 AND t.tokens > 0 ORDER BY t.ts, t.total, t.cost_total LIMIT 1;
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
                INSERT INTO calls (id, user_id, tier, reserved, opened_at, expires_at, model, upstream)
                    VALUES (p_call_id[i], u, p_call_tier[i], p_tokens[i], t_now, p_expires[i], p_call_model[i], p_call_upstream[i]);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd


-- +goose Down
DROP FUNCTION keepalive_call(TEXT, BIGINT, BIGINT);
DROP FUNCTION finish_call(TEXT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT);
DROP FUNCTION finish_one(TEXT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT);
DROP FUNCTION call_state_of(SMALLINT, calls);
DROP TYPE call_state;
DROP FUNCTION admit_batch(INTEGER[], BIGINT, TEXT[], BIGINT[], BIGINT[], BIGINT[], BOOLEAN[], SMALLINT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[], BIGINT[]);
-- Rows of cost alone go; every row of tokens stays.
DELETE FROM call_tokens WHERE tokens = 0;
DROP INDEX call_tokens_cost;
DROP INDEX call_tokens_total;
ALTER TABLE call_tokens
    DROP CONSTRAINT call_tokens_pkey,
    DROP CONSTRAINT call_tokens_amount_check,
    DROP CONSTRAINT call_tokens_tokens_nonnegative,
    DROP COLUMN cost_total,
    DROP COLUMN cost,
    ADD CONSTRAINT call_tokens_tokens_check CHECK (tokens > 0),
    ADD PRIMARY KEY (user_id, ts, total);
CREATE UNIQUE INDEX call_tokens_total ON call_tokens (user_id, total);
DROP INDEX calls_finished_tier;
CREATE INDEX calls_finished_tier ON calls (finished_at, tier, tokens) WHERE finished_at IS NOT NULL;
ALTER TABLE calls
    DROP COLUMN reported_cost, DROP COLUMN cost, DROP COLUMN reserved_cost,
    DROP COLUMN price_cache_write, DROP COLUMN price_cache_read, DROP COLUMN price_output, DROP COLUMN price_input,
    DROP COLUMN price_upstream, DROP COLUMN price_model, DROP COLUMN price_version, DROP COLUMN upstream, DROP COLUMN model;
CREATE TYPE call_state AS (
    status      SMALLINT,
    user_id     TEXT,
    tier        TEXT,
    reserved    BIGINT,
    opened_at   BIGINT,
    expires_at  BIGINT,
    finished_at BIGINT,
    tokens      BIGINT,
    reported    BIGINT,
    expired     SMALLINT,
    account     TEXT
);

-- +goose StatementBegin
CREATE FUNCTION call_state_of(p_status SMALLINT, c calls) RETURNS call_state
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_status, c.user_id, c.tier, c.reserved, c.opened_at, c.expires_at,
           c.finished_at, c.tokens, c.reported, c.expired, c.account
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION finish_one(p_id TEXT, p_tokens BIGINT, p_now BIGINT)
RETURNS call_state
LANGUAGE plpgsql AS $$
DECLARE
    c       calls%ROWTYPE;
    ex      RECORD;
    v_count BIGINT;
    v_add   BIGINT;
    v_ts    BIGINT; -- the user's newest finished tokens
    v_total BIGINT;
    t_at    BIGINT;
BEGIN
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    v_count := coalesce(p_tokens, c.reserved);
    IF c.reported IS NOT NULL THEN
        RETURN call_state_of(CASE WHEN c.reported = v_count THEN 0 ELSE 2 END::SMALLINT, c);
    END IF;
    SELECT t.ts, t.total INTO v_ts, v_total FROM call_tokens AS t
        WHERE t.user_id = c.user_id ORDER BY t.ts DESC, t.total DESC LIMIT 1;
    FOR ex IN SELECT x.id, x.reserved, x.expires_at FROM calls AS x
            WHERE x.user_id = c.user_id AND x.finished_at IS NULL AND x.expires_at <= p_now
            ORDER BY x.expires_at, x.id LOOP
        t_at := greatest(ex.expires_at, v_ts);
        IF ex.reserved > 0 THEN
            v_total := coalesce(v_total, 0) + ex.reserved;
            v_ts := t_at;
            INSERT INTO call_tokens (user_id, ts, tokens, total) VALUES (c.user_id, t_at, ex.reserved, v_total);
        END IF;
        UPDATE calls SET finished_at = t_at, tokens = reserved, expired = 1 WHERE id = ex.id;
    END LOOP;
    IF c.finished_at IS NULL AND c.expires_at <= p_now THEN
        SELECT * INTO c FROM calls WHERE id = p_id; -- settled just now
    END IF;
    IF c.finished_at IS NOT NULL THEN
        -- Expired before its caller finished it: the reservation is
        -- counted; only a count above it adds, now.
        v_add := greatest(v_count - c.reserved, 0);
        c.tokens := greatest(c.reserved, v_count);
    ELSE
        v_add := v_count;
        c.finished_at := greatest(p_now, v_ts);
        c.tokens := v_count;
    END IF;
    c.reported := v_count;
    IF v_add > 0 THEN
        v_total := coalesce(v_total, 0) + v_add;
        INSERT INTO call_tokens (user_id, ts, tokens, total) VALUES (c.user_id, greatest(p_now, v_ts), v_add, v_total);
    END IF;
    UPDATE calls SET finished_at = c.finished_at, tokens = c.tokens, reported = c.reported WHERE id = p_id;
    RETURN call_state_of(0::SMALLINT, c);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION finish_call(p_id TEXT, p_tokens BIGINT, p_now BIGINT)
RETURNS call_state
LANGUAGE plpgsql AS $$
DECLARE
    v_user    TEXT;
    v_account TEXT;
    r         call_state;
    p         call_state;
BEGIN
    SELECT c.user_id, c.account INTO v_user, v_account FROM calls AS c WHERE c.id = p_id;
    IF NOT FOUND OR starts_with(v_user, E'\x01account:') THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    IF v_account IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(5, lock_key(E'\x01account:' || v_account));
    END IF;
    PERFORM pg_advisory_xact_lock(1, lock_key(v_user));
    r := finish_one(p_id, p_tokens, p_now);
    IF r.status = 0 AND r.account IS NOT NULL THEN
        p := finish_one(p_id || '-pool', p_tokens, p_now);
        IF p.status = 2 THEN
            RAISE EXCEPTION 'call "%-pool" already finished with % tokens', p_id, p.reported USING ERRCODE = 'PG409';
        END IF;
    END IF;
    RETURN r;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION keepalive_call(p_id TEXT, p_now BIGINT, p_expires BIGINT)
RETURNS call_state
LANGUAGE plpgsql AS $$
DECLARE
    c calls%ROWTYPE;
BEGIN
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND OR starts_with(c.user_id, E'\x01account:') THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    IF c.account IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(5, lock_key(E'\x01account:' || c.account));
    END IF;
    PERFORM pg_advisory_xact_lock(1, lock_key(c.user_id));
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN call_state_of(1::SMALLINT, NULL);
    END IF;
    IF c.finished_at IS NOT NULL OR c.expires_at <= p_now THEN
        RETURN call_state_of(2::SMALLINT, c);
    END IF;
    c.expires_at := p_expires;
    UPDATE calls SET expires_at = p_expires WHERE id = p_id;
    IF c.account IS NOT NULL THEN
        UPDATE calls SET expires_at = p_expires WHERE id = p_id || '-pool';
    END IF;
    RETURN call_state_of(0::SMALLINT, c);
END
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
