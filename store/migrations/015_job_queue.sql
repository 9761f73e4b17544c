-- The queue and processing pool a job names (queueUrl, poolCode; NULL: the
-- default queue and pool), and those a subscription gives its jobs. The
-- queue is stored as the configured queue's key: its URL, or its name when
-- the router configuration names it by name. Columns without defaults:
-- adding them to the partitioned parent changes only the catalog.
ALTER TABLE dispatch_job ADD COLUMN queue_url text, ADD COLUMN pool_code text;
ALTER TABLE dispatch_subscription ADD COLUMN queue_url text, ADD COLUMN pool_code text;
