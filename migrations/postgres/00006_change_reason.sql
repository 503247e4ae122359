-- Why each access change was made ("token rotated", "key removed", ...), so
-- that a replica cutting sessions for a change made through another one
-- tells them the same reason as the replica that took it. Rows from before
-- this migration have none ('').

-- +goose Up
ALTER TABLE access_changes ADD COLUMN reason TEXT COLLATE "C" NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE access_changes DROP COLUMN reason;
