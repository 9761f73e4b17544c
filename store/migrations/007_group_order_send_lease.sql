-- A group's order is the order in which its jobs' creates committed, taken
-- from PostgreSQL, not the TSID's order: TSIDs from two API replicas sort
-- by the replicas' clocks and, within a millisecond, by node id. nextval is
-- called inside the create's statement, so a create answered before another
-- began always holds the smaller number. CACHE 1 (the default) keeps the
-- numbers in call order across sessions.
CREATE SEQUENCE dispatch_job_seq AS BIGINT;
-- No default in ADD COLUMN: a volatile default would rewrite the table.
ALTER TABLE dispatch_job ADD COLUMN seq BIGINT;
-- Live jobs keep their id as their place in the group, so pointers already
-- on the queue (which carry only the id) still sort right; new jobs number
-- after every existing id.
UPDATE dispatch_job SET seq = id WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED');
SELECT setval('dispatch_job_seq', GREATEST((SELECT max(id) FROM dispatch_job), 1));
ALTER TABLE dispatch_job ALTER COLUMN seq SET DEFAULT nextval('dispatch_job_seq');
ALTER SEQUENCE dispatch_job_seq OWNED BY dispatch_job.seq;
DROP INDEX idx_dispatch_live_group;
CREATE INDEX idx_dispatch_live_group ON dispatch_job (group_id, seq)
    WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND group_id IS NOT NULL;

-- The send lease: a job marked queued whose pointer is not yet known to be
-- on the queue. The publisher marks (queued_at, send_lease) before it calls
-- SQS and clears send_lease once the send succeeded (or the claim does, when
-- the pointer arrives first). A process killed between the mark and the
-- send leaves the lease to run out, and the sweep sends those jobs again
-- within a minute, not after DISPATCH_REQUEUE_AFTER.
ALTER TABLE dispatch_job ADD COLUMN send_lease TIMESTAMPTZ;
CREATE INDEX idx_dispatch_send_lease ON dispatch_job (send_lease) WHERE send_lease IS NOT NULL;
