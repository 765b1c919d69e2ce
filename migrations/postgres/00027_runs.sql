-- +goose Up
-- Agent runs: see the SQLite migration of the same number.
CREATE TABLE runs (
    run_id    TEXT     COLLATE "C" PRIMARY KEY,
    user_id   TEXT     COLLATE "C" NOT NULL,
    tier      TEXT     NOT NULL,
    parent    TEXT     COLLATE "C",
    root      TEXT     COLLATE "C" NOT NULL,
    depth     BIGINT   NOT NULL CHECK (depth >= 1),
    opened_at BIGINT   NOT NULL,
    last_at   BIGINT   NOT NULL,
    state     TEXT     NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'exhausted', 'ended', 'expired')),
    cause     TEXT,
    ended_at  BIGINT,
    requests  BIGINT   NOT NULL DEFAULT 0,
    tokens    BIGINT   NOT NULL DEFAULT 0,
    cost      BIGINT   NOT NULL DEFAULT 0
);
CREATE INDEX runs_user ON runs (user_id, state, last_at);
CREATE INDEX runs_parent ON runs (parent) WHERE parent IS NOT NULL;
CREATE INDEX runs_last ON runs (last_at);

CREATE TABLE run_tree (
    run_id   TEXT COLLATE "C" NOT NULL,
    ancestor TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, ancestor)
);
CREATE INDEX run_tree_ancestor ON run_tree (ancestor);

ALTER TABLE calls ADD COLUMN run_id TEXT COLLATE "C";

-- +goose StatementBegin
CREATE FUNCTION calls_run_count() RETURNS trigger
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
CREATE TRIGGER calls_run_settle AFTER UPDATE OF finished_at, tokens, cost ON calls FOR EACH ROW WHEN (NEW.run_id IS NOT NULL)
    EXECUTE FUNCTION calls_run_count();

-- +goose Down
DROP TRIGGER calls_run_settle ON calls;
DROP TRIGGER calls_run_open ON calls;
DROP FUNCTION calls_run_count();
ALTER TABLE calls DROP COLUMN run_id;
DROP TABLE run_tree;
DROP TABLE runs;
