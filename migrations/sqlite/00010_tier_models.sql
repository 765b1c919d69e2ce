-- +goose Up
-- The models a tier's users may call through the gateway: NULL for any
-- model, else a JSON array of names, each exact or ending in a "*" that
-- matches any rest ('[]' allows no model). The seeded tiers stay NULL.
ALTER TABLE tiers ADD COLUMN models TEXT CHECK (models IS NULL OR (json_valid(models) AND json_type(models) = 'array'));

-- +goose Down
ALTER TABLE tiers DROP COLUMN models;
