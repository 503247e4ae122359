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

-- +goose Up
CREATE TABLE cert_authorities (
    fingerprint TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name        TEXT COLLATE "C" NOT NULL,
    line        TEXT COLLATE "C" NOT NULL,
    created_at  BIGINT           NOT NULL,
    CONSTRAINT cert_authorities_name UNIQUE (name)
);

CREATE TABLE cert_revocations (
    kind       TEXT COLLATE "C" NOT NULL,
    ca         TEXT COLLATE "C" NOT NULL,
    serial     BIGINT           NOT NULL,
    key_id     TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT           NOT NULL,
    created_at BIGINT           NOT NULL,
    PRIMARY KEY (kind, ca, serial, key_id)
);
CREATE INDEX cert_revocations_expires_at ON cert_revocations (expires_at);

CREATE TABLE node_principals (
    node      TEXT COLLATE "C" NOT NULL REFERENCES nodes (label) ON DELETE CASCADE,
    principal TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (node, principal)
);

CREATE TABLE credential_changes (
    epoch  BIGINT           NOT NULL PRIMARY KEY,
    kind   TEXT COLLATE "C" NOT NULL,
    ca     TEXT COLLATE "C" NOT NULL,
    serial BIGINT           NOT NULL,
    key_id TEXT COLLATE "C" NOT NULL
);

-- +goose Down
DROP TABLE credential_changes;
DROP TABLE node_principals;
DROP TABLE cert_revocations;
DROP TABLE cert_authorities;
