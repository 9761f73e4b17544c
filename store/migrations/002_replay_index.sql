-- Bulk replay (dead-letter redrive) skips jobs already replayed.
CREATE INDEX idx_dispatch_replay_of ON dispatch_job (replay_of) WHERE replay_of IS NOT NULL;
