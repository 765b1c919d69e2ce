-- +goose Up
-- Version 15 reorders SQLite's pool_recent, which PostgreSQL has not (its
-- pools' rows go to requests): both folders end at the same version.
SELECT 1;

-- +goose Down
SELECT 1;
