-- +goose Up
-- Agent runs: one row per run, named by the agent, its budget's use
-- counted on it and on every ancestor. requests grows at each admission in
-- the run's tree; tokens and cost count what the tree's calls reserve
-- while open and use once finished, kept current by the triggers below on
-- whatever writes a call (an admission, a finish, the settling of an
-- expired call), so that no path can forget them. A deleted call leaves
-- them as they are: a run outlives its calls' cleanup. Times are unix
-- microseconds.
CREATE TABLE runs (
    run_id    TEXT    PRIMARY KEY NOT NULL,
    user_id   TEXT    NOT NULL,
    tier      TEXT    NOT NULL,
    parent    TEXT,
    root      TEXT    NOT NULL,
    depth     INTEGER NOT NULL CHECK (depth >= 1),
    opened_at INTEGER NOT NULL,
    last_at   INTEGER NOT NULL,
    state     TEXT    NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'exhausted', 'ended', 'expired')),
    cause     TEXT,
    ended_at  INTEGER,
    requests  INTEGER NOT NULL DEFAULT 0,
    tokens    INTEGER NOT NULL DEFAULT 0,
    cost      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX runs_user ON runs (user_id, state, last_at);
CREATE INDEX runs_parent ON runs (parent) WHERE parent IS NOT NULL;
CREATE INDEX runs_last ON runs (last_at);

-- Each run's ancestors, itself included: a run's chain is one range, and
-- so are a run's descendants (run_tree_ancestor), whatever the depth.
CREATE TABLE run_tree (
    run_id   TEXT NOT NULL,
    ancestor TEXT NOT NULL,
    PRIMARY KEY (run_id, ancestor)
) WITHOUT ROWID;
CREATE INDEX run_tree_ancestor ON run_tree (ancestor);

ALTER TABLE calls ADD COLUMN run_id TEXT;

-- +goose StatementBegin
CREATE TRIGGER calls_run_open AFTER INSERT ON calls WHEN NEW.run_id IS NOT NULL
BEGIN
    UPDATE runs SET tokens = tokens + NEW.reserved, cost = cost + NEW.reserved_cost
        WHERE run_id IN (SELECT ancestor FROM run_tree WHERE run_id = NEW.run_id);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER calls_run_settle AFTER UPDATE OF finished_at, tokens, cost ON calls
WHEN NEW.run_id IS NOT NULL
    AND (CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved ELSE NEW.tokens END
            IS NOT CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved ELSE OLD.tokens END
        OR CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved_cost ELSE NEW.cost END
            IS NOT CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved_cost ELSE OLD.cost END)
BEGIN
    UPDATE runs SET
        tokens = tokens + CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved ELSE NEW.tokens END
            - CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved ELSE OLD.tokens END,
        cost = cost + CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved_cost ELSE NEW.cost END
            - CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved_cost ELSE OLD.cost END
        WHERE run_id IN (SELECT ancestor FROM run_tree WHERE run_id = NEW.run_id);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER calls_run_settle;
DROP TRIGGER calls_run_open;
ALTER TABLE calls DROP COLUMN run_id;
DROP TABLE run_tree;
DROP TABLE runs;
