-- Certificate logins (OpenSSH user certificates).
--
-- cert_authorities: the user CAs obmd trusts, by the SHA256 fingerprint of
-- their public key; name is the admin's name for one (audit: "hil:alice").
--
-- cert_revocations: certificates refused before they expire, by serial or
-- by key id, for one CA (ca = its fingerprint) or for every CA (ca = '').
-- A serial row has key_id '', a key id row has serial 0, so the primary
-- key makes a revocation unique and serves both lookups of a login.
-- Serials are unsigned 64-bit: stored as the signed integer of the same
-- bits (equality is all that is asked of them). expires_at (unix ms) is
-- when the certificate would have expired anyway: the row may be purged
-- after it (plus the policy's clock skew); 0 keeps it for good.
--
-- node_principals: extra principals a node answers to ("project-x"), so one
-- certificate opens every node of a project.
--
-- credential_changes: a change of who may log in that is not a change of one
-- node (a CA removed, a certificate revoked). Each takes an epoch from
-- access_seq and a row in access_changes with node '' (no node has that
-- label), so replicas see it in the same ordered poll as node changes, and
-- this row says which sessions it ends.
--
-- Fingerprints, names, principals and key ids are VARBINARY: byte-exact, as
-- on SQLite.

-- +goose Up
CREATE TABLE cert_authorities (
    fingerprint VARBINARY(100) NOT NULL,
    name        VARBINARY(64)  NOT NULL,
    line        TEXT           NOT NULL,
    created_at  BIGINT         NOT NULL,
    PRIMARY KEY (fingerprint),
    UNIQUE KEY cert_authorities_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE cert_revocations (
    kind       VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    ca         VARBINARY(100) NOT NULL,
    serial     BIGINT         NOT NULL,
    key_id     VARBINARY(256) NOT NULL,
    expires_at BIGINT         NOT NULL,
    created_at BIGINT         NOT NULL,
    PRIMARY KEY (kind, ca, serial, key_id),
    KEY cert_revocations_expires_at (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE node_principals (
    node      VARBINARY(80) NOT NULL,
    principal VARBINARY(80) NOT NULL,
    PRIMARY KEY (node, principal),
    CONSTRAINT node_principals_node FOREIGN KEY (node) REFERENCES nodes (label) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE credential_changes (
    epoch  BIGINT         NOT NULL,
    kind   VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    ca     VARBINARY(100) NOT NULL,
    serial BIGINT         NOT NULL,
    key_id VARBINARY(256) NOT NULL,
    PRIMARY KEY (epoch)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE credential_changes;
DROP TABLE node_principals;
DROP TABLE cert_revocations;
DROP TABLE cert_authorities;
