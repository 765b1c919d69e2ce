-- +goose Up
-- See the SQLite migration of the same number.
ALTER TABLE runs ADD COLUMN in_flight BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET in_flight = (SELECT count(*) FROM run_tree AS d JOIN calls AS c ON c.run_id = d.run_id
    WHERE d.ancestor = runs.run_id AND c.finished_at IS NULL);
CREATE INDEX calls_run_open ON calls (run_id, expires_at, finished_at) WHERE finished_at IS NULL AND run_id IS NOT NULL;
DROP TRIGGER calls_run_open ON calls;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION calls_run_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_tokens BIGINT;
    v_cost   BIGINT;
    v_flight BIGINT;
BEGIN
    v_tokens := coalesce(CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved ELSE NEW.tokens END, 0)
        - coalesce(CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved ELSE OLD.tokens END, 0);
    v_cost := coalesce(CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved_cost ELSE NEW.cost END, 0)
        - coalesce(CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved_cost ELSE OLD.cost END, 0);
    v_flight := (NEW.finished_at IS NULL)::int - (OLD.finished_at IS NULL)::int;
    IF v_tokens <> 0 OR v_cost <> 0 OR v_flight <> 0 THEN
        UPDATE runs SET tokens = tokens + v_tokens, cost = cost + v_cost, in_flight = in_flight + v_flight
            WHERE run_id IN (SELECT ancestor FROM run_tree WHERE run_tree.run_id = NEW.run_id);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP INDEX runs_user;
CREATE INDEX runs_user ON runs (user_id, state);

-- +goose Down
DROP INDEX runs_user;
CREATE INDEX runs_user ON runs (user_id, state, last_at);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION calls_run_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_tokens BIGINT;
    v_cost   BIGINT;
BEGIN
    v_tokens := coalesce(CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved ELSE NEW.tokens END, 0);
    v_cost := coalesce(CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved_cost ELSE NEW.cost END, 0);
    IF TG_OP = 'UPDATE' THEN
        v_tokens := v_tokens - coalesce(CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved ELSE OLD.tokens END, 0);
        v_cost := v_cost - coalesce(CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved_cost ELSE OLD.cost END, 0);
    END IF;
    IF v_tokens <> 0 OR v_cost <> 0 THEN
        UPDATE runs SET tokens = tokens + v_tokens, cost = cost + v_cost
            WHERE run_id IN (SELECT ancestor FROM run_tree WHERE run_tree.run_id = NEW.run_id);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER calls_run_open AFTER INSERT ON calls FOR EACH ROW WHEN (NEW.run_id IS NOT NULL)
    EXECUTE FUNCTION calls_run_count();
DROP INDEX calls_run_open;
ALTER TABLE runs DROP COLUMN in_flight;
