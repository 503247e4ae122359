-- Leases let several replicas sharing this database agree on who does what
-- to a node: one replica holds a node's SOL link ("sol") and the others
-- relay through it; one power operation runs at a time ("power"). A row is
-- held by the token of one acquisition until expires_at (unix ms); a lease
-- past its expiry is free for anyone's conditional UPDATE, which PostgreSQL
-- evaluates again on the current row once it holds the row lock, so exactly
-- one contender wins. No foreign key: a lease of a deleted node just
-- expires.

-- +goose Up
CREATE TABLE node_leases (
    node       TEXT COLLATE "C" NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL,
    owner      TEXT COLLATE "C" NOT NULL,
    token      TEXT COLLATE "C" NOT NULL,
    peer_addr  TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT           NOT NULL,
    PRIMARY KEY (node, kind)
);

-- +goose Down
DROP TABLE node_leases;
