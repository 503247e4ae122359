-- Replicas announce themselves here, so that the one that takes an access
-- change can tell every live replica at once over the peer link, and learn
-- from applied which of them has applied it (each replica writes there the
-- epoch up to which it has applied every change, at each poll). A row whose
-- expires_at (unix ms) has passed is a replica that stopped: it is ignored.
-- write_probes holds no rows: the write probe (/readyz, and each poll)
-- inserts and deletes one in a transaction, so that a disk or server that
-- stopped taking writes is noticed while reads still work. Its id is
-- random per probe: replicas never contend for a row.

-- +goose Up
CREATE TABLE replicas (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    peer_addr  TEXT COLLATE "C" NOT NULL,
    applied    BIGINT           NOT NULL,
    expires_at BIGINT           NOT NULL
);

CREATE TABLE write_probes (
    id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    at BIGINT           NOT NULL
);

-- +goose Down
DROP TABLE write_probes;
DROP TABLE replicas;
