-- The metadata search's GIN index moves to each job partition and holds
-- finished jobs only (store/partitions.go, metadataIndex): indexing every
-- version of a job row cost three GIN insertions per delivery, a quarter of
-- its WAL. Dropping the parent's index is quick; the upkeep then builds the
-- new one on each existing partition with CREATE INDEX CONCURRENTLY, so no
-- write waits for it. Until it has, a metadata search reads the partition
-- it has not reached yet without an index (the console's five-second limit
-- applies), and new partitions are created with it.
DROP INDEX idx_dispatch_metadata;
