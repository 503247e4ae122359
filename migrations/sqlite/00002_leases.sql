-- Leases let several replicas sharing this database agree on who does what
-- to a node: one replica holds a node's SOL link ("sol") and the others
-- relay through it; one power operation runs at a time ("power"). A row is
-- held by the token of one acquisition until expires_at (unix ms); a lease
-- past its expiry is free for anyone's conditional UPDATE. No foreign key:
-- a lease of a deleted node just expires.

-- +goose Up
CREATE TABLE node_leases (
    node       TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    peer_addr  TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (node, kind)
) STRICT;

-- +goose Down
DROP TABLE node_leases;
