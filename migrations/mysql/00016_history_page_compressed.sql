-- Console history on MariaDB took about 1.6-1.7x the bytes it stores
-- (issue 29): a chunk of output is a 4-16 KiB BLOB, which InnoDB's DYNAMIC
-- row format keeps off the row in overflow pages of its own, a whole 16 KiB
-- page (or two) per chunk, never shared; and chunks of a thousand nodes
-- arriving interleaved split the clustered index's pages half full. Page
-- compression (MariaDB's PAGE_COMPRESSED, zlib) writes each page compressed
-- and gives the rest of it back to the file system (a punched hole), so the
-- unused part of every overflow page costs no disk: 1,000 nodes' 11.5 KiB
-- chunks of random printable text took 1.62x uncompressed and 0.99x
-- compressed; real console output compresses further. Rows, transactions
-- and reads are unchanged. MySQL has no PAGE_COMPRESSED: the option is in a
-- MariaDB-only executable comment, and MySQL only sets the table's comment.
-- The ALTER rebuilds the table (an upgrade with much history takes a while).

-- +goose Up
ALTER TABLE console_chunks /*M! PAGE_COMPRESSED=1 */ COMMENT 'console history chunks';

-- +goose Down
ALTER TABLE console_chunks /*M! PAGE_COMPRESSED=0 */ COMMENT '';
