-- A router's report (migration 016) carries its queues too (as its
-- /monitoring/queues answers, with the depth SQS approximates), a summary
-- of the messages it holds (count, mediating, buffered, the oldest) and
-- its latest warnings, so the console's Overview shows them for every
-- router. NULL: the router runs a version from before they were reported.
ALTER TABLE dispatch_router
    ADD COLUMN queues    jsonb,
    ADD COLUMN in_flight jsonb,
    ADD COLUMN warnings  jsonb;
