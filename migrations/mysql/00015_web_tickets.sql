-- One-time tickets of the web console (issue 27): an admin mints one for a
-- dashboard (POST /v1/nodes/{label}/web-tickets); the browser redeems it
-- once, on any replica, as its first WebSocket message. Only the ticket's
-- SHA-256 is stored. epoch is the node's access epoch at minting: a ticket
-- is refused once the node's access has changed since. expires_at is on
-- the database's clock (unix milliseconds), like leases, so replicas agree.
-- Redeeming deletes the row; expired rows are purged as tickets are minted.
-- (Steps 12 to 14 are another branch's.)

-- +goose Up
CREATE TABLE web_tickets (
    hash       VARBINARY(64) NOT NULL,
    node       VARBINARY(80) NOT NULL,
    epoch      BIGINT        NOT NULL,
    expires_at BIGINT        NOT NULL,
    PRIMARY KEY (hash),
    KEY web_tickets_expires (expires_at),
    CONSTRAINT web_tickets_node FOREIGN KEY (node) REFERENCES nodes (label) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE web_tickets;
