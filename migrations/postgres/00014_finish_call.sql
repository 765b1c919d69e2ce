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

-- call_state is what finish_call and keepalive_call answer: a status (0
-- done, 1 no such call, 2 refused, nothing written) and the call's row as
-- it stands after them.
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

-- finish_one finishes the call named p_id, whose user's lock (and its
-- account's) the caller holds, with p_tokens (NULL: its reservation) at
-- p_now, as db.writeTx.finishCall: a call its caller finished already is
-- answered as it stands, or refused (status 2) when the count differs;
-- the user's calls that expired by now are settled first (as admit_batch
-- does), and the call is finished, or, when it expired, only a count above
-- its reservation is added. Status 1: no such call.
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

-- finish_call finishes the call its caller names: never an account pool's
-- copy of a member's call (status 1, as for no call), which is finished
-- with the call, after it, unless the pool was forgotten. It takes the
-- account's lock, then the user's, and reads the call again under them.
-- A copy whose count differs (it cannot, while only this function and the
-- Go code finish copies) fails the whole statement, SQLSTATE PG409.
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

-- keepalive_call moves the expiry of the open call its caller names, and of
-- its pool's copy, to p_expires, as db.Store.KeepAlive does on SQLite:
-- status 1 for no call (or a pool's copy), 2 for a call finished or
-- expired by p_now.
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

-- +goose Down
DROP FUNCTION keepalive_call(TEXT, BIGINT, BIGINT);
DROP FUNCTION finish_call(TEXT, BIGINT, BIGINT);
DROP FUNCTION finish_one(TEXT, BIGINT, BIGINT);
DROP FUNCTION call_state_of(SMALLINT, calls);
DROP TYPE call_state;
DROP FUNCTION lock_key(TEXT);
