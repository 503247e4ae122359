-- obmd schema, SQLite. Times are unix milliseconds (UTC) in INTEGER columns,
-- so both engines store and compare them the same way. TEXT compares with
-- the BINARY collation: labels and fingerprints are case-sensitive and
-- byte-exact.

-- +goose Up
CREATE TABLE nodes (
    label        TEXT    NOT NULL PRIMARY KEY,
    type         TEXT    NOT NULL,
    info_sealed  BLOB    NOT NULL,
    access_epoch INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT;

-- One token per node, SHA-256 hex only.
CREATE TABLE node_tokens (
    node       TEXT    NOT NULL PRIMARY KEY REFERENCES nodes (label) ON DELETE CASCADE,
    hash       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- id orders keys by creation.
CREATE TABLE node_keys (
    id          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    node        TEXT    NOT NULL REFERENCES nodes (label) ON DELETE CASCADE,
    fingerprint TEXT    NOT NULL,
    line        TEXT    NOT NULL,
    comment     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (node, fingerprint)
) STRICT;

-- access_seq is the single-row source of access epochs. Bumping it takes a
-- row lock held to commit, so epochs become visible in commit order and a
-- replica polling access_changes by epoch never skips one.
CREATE TABLE access_seq (
    id    INTEGER NOT NULL PRIMARY KEY,
    epoch INTEGER NOT NULL
) STRICT;
INSERT INTO access_seq (id, epoch) VALUES (1, 0);

-- One row per access change, never reused (no foreign key: a deletion is a
-- change of a node that no longer exists).
CREATE TABLE access_changes (
    epoch INTEGER NOT NULL PRIMARY KEY,
    node  TEXT    NOT NULL,
    at    INTEGER NOT NULL
) STRICT;

-- Audit events outlive their node (no foreign key).
CREATE TABLE audit_events (
    id     INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    node   TEXT    NOT NULL,
    actor  TEXT    NOT NULL,
    action TEXT    NOT NULL,
    source TEXT    NOT NULL,
    result TEXT    NOT NULL,
    detail TEXT    NOT NULL
) STRICT;
CREATE INDEX audit_events_node_at ON audit_events (node, at);
CREATE INDEX audit_events_at ON audit_events (at);

-- +goose Down
DROP TABLE audit_events;
DROP TABLE access_changes;
DROP TABLE access_seq;
DROP TABLE node_keys;
DROP TABLE node_tokens;
DROP TABLE nodes;
