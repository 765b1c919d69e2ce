-- +goose Up
-- Nothing: version 12 adds PostgreSQL's admit_batch, a function SQLite has
-- no use for (its single writer decides admissions in memory, see
-- db.writer). Both folders end at the same version.
SELECT 1;

-- +goose Down
SELECT 1;
