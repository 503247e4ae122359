-- The SSH host key of a node's BMC, pinned on first contact (issue 26): a
-- console over the BMC's SSH service refuses any other key from then on.
-- addr is the BMC's SSH address the key was first seen at ("host:port"): a
-- pin holds there only, so a node moved to another BMC pins anew. key_line
-- is the key as an authorized_keys line. Not access: pinning a key, or an
-- administrator's reset of it, moves no epoch and cuts no session.

-- +goose Up
CREATE TABLE node_ssh_host_keys (
    node       VARBINARY(80) NOT NULL,
    addr       VARBINARY(300) NOT NULL,
    key_line   TEXT          NOT NULL,
    created_at BIGINT        NOT NULL,
    PRIMARY KEY (node),
    CONSTRAINT node_ssh_host_keys_node FOREIGN KEY (node) REFERENCES nodes (label) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE node_ssh_host_keys;
