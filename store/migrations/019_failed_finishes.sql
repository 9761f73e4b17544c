-- The Overview's success rate is per job: of the jobs that finished in the
-- window, how many were delivered. A delivered job completes with its one
-- successful attempt, so the delivered ones are counted from the attempts'
-- covering index (idx_attempt_stats); the jobs that ended undelivered
-- (ERROR, EXPIRED) are counted here, by when they ended. Partial: a
-- delivered job adds no entry, so a delivery costs what it did.
CREATE INDEX idx_dispatch_failed_done ON dispatch_job (completed_at) WHERE status IN ('ERROR', 'EXPIRED');
