-- +goose Up
-- A check in a run, cheaper in the writer. Each check in a run reads its
-- chain's calls in flight and, when admitted, counts its request and its
-- call's reservation in the chain.
--
-- in_flight counts the calls of a run's subtree not yet finished, as
-- tokens counts their reservations: the admission adds its call with its
-- request, and calls_run_settle takes a call off when it finishes or its
-- expiry is settled. A call past its expiry but not yet settled is still
-- counted there, so a read takes those off, found in calls_run_open: in
-- the writer, which settles a user's expired calls before it decides a
-- check, there are none. Before, each check counted its subtree's open
-- calls one by one, over every open call of its user.
ALTER TABLE runs ADD COLUMN in_flight INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET in_flight = (SELECT count(*) FROM run_tree AS d JOIN calls AS c ON c.run_id = d.run_id
    WHERE d.ancestor = runs.run_id AND c.finished_at IS NULL);

-- The open calls of each run; finished_at, NULL in every entry, is there
-- for SQLite's planner, which otherwise reads each call's row to test it.
CREATE INDEX calls_run_open ON calls (run_id, expires_at, finished_at) WHERE finished_at IS NULL AND run_id IS NOT NULL;

-- The admission's own update of the chain counts the call's reservation,
-- rather than a second update of the same rows from a trigger on the
-- insert.
DROP TRIGGER calls_run_open;

-- +goose StatementBegin
DROP TRIGGER calls_run_settle;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER calls_run_settle AFTER UPDATE OF finished_at, tokens, cost ON calls
WHEN NEW.run_id IS NOT NULL
    AND ((NEW.finished_at IS NULL) IS NOT (OLD.finished_at IS NULL)
        OR CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved ELSE NEW.tokens END
            IS NOT CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved ELSE OLD.tokens END
        OR CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved_cost ELSE NEW.cost END
            IS NOT CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved_cost ELSE OLD.cost END)
BEGIN
    UPDATE runs SET
        tokens = tokens + CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved ELSE NEW.tokens END
            - CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved ELSE OLD.tokens END,
        cost = cost + CASE WHEN NEW.finished_at IS NULL THEN NEW.reserved_cost ELSE NEW.cost END
            - CASE WHEN OLD.finished_at IS NULL THEN OLD.reserved_cost ELSE OLD.cost END,
        in_flight = in_flight + (NEW.finished_at IS NULL) - (OLD.finished_at IS NULL)
        WHERE run_id IN (SELECT ancestor FROM run_tree WHERE run_id = NEW.run_id);
END;
-- +goose StatementEnd

-- A run's last request moves it in runs_last alone: runs_user, which
-- lists a user's runs by state, no longer holds it.
DROP INDEX runs_user;
CREATE INDEX runs_user ON runs (user_id, state);

-- +goose Down
DROP INDEX runs_user;
CREATE INDEX runs_user ON runs (user_id, state, last_at);
DROP TRIGGER calls_run_settle;
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
-- +goose StatementBegin
CREATE TRIGGER calls_run_open AFTER INSERT ON calls WHEN NEW.run_id IS NOT NULL
BEGIN
    UPDATE runs SET tokens = tokens + NEW.reserved, cost = cost + NEW.reserved_cost
        WHERE run_id IN (SELECT ancestor FROM run_tree WHERE run_id = NEW.run_id);
END;
-- +goose StatementEnd
DROP INDEX calls_run_open;
ALTER TABLE runs DROP COLUMN in_flight;
