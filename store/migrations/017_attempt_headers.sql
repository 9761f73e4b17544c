-- The headers of each delivery attempt, for the console's Job page: the
-- request's as sent, with the Authorization and signature values redacted
-- (never stored), and the response's, bounded (see mediator/sender.go).
-- NULL for attempts stored before, and when no request was made or no
-- response came. Columns without defaults: adding them to the partitioned
-- parent changes only the catalog.
ALTER TABLE dispatch_attempt ADD COLUMN request_headers jsonb, ADD COLUMN response_headers jsonb;
