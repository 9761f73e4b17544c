-- Time partitions, step 3 of 3: each table becomes the legacy partition of
-- a parent partitioned by id. Only catalog changes happen under the lock:
-- the bounds were validated in step 2, so attaching reads no row, and every
-- index the parent declares matches one the legacy table has, so attaching
-- builds none. Partitions after the legacy one are created by dispatch
-- (store/partitions.go) before it serves.

-- The keys made since step 2 copied them.
INSERT INTO dispatch_job_key (idempotency_key, job_id)
SELECT idempotency_key, id FROM dispatch_job
WHERE idempotency_key IS NOT NULL AND event_id IS NULL AND id > (SELECT keys_copied_to FROM dispatch_legacy_bound)
ON CONFLICT DO NOTHING;
INSERT INTO dispatch_event_key (idempotency_key, event_id)
SELECT idempotency_key, id FROM dispatch_event
WHERE idempotency_key IS NOT NULL AND id > (SELECT event_keys_copied_to FROM dispatch_legacy_bound)
ON CONFLICT DO NOTHING;

-- Indexes that no longer earn their upkeep: idempotency keys live in
-- dispatch_job_key; created_at filters read id ranges (ids are
-- time-sorted); nothing reads by external_id or scheduled_for; the sweep
-- finds live jobs through the status index (every 15 s, the live jobs
-- only), which spares each delivery three index entries.
DROP INDEX dispatch_job_idempotency_key;
DROP INDEX idx_dispatch_live;
DROP INDEX idx_dispatch_send_lease;
DROP INDEX idx_dispatch_created;
DROP INDEX idx_dispatch_external_id;
DROP INDEX idx_dispatch_scheduled;
DROP INDEX dispatch_event_idempotency_key;
DROP INDEX idx_event_created;
DROP INDEX idx_attempt_status;

-- The legacy tables and their indexes take new names; the parents take
-- the old ones.
ALTER TABLE dispatch_job RENAME TO dispatch_job_legacy;
ALTER TABLE dispatch_attempt RENAME TO dispatch_attempt_legacy;
ALTER TABLE dispatch_event RENAME TO dispatch_event_legacy;
ALTER INDEX dispatch_job_pkey RENAME TO dispatch_job_legacy_pkey;
ALTER INDEX idx_dispatch_status RENAME TO idx_dispatch_status_legacy;
ALTER INDEX idx_dispatch_source RENAME TO idx_dispatch_source_legacy;
ALTER INDEX idx_dispatch_type RENAME TO idx_dispatch_type_legacy;
ALTER INDEX idx_dispatch_group_id RENAME TO idx_dispatch_group_id_legacy;
ALTER INDEX idx_dispatch_metadata RENAME TO idx_dispatch_metadata_legacy;
ALTER INDEX idx_dispatch_unsent RENAME TO idx_dispatch_unsent_legacy;
ALTER INDEX idx_dispatch_live_group RENAME TO idx_dispatch_live_group_legacy;
ALTER INDEX idx_dispatch_replay_of RENAME TO idx_dispatch_replay_of_legacy;
ALTER INDEX idx_dispatch_event_id RENAME TO idx_dispatch_event_id_legacy;
ALTER INDEX idx_dispatch_subscription_done RENAME TO idx_dispatch_subscription_done_legacy;
ALTER INDEX dispatch_attempt_pkey RENAME TO dispatch_attempt_legacy_pkey;
ALTER INDEX dispatch_attempt_job_number RENAME TO dispatch_attempt_legacy_job_number;
ALTER INDEX idx_attempt_stats RENAME TO idx_attempt_stats_legacy;
ALTER INDEX dispatch_event_pkey RENAME TO dispatch_event_legacy_pkey;
ALTER INDEX idx_event_type RENAME TO idx_event_type_legacy;
ALTER INDEX idx_event_source RENAME TO idx_event_source_legacy;

