-- The size of a node's screen, as its console's terminal emulator draws it
-- (issue 28): 'COLSxROWS' up to 200x100, or '' for the default 80x25. Not
-- access: changing it moves no epoch and cuts no session.

-- +goose Up
ALTER TABLE nodes ADD COLUMN screen_size TEXT COLLATE "C" NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE nodes DROP COLUMN screen_size;
