-- Payloads move out of the job row into dispatch_payload, written once
-- per job (compressed when that pays, see store/payload.go) and never
-- updated: a delivery's claim and finish each write a
-- new version of the job row, and with the payload inside it every
-- version copied it (about three times the payload per delivery, in the
-- heap and in the WAL). PostgreSQL moves a value out of the row (TOAST)
-- only past about 2 KB, so a 1 KiB payload stayed inside.
--
-- Partitioned like the jobs (by job id, same bounds: the upkeep creates
-- and drops them together). Jobs stored before keep their payload in
-- their row: readers take the row's payload when it has one.
ALTER TABLE dispatch_job ALTER COLUMN payload DROP NOT NULL;

CREATE TABLE dispatch_payload (
    job_id  BIGINT NOT NULL,
    body    BYTEA NOT NULL, -- a format byte, then the payload (store/payload.go)
    CONSTRAINT dispatch_payload_pkey PRIMARY KEY (job_id)
) PARTITION BY RANGE (job_id);

-- The jobs' partitions so far, each with its payload partition.
DO $$
DECLARE p RECORD;
BEGIN
    FOR p IN SELECT name, lo, hi, from_time, to_time FROM dispatch_partition WHERE parent = 'dispatch_job' ORDER BY hi LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF dispatch_payload FOR VALUES FROM (%s) TO (%s)',
            replace(p.name, 'dispatch_job', 'dispatch_payload'),
            COALESCE(p.lo::text, 'MINVALUE'), p.hi);
        INSERT INTO dispatch_partition (name, parent, lo, hi, from_time, to_time)
        VALUES (replace(p.name, 'dispatch_job', 'dispatch_payload'), 'dispatch_payload', p.lo, p.hi, p.from_time, p.to_time);
    END LOOP;
END $$;
