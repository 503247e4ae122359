-- Leases let several replicas sharing this database agree on who does what
-- to a node: one replica holds a node's SOL link ("sol") and the others
-- relay through it; one power operation runs at a time ("power"). A row is
-- held by the token of one acquisition until expires_at (unix ms); a lease
-- past its expiry is free for anyone's conditional UPDATE, which InnoDB
-- evaluates under the row lock, so exactly one contender wins. No foreign
-- key: a lease of a deleted node just expires.

-- +goose Up
CREATE TABLE node_leases (
    node       VARBINARY(80) NOT NULL,
    kind       VARCHAR(16)   NOT NULL,
    owner      VARCHAR(100)  NOT NULL,
    token      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    peer_addr  VARCHAR(255)  NOT NULL,
    expires_at BIGINT        NOT NULL,
    PRIMARY KEY (node, kind)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE node_leases;
