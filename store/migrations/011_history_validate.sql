-- Time partitions, step 2 of 3: validate the legacy bounds (a read of each
-- table under a lock that lets creates and deliveries go on) and copy the
-- idempotency keys kept so far. Step 3 copies the few made since.
ALTER TABLE dispatch_job VALIDATE CONSTRAINT dispatch_job_legacy_bound;
ALTER TABLE dispatch_attempt VALIDATE CONSTRAINT dispatch_attempt_legacy_bound;
ALTER TABLE dispatch_event VALIDATE CONSTRAINT dispatch_event_legacy_bound;

UPDATE dispatch_legacy_bound SET keys_copied_to = COALESCE((SELECT max(id) FROM dispatch_job), 0),
    event_keys_copied_to = COALESCE((SELECT max(id) FROM dispatch_event), 0);
INSERT INTO dispatch_job_key (idempotency_key, job_id)
SELECT idempotency_key, id FROM dispatch_job
WHERE idempotency_key IS NOT NULL AND event_id IS NULL AND id <= (SELECT keys_copied_to FROM dispatch_legacy_bound)
ON CONFLICT DO NOTHING;
INSERT INTO dispatch_event_key (idempotency_key, event_id)
SELECT idempotency_key, id FROM dispatch_event
WHERE idempotency_key IS NOT NULL AND id <= (SELECT event_keys_copied_to FROM dispatch_legacy_bound)
ON CONFLICT DO NOTHING;
