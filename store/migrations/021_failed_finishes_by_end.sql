-- idx_dispatch_failed_done's predicate names completed_at (see 019), so
-- that the planner uses it for the Overview's count only: without it, a
-- subscription's last failure (its ERROR jobs, newest first) could be
-- planned as a walk back through every job that failed, of every
-- subscription.
--
-- 019 now declares the index so, on the parent only: on a database it
-- made, this migration changes nothing. 019's first text, never released,
-- built it without that term on every partition; a development database
-- migrated with it gets the index declared again as 019 now declares it
-- (dropping the old one is a catalog change under a brief exclusive lock;
-- nothing is built under it), and the upkeep builds each partition's part
-- without holding writes.
DO $$
BEGIN
    IF (SELECT pg_get_expr(indpred, indrelid) NOT LIKE '%completed_at IS NOT NULL%'
        FROM pg_index WHERE indexrelid = 'idx_dispatch_failed_done'::regclass) THEN
        DROP INDEX idx_dispatch_failed_done;
        CREATE INDEX idx_dispatch_failed_done ON ONLY dispatch_job (completed_at)
            WHERE status IN ('ERROR', 'EXPIRED') AND completed_at IS NOT NULL;
    END IF;
END $$;
