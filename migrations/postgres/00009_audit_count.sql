-- Repeated reads and refusals are written as one row per key and interval
-- (db's audit aggregation): count is how many events the row stands for
-- (1 for a row of its own). A constant default: PostgreSQL 11+ adds the
-- column without rewriting the table.

-- +goose Up
ALTER TABLE audit_events ADD COLUMN count BIGINT NOT NULL DEFAULT 1;

-- +goose Down
ALTER TABLE audit_events DROP COLUMN count;