-- Jobs.
CREATE TABLE dispatch_job (LIKE dispatch_job_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE dispatch_job DROP CONSTRAINT dispatch_job_legacy_bound;
ALTER TABLE dispatch_job ADD CONSTRAINT dispatch_job_pkey PRIMARY KEY (id);
ALTER SEQUENCE dispatch_job_seq OWNED BY dispatch_job.seq;
DO $$ BEGIN
    EXECUTE format('ALTER TABLE dispatch_job ATTACH PARTITION dispatch_job_legacy FOR VALUES FROM (MINVALUE) TO (%s)',
        (SELECT hi FROM dispatch_legacy_bound));
END $$;
-- The searches' indexes (status, source, type, group) are per partition:
-- the legacy table keeps its (…, id DESC) ones, and each new partition gets
-- (…, id), in which a new job's entry lands after every older one of its
-- key, so index pages fill before they split (store/partitions.go).
-- fastupdate off: each version of a job row (three per delivery) would
-- otherwise rewrite the GIN pending list's meta page, in the WAL too.
CREATE INDEX idx_dispatch_metadata ON dispatch_job USING GIN (metadata jsonb_path_ops) WITH (fastupdate = off);
CREATE INDEX idx_dispatch_unsent ON dispatch_job (next_attempt_at, id)
    WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS');
CREATE INDEX idx_dispatch_live_group ON dispatch_job (group_id, seq)
    WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND group_id IS NOT NULL;
CREATE INDEX idx_dispatch_replay_of ON dispatch_job (replay_of) WHERE replay_of IS NOT NULL;
CREATE INDEX idx_dispatch_event_id ON dispatch_job (event_id) WHERE event_id IS NOT NULL;
CREATE INDEX idx_dispatch_subscription_done ON dispatch_job (subscription_id, status, completed_at)
    WHERE subscription_id IS NOT NULL AND status IN ('COMPLETED', 'ERROR');

-- Attempts, partitioned by their job's id: a job's attempts live and go
-- with it.
CREATE TABLE dispatch_attempt (LIKE dispatch_attempt_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (job_id);
ALTER TABLE dispatch_attempt DROP CONSTRAINT dispatch_attempt_legacy_bound;
ALTER TABLE dispatch_attempt ADD CONSTRAINT dispatch_attempt_job_number UNIQUE (job_id, attempt_number);
DO $$ BEGIN
    EXECUTE format('ALTER TABLE dispatch_attempt ATTACH PARTITION dispatch_attempt_legacy FOR VALUES FROM (MINVALUE) TO (%s)',
        (SELECT hi FROM dispatch_legacy_bound));
END $$;
CREATE INDEX idx_attempt_stats ON dispatch_attempt (attempted_at) INCLUDE (status, duration_millis);

-- Events.
CREATE TABLE dispatch_event (LIKE dispatch_event_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE dispatch_event DROP CONSTRAINT dispatch_event_legacy_bound;
ALTER TABLE dispatch_event ADD CONSTRAINT dispatch_event_pkey PRIMARY KEY (id);
DO $$ BEGIN
    EXECUTE format('ALTER TABLE dispatch_event ATTACH PARTITION dispatch_event_legacy FOR VALUES FROM (MINVALUE) TO (%s)',
        (SELECT hi FROM dispatch_legacy_bound));
END $$;
CREATE INDEX idx_event_type ON dispatch_event (type, id DESC);
CREATE INDEX idx_event_source ON dispatch_event (source, id DESC);

-- Whether a job of group g placed before s is still live: the claim's and
-- the outbox's order check. A function, not a subquery, so that a
-- statement that never calls it (a batch of jobs without a group) does
-- not open and lock every partition of dispatch_job for it on each run.
CREATE FUNCTION dispatch_live_predecessor(g TEXT, s BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RETURN EXISTS (SELECT 1 FROM dispatch_job
        WHERE group_id = g AND seq < s AND status IN ('PENDING', 'IN_PROGRESS', 'FAILED'));
END
$fn$;

INSERT INTO dispatch_partition (name, parent, lo, hi, from_time, to_time)
SELECT p.name, p.parent, NULL, b.hi, NULL, b.to_time
FROM dispatch_legacy_bound b,
    (VALUES ('dispatch_job_legacy', 'dispatch_job'), ('dispatch_attempt_legacy', 'dispatch_attempt'),
            ('dispatch_event_legacy', 'dispatch_event')) AS p(name, parent);
