-- +goose Up
-- A tier's run object: the limits of each run of an agent under the tier,
-- NULL for none, or a JSON object of every run limit field with the API's
-- names (null: no limit), as tiers.account holds the pooled limits; and
-- whether every gateway request under the tier must name a run.
ALTER TABLE tiers ADD COLUMN run TEXT CHECK (run IS NULL OR json_valid(run));
ALTER TABLE tiers ADD COLUMN run_required INTEGER NOT NULL DEFAULT 0 CHECK (run_required IN (0, 1));

-- +goose Down
ALTER TABLE tiers DROP COLUMN run_required;
ALTER TABLE tiers DROP COLUMN run;
