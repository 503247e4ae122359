-- Console history (package sol/history), per node and per tenancy. A
-- tenancy is the time between two access changes of a node, named by the
-- node's access epoch at which it began; only the node's current tenancy is
-- ever shown to a tenant (reads join nodes on access_epoch = epoch).
--
-- console_tenancies has a row per stored tenancy: bytes is what its chunks
-- hold (size summed, kept up to date on every append, so the bound (per
-- tenancy) needs no scan), last_seq the highest seq given to one of its
-- chunks and first_seq the lowest that may still be stored: eviction starts
-- there, not at deleted rows the engine has not vacuumed yet.
-- Every append locks this row first (SELECT ... FOR UPDATE): its row lock
-- orders appends to one tenancy and its end. ended_at is 0 while the
-- tenancy is open; an ended tenancy is either deleted at once or kept, for
-- admins only, until purge_at (unix ms). No foreign key: a kept tenancy
-- outlives its node.
--
-- console_chunks holds the chunks in seq order per tenancy: kind 1 is
-- console output (data untouched, stamps = the arrival times of its later
-- writes), others are markers (data = their text). size is LENGTH(data) +
-- LENGTH(stamps), newlines the newlines of output, last_at the arrival of
-- the last byte: the columns that reads and the bound use without reading
-- data.
--
-- console_ends says, per node, that every tenancy before epoch has ended:
-- a tenancy row is created by the first append of its chunks, even after
-- the node's epoch has moved on (bytes printed before an access change and
-- flushed after it), but never once its end is recorded here, so a
-- deleted tenancy does not come back. An append locks its nodes' rows here
-- (creating them with epoch 0) before it reads its tenancies, so that it
-- and an end of the same node take turns.

-- +goose Up
CREATE TABLE console_tenancies (
    node       TEXT COLLATE "C" NOT NULL,
    epoch      BIGINT           NOT NULL,
    started_at BIGINT           NOT NULL,
    ended_at   BIGINT           NOT NULL,
    purge_at   BIGINT           NOT NULL,
    bytes      BIGINT           NOT NULL,
    last_seq   BIGINT           NOT NULL,
    first_seq  BIGINT           NOT NULL,
    PRIMARY KEY (node, epoch)
);

CREATE TABLE console_chunks (
    node     TEXT COLLATE "C" NOT NULL,
    epoch    BIGINT           NOT NULL,
    seq      BIGINT           NOT NULL,
    at       BIGINT           NOT NULL,
    last_at  BIGINT           NOT NULL,
    kind     SMALLINT         NOT NULL,
    newlines INTEGER          NOT NULL,
    size     INTEGER          NOT NULL,
    stamps   BYTEA            NOT NULL,
    data     BYTEA            NOT NULL,
    PRIMARY KEY (node, epoch, seq)
);

CREATE TABLE console_ends (
    node  TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    epoch BIGINT           NOT NULL
);

-- +goose Down
DROP TABLE console_ends;
DROP TABLE console_chunks;
DROP TABLE console_tenancies;
