-- Whether a node's console is captured with nobody attached (issue 13):
-- 'always' holds its SOL link open so that its history records what it
-- prints; 'attached' records only while someone watches; '' follows the
-- daemon's default (console.capture, by node type). Not access: changing
-- it moves no epoch and cuts no session.

-- +goose Up
ALTER TABLE nodes ADD COLUMN capture TEXT COLLATE "C" NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE nodes DROP COLUMN capture;
