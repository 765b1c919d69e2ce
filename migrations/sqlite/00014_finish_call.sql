-- +goose Up
-- Nothing: version 14 adds PostgreSQL's finish_call, a function SQLite has
-- no use for (its single writer finishes calls in memory, see db.writer).
-- Both folders end at the same version.
SELECT 1;

-- +goose Down
SELECT 1;
