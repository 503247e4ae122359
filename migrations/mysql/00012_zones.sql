-- Zones (issue 24 part 3): the BMC network a node's BMC is on (nodes.zone, '': any
-- replica reaches it), and the zones each replica reaches (replicas.zones, comma-separated;
-- '': every zone, as a replica of an earlier release). Only a replica reaching a
-- node's zone holds its console link. Not access: setting a zone moves no epoch. Both
-- added with a constant default, so the previous release runs on this schema.

-- +goose Up
ALTER TABLE nodes ADD COLUMN zone VARCHAR(64) NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN zones VARCHAR(2000) NOT NULL DEFAULT '';
CREATE INDEX nodes_zone ON nodes (zone);

-- +goose Down
DROP INDEX nodes_zone ON nodes;
ALTER TABLE replicas DROP COLUMN zones;
ALTER TABLE nodes DROP COLUMN zone;
