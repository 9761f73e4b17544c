-- Every router reports its pools here every few seconds, so the console
-- shows the pools of every router, on whatever host it runs, without the
-- API reaching any router. A router not heard from for a minute is shown
-- as gone; one that stopped says so (stopped_at); rows not written for a
-- day are deleted by the next router's report. One row per router process.
CREATE TABLE dispatch_router (
    id          text PRIMARY KEY,       -- host:pid:random, new at each start
    host        text NOT NULL,          -- the machine's host name
    version     text NOT NULL,          -- the dispatch version it runs
    pools       jsonb NOT NULL,         -- its pools, as /monitoring/pools
    started_at  timestamptz NOT NULL,
    reported_at timestamptz NOT NULL,   -- the database's clock, not the router's
    stopped_at  timestamptz
);
