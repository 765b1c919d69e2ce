-- +goose Up
-- finish_call finishes a metered call in one statement, its own
-- transaction (see db.pgWriter.callStatement): what db.writeTx.finishCall
-- does in a transaction of a dozen round trips, with the same locks in the
-- same order; keepalive_call likewise for a keepalive. The store's
-- conformance and model tests hold the two to the same outcomes.

-- lock_key is db.userLockKey: the 32-bit FNV-1a hash of an id's UTF-8
-- bytes, as a signed integer, the number of its advisory lock.
-- +goose StatementBegin
CREATE FUNCTION lock_key(p_id TEXT) RETURNS INTEGER
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    b BYTEA := convert_to(p_id, 'UTF8');
    h BIGINT := 2166136261;
BEGIN
    FOR i IN 0 .. length(b) - 1 LOOP
        h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
    END LOOP;
    IF h >= 2147483648 THEN
        h := h - 4294967296;
    END IF;
    RETURN h::INTEGER;
END
$$;
-- +goose StatementEnd

-- finish_one finishes the call named p_id, whose user's lock (and its
-- account's) the caller holds, with p_tokens (NULL: its reservation) at
-- p_now, as db.writeTx.finishCall: a call its caller finished already is
-- answered as it stands, or o_status 2 when the count differs; otherwise
-- the user's calls that expired by now are settled first (as admit_batch
-- does), and the call is finished, or, when it expired, only a count above
-- its reservation is added. o_status 1: no such call, nothing written.
-- +goose StatementBegin
CREATE FUNCTION finish_one(p_id TEXT, p_tokens BIGINT, p_now BIGINT)
RETURNS TABLE (
    o_status   SMALLINT,
    o_user     TEXT,
    o_tier     TEXT,
    o_reserved BIGINT,
    o_opened   BIGINT,
    o_expires  BIGINT,
    o_finished BIGINT,
    o_tokens   BIGINT,
    o_reported BIGINT,
    o_expired  SMALLINT,
    o_account  TEXT
)
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
        o_status := 1;
        RETURN NEXT;
        RETURN;
    END IF;
    v_count := coalesce(p_tokens, c.reserved);
    IF c.reported IS NOT NULL THEN
        o_status := CASE WHEN c.reported = v_count THEN 0 ELSE 2 END;
    ELSE
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
        o_status := 0;
    END IF;
    o_user := c.user_id; o_tier := c.tier; o_reserved := c.reserved; o_opened := c.opened_at;
    o_expires := c.expires_at; o_finished := c.finished_at; o_tokens := c.tokens;
    o_reported := c.reported; o_expired := c.expired; o_account := c.account;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- finish_call finishes the call its caller names: never an account pool's
-- copy of a member's call (o_status 1, as for no call), which is finished
-- with the call, after it, unless the pool was forgotten. It takes the
-- account's lock, then the user's, and reads the call again under them.
-- A copy whose count differs (it cannot, while only this function and the
-- Go code finish copies) fails the whole statement, SQLSTATE PG409.
-- +goose StatementBegin
CREATE FUNCTION finish_call(p_id TEXT, p_tokens BIGINT, p_now BIGINT)
RETURNS TABLE (
    o_status   SMALLINT,
    o_user     TEXT,
    o_tier     TEXT,
    o_reserved BIGINT,
    o_opened   BIGINT,
    o_expires  BIGINT,
    o_finished BIGINT,
    o_tokens   BIGINT,
    o_reported BIGINT,
    o_expired  SMALLINT,
    o_account  TEXT
)
LANGUAGE plpgsql AS $$
DECLARE
    v_user    TEXT;
    v_account TEXT;
    r         RECORD;
    p         RECORD;
BEGIN
    SELECT c.user_id, c.account INTO v_user, v_account FROM calls AS c WHERE c.id = p_id;
    IF NOT FOUND OR starts_with(v_user, E'\x01account:') THEN
        o_status := 1;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_account IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(5, lock_key(E'\x01account:' || v_account));
    END IF;
    PERFORM pg_advisory_xact_lock(1, lock_key(v_user));
    SELECT * INTO r FROM finish_one(p_id, p_tokens, p_now);
    IF r.o_status = 0 AND r.o_account IS NOT NULL THEN
        SELECT * INTO p FROM finish_one(p_id || '-pool', p_tokens, p_now);
        IF p.o_status = 2 THEN
            RAISE EXCEPTION 'call "%-pool" already finished with % tokens', p_id, p.o_reported USING ERRCODE = 'PG409';
        END IF;
    END IF;
    o_status := r.o_status; o_user := r.o_user; o_tier := r.o_tier; o_reserved := r.o_reserved;
    o_opened := r.o_opened; o_expires := r.o_expires; o_finished := r.o_finished; o_tokens := r.o_tokens;
    o_reported := r.o_reported; o_expired := r.o_expired; o_account := r.o_account;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- keepalive_call moves the expiry of the open call its caller names, and of
-- its pool's copy, to p_expires, as db.Store.KeepAlive does on SQLite:
-- o_status 1 for no call (or a pool's copy), 2 for a call finished or
-- expired by p_now, nothing written.
-- +goose StatementBegin
CREATE FUNCTION keepalive_call(p_id TEXT, p_now BIGINT, p_expires BIGINT)
RETURNS TABLE (
    o_status   SMALLINT,
    o_user     TEXT,
    o_tier     TEXT,
    o_reserved BIGINT,
    o_opened   BIGINT,
    o_expires  BIGINT,
    o_finished BIGINT,
    o_tokens   BIGINT,
    o_reported BIGINT,
    o_expired  SMALLINT,
    o_account  TEXT
)
LANGUAGE plpgsql AS $$
DECLARE
    c calls%ROWTYPE;
BEGIN
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND OR starts_with(c.user_id, E'\x01account:') THEN
        o_status := 1;
        RETURN NEXT;
        RETURN;
    END IF;
    IF c.account IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(5, lock_key(E'\x01account:' || c.account));
    END IF;
    PERFORM pg_advisory_xact_lock(1, lock_key(c.user_id));
    SELECT * INTO c FROM calls WHERE id = p_id;
    IF NOT FOUND THEN
        o_status := 1;
        RETURN NEXT;
        RETURN;
    END IF;
    IF c.finished_at IS NOT NULL OR c.expires_at <= p_now THEN
        o_status := 2;
        RETURN NEXT;
        RETURN;
    END IF;
    c.expires_at := p_expires;
    UPDATE calls SET expires_at = p_expires WHERE id = p_id;
    IF c.account IS NOT NULL THEN
        UPDATE calls SET expires_at = p_expires WHERE id = p_id || '-pool';
    END IF;
    o_status := 0; o_user := c.user_id; o_tier := c.tier; o_reserved := c.reserved; o_opened := c.opened_at;
    o_expires := c.expires_at; o_finished := c.finished_at; o_tokens := c.tokens;
    o_reported := c.reported; o_expired := c.expired; o_account := c.account;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION keepalive_call(TEXT, BIGINT, BIGINT);
DROP FUNCTION finish_call(TEXT, BIGINT, BIGINT);
DROP FUNCTION finish_one(TEXT, BIGINT, BIGINT);
DROP FUNCTION lock_key(TEXT);
