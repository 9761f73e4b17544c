-- Breaker alerts held per process, each hold with a lease
-- (docs/decisions/breaker-alert-holds.md).
--
-- dispatch_alert_hold: a process that has a target host's circuit breaker
-- open holds its key ('breaker:<host>') until expires_at, and renews the
-- hold while the breaker stays open. The condition is on while an
-- unexpired hold is left: the first hold records breaker.opened, the
-- release of the last one breaker.closed. A process that stops (or loses
-- its breaker) without a release leaves a hold that runs out, so the
-- host's next opening is alerted again. holder names the process.
CREATE TABLE dispatch_alert_hold (
    key        TEXT NOT NULL,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (key, holder)
);

-- Breaker states set before holds had no owner and no end: one left on by
-- a process that stopped would keep its host's next opening from alerting.
-- They go; a breaker open at the upgrade alerts again at its next opening.
-- Until every replica runs this version, an older one still records its
-- breakers' changes as states, apart from the holds.
DELETE FROM dispatch_alert_state WHERE key LIKE 'breaker:%';
