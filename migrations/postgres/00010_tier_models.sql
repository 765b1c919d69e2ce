-- +goose Up
-- The models a tier's users may call through the gateway (see the SQLite
-- migration 10): NULL for any model, else a JSON array as TEXT, as
-- features is.
ALTER TABLE tiers ADD COLUMN models TEXT CHECK (models IS NULL OR json_typeof(models::json) = 'array');

-- +goose Down
ALTER TABLE tiers DROP COLUMN models;
