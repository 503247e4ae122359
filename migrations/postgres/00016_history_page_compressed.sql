-- MariaDB's console history is page-compressed from this step on (see the
-- mysql migration of the same number). PostgreSQL already compresses and
-- slices a chunk's bytes into its TOAST table: nothing changes here.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
