-- Replicas announce themselves here, so that the one that takes an access
-- change can tell every live replica at once over the peer link, and learn
-- from applied which of them has applied it (each replica writes there the
-- epoch up to which it has applied every change, at each poll). A row whose
-- expires_at (unix ms) has passed is a replica that stopped: it is ignored.
-- write_probes holds no rows: the write probe (/readyz, and each poll)
-- inserts and deletes one in a transaction, so that a disk or server that
-- stopped taking writes is noticed while reads still work.

-- +goose Up
CREATE TABLE replicas (
    id         TEXT    NOT NULL PRIMARY KEY,
    peer_addr  TEXT    NOT NULL,
    applied    INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

CREATE TABLE write_probes (
    id TEXT    NOT NULL PRIMARY KEY,
    at INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE write_probes;
DROP TABLE replicas;
