-- The console's Overview (GET /api/dispatch/stats) reads the attempts of
-- the last hour by time: a covering index makes that an index-only range
-- scan, however many millions of older attempts the table holds. It
-- replaces the plain index on attempted_at, whose every use it serves.
CREATE INDEX idx_attempt_stats ON dispatch_attempt (attempted_at) INCLUDE (status, duration_millis);
DROP INDEX idx_attempt_attempted_at;
