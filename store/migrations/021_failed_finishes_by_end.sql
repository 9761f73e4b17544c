-- idx_dispatch_failed_done (migration 019) answered more than the
-- Overview's count: a subscription's last failure (its jobs with status
-- ERROR, newest first) could be planned as a walk back through every
-- job that failed, of every subscription, filtered by subscription; for a
-- subscription that never failed, the whole walk. Its predicate now names
-- completed_at, which the count's time range implies and a search for a
-- subscription's newest jobs does not, so the planner uses it for the
-- count only and reaches the subscription's jobs through
-- idx_dispatch_subscription_done.
DROP INDEX idx_dispatch_failed_done;
CREATE INDEX idx_dispatch_failed_done ON dispatch_job (completed_at)
    WHERE status IN ('ERROR', 'EXPIRED') AND completed_at IS NOT NULL;
