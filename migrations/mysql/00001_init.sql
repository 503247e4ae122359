-- obmd schema, MySQL/MariaDB (InnoDB, utf8mb4). Times are unix milliseconds
-- (UTC) in BIGINT columns, so both engines store and compare them the same
-- way. Labels and fingerprints are VARBINARY: case-sensitive and byte-exact
-- as on SQLite (the *_bin collations are PAD SPACE on MariaDB, so "n1 " would
-- equal "n1"). Other text collates utf8mb4_bin.

-- +goose Up
CREATE TABLE nodes (
    label        VARBINARY(80) NOT NULL,
    type         VARCHAR(32)   NOT NULL,
    info_sealed  BLOB          NOT NULL,
    access_epoch BIGINT        NOT NULL,
    created_at   BIGINT        NOT NULL,
    updated_at   BIGINT        NOT NULL,
    PRIMARY KEY (label)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One token per node, SHA-256 hex only.
CREATE TABLE node_tokens (
    node       VARBINARY(80) NOT NULL,
    hash       CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at BIGINT        NOT NULL,
    PRIMARY KEY (node),
    CONSTRAINT node_tokens_node FOREIGN KEY (node) REFERENCES nodes (label) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- id orders keys by creation.
CREATE TABLE node_keys (
    id          BIGINT         NOT NULL AUTO_INCREMENT,
    node        VARBINARY(80)  NOT NULL,
    fingerprint VARBINARY(100) NOT NULL,
    line        TEXT           NOT NULL,
    comment     TEXT           NOT NULL,
    created_at  BIGINT         NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY node_keys_node_fingerprint (node, fingerprint),
    CONSTRAINT node_keys_node FOREIGN KEY (node) REFERENCES nodes (label) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- access_seq is the single-row source of access epochs. Bumping it takes a
-- row lock held to commit, so epochs become visible in commit order and a
-- replica polling access_changes by epoch never skips one (AUTO_INCREMENT
-- values can commit out of order).
CREATE TABLE access_seq (
    id    INT    NOT NULL,
    epoch BIGINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO access_seq (id, epoch) VALUES (1, 0);

-- One row per access change, never reused (no foreign key: a deletion is a
-- change of a node that no longer exists).
CREATE TABLE access_changes (
    epoch BIGINT        NOT NULL,
    node  VARBINARY(80) NOT NULL,
    at    BIGINT        NOT NULL,
    PRIMARY KEY (epoch)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Audit events outlive their node (no foreign key).
CREATE TABLE audit_events (
    id     BIGINT        NOT NULL AUTO_INCREMENT,
    at     BIGINT        NOT NULL,
    node   VARBINARY(80) NOT NULL,
    actor  VARCHAR(80)   NOT NULL,
    action VARCHAR(64)   NOT NULL,
    source VARCHAR(255)  NOT NULL,
    result VARCHAR(32)   NOT NULL,
    detail TEXT          NOT NULL,
    PRIMARY KEY (id),
    KEY audit_events_node_at (node, at),
    KEY audit_events_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE audit_events;
DROP TABLE access_changes;
DROP TABLE access_seq;
DROP TABLE node_keys;
DROP TABLE node_tokens;
DROP TABLE nodes;
