-- Repeated reads and refusals are written as one row per key and interval
-- (db's audit aggregation): count is how many events the row stands for
-- (1 for a row of its own). Added last, with a constant default: instant
-- on MariaDB 10.3+ and MySQL 8, whatever the table's size.

-- +goose Up
ALTER TABLE audit_events ADD COLUMN count BIGINT NOT NULL DEFAULT 1;

-- +goose Down
ALTER TABLE audit_events DROP COLUMN count;
