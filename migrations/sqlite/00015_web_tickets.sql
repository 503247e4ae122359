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
    hash       TEXT    NOT NULL PRIMARY KEY,
    node       TEXT    NOT NULL REFERENCES nodes (label) ON DELETE CASCADE,
    epoch      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX web_tickets_expires ON web_tickets (expires_at);

-- +goose Down
DROP TABLE web_tickets;
