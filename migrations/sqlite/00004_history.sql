-- Console history (package sol/history), per node and per tenancy. A
-- tenancy is the time between two access changes of a node, named by the
-- node's access epoch at which it began; only the node's current tenancy is
-- ever shown to a tenant (reads join nodes on access_epoch = epoch).
--
-- console_tenancies has a row per stored tenancy: bytes is what its chunks
-- hold (size summed, kept up to date on every append, so the bound (per
-- tenancy) needs no scan), last_seq the highest seq given to one of its chunks and
-- first_seq the lowest that may still be stored: eviction starts there, not
-- at deleted rows the engine has not purged yet.
-- ended_at is 0 while the tenancy is open; an ended tenancy is either
-- deleted at once or kept, for admins only, until purge_at (unix ms). No
-- foreign key: a kept tenancy outlives its node.
--
-- console_chunks holds the chunks in seq order per tenancy: kind 1 is
-- console output (data untouched, stamps = the arrival times of its later
-- writes), others are markers (data = their text). size is
-- length(data) + length(stamps), newlines the newlines of output, last_at the
-- arrival of the last byte: the columns that reads and the bound use
-- without reading data.

-- console_ends says, per node, that every tenancy before epoch has ended:
-- a tenancy row is created by the first append of its chunks, even after
-- the node's epoch has moved on (bytes printed before an access change and
-- flushed after it), but never once its end is recorded here, so a
-- deleted tenancy does not come back.

-- +goose Up
CREATE TABLE console_tenancies (
    node       TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER NOT NULL,
    purge_at   INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    first_seq  INTEGER NOT NULL,
    PRIMARY KEY (node, epoch)
) STRICT;

CREATE TABLE console_chunks (
    node     TEXT    NOT NULL,
    epoch    INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    last_at  INTEGER NOT NULL,
    kind     INTEGER NOT NULL,
    newlines INTEGER NOT NULL,
    size     INTEGER NOT NULL,
    stamps   BLOB    NOT NULL,
    data     BLOB    NOT NULL,
    PRIMARY KEY (node, epoch, seq)
) STRICT;

CREATE TABLE console_ends (
    node  TEXT    NOT NULL PRIMARY KEY,
    epoch INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE console_ends;
DROP TABLE console_chunks;
DROP TABLE console_tenancies;
