-- +goose Up
-- A tier's run object and whether it requires runs: see the SQLite
-- migration 26.
ALTER TABLE tiers ADD COLUMN run TEXT,
    ADD COLUMN run_required BOOLEAN NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE tiers DROP COLUMN run_required, DROP COLUMN run;
