-- Time partitions, step 1 of 3 (docs/decisions/history-partitions.md).
-- Jobs, attempts and events become range-partitioned by time-sorted id.
-- The tables as they are become each parent's first partition ("legacy"),
-- bounded above by the id of a moment an hour from now: every row there
-- now, and every row created until step 3 runs, is below it.
--
-- Each step is its own transaction, so that no exclusive lock is held while
-- a table is read whole: this one adds the bounds NOT VALID (a brief lock,
-- no scan); step 2 validates them and copies the idempotency keys while
-- creates and deliveries go on; step 3 swaps the tables under a lock held
-- for a few catalog changes only.

-- What dispatch's partition upkeep keeps: one row per partition, its id
-- bounds [lo, hi) (lo NULL: from the lowest id) and the times they stand for.
CREATE TABLE dispatch_partition (
    name      TEXT PRIMARY KEY,
    parent    TEXT NOT NULL,
    lo        BIGINT,
    hi        BIGINT NOT NULL,
    from_time TIMESTAMPTZ,
    to_time   TIMESTAMPTZ NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The upkeep's own record: when it last ran and dropped what.
CREATE TABLE dispatch_history_run (
    id            INT PRIMARY KEY CHECK (id = 1),
    ran_at        TIMESTAMPTZ NOT NULL,
    next_at       TIMESTAMPTZ NOT NULL,
    dropped       INT NOT NULL,
    held          INT NOT NULL,
    error         TEXT
);

-- The legacy bound: the TSID (snowflake: ms since its epoch,
-- 2010-11-04T01:42:54.657Z, shifted left 22 bits) of now + 1 h, room for
-- the jobs that replicas still running the previous version create until
-- step 3 has run; on a new database (no job yet), now.
CREATE TABLE dispatch_legacy_bound (
    id     INT PRIMARY KEY CHECK (id = 1),
    hi     BIGINT NOT NULL,
    to_time TIMESTAMPTZ NOT NULL,
    keys_copied_to BIGINT,
    event_keys_copied_to BIGINT
);
INSERT INTO dispatch_legacy_bound (id, hi, to_time)
SELECT 1, ((extract(epoch FROM t) * 1000)::bigint - 1288834974657) << 22, t
FROM (SELECT date_trunc('second', now()) + CASE WHEN EXISTS (SELECT 1 FROM dispatch_job) OR EXISTS (SELECT 1 FROM dispatch_event)
    THEN interval '1 hour' ELSE interval '0' END AS t) x;

DO $$
DECLARE b BIGINT := (SELECT hi FROM dispatch_legacy_bound);
BEGIN
    EXECUTE format('ALTER TABLE dispatch_job ADD CONSTRAINT dispatch_job_legacy_bound CHECK (id < %s) NOT VALID', b);
    EXECUTE format('ALTER TABLE dispatch_attempt ADD CONSTRAINT dispatch_attempt_legacy_bound CHECK (job_id < %s) NOT VALID', b);
    EXECUTE format('ALTER TABLE dispatch_event ADD CONSTRAINT dispatch_event_legacy_bound CHECK (id < %s) NOT VALID', b);
END $$;

-- Idempotency keys outlive no job and are unique while it is kept:
-- PostgreSQL cannot hold a unique index across partitions on a column that
-- is not the partition key, so the keys get small tables of their own,
-- emptied as their jobs' partitions are dropped.
CREATE TABLE dispatch_job_key (
    idempotency_key TEXT PRIMARY KEY,
    job_id          BIGINT NOT NULL
);
CREATE INDEX idx_job_key_job ON dispatch_job_key (job_id);
CREATE TABLE dispatch_event_key (
    idempotency_key TEXT PRIMARY KEY,
    event_id        BIGINT NOT NULL
);
CREATE INDEX idx_event_key_event ON dispatch_event_key (event_id);

-- Attaching the attempts needs their (job_id, attempt_number) index to back
-- a constraint, as the parent's will: no index is built.
ALTER TABLE dispatch_attempt ADD CONSTRAINT dispatch_attempt_job_number UNIQUE USING INDEX idx_attempt_job_number;
