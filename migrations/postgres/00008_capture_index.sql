-- The capture poll (every epoch_poll, on every replica) reads the nodes
-- that may be captured always: those set to 'always', and those that set
-- none ('') of the types captured always by default. With this index it
-- reads those rows, not the whole fleet (issue 18: 10,000 nodes).

-- +goose Up
CREATE INDEX nodes_capture ON nodes (capture, type);

-- +goose Down
DROP INDEX nodes_capture;
