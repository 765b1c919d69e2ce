-- +goose Up
-- Version 16 reads a user record's limits as an array in PostgreSQL's
-- admit_batch; SQLite has no such function: both folders end at the same
-- version.
SELECT 1;

-- +goose Down
SELECT 1;
