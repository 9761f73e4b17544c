-- Events and subscriptions (SPEC §10): one published event becomes one job
-- per matching ACTIVE subscription.

CREATE TABLE dispatch_subscription (
    id                    BIGINT PRIMARY KEY,
    name                  TEXT NOT NULL,
    url                   TEXT NOT NULL,
    -- patterns as given: exact types, 'prefix.*', '*'. An event of type t
    -- matches when event_types overlaps the keys of t (t, each 'prefix.*'
    -- of t, '*'), one GIN lookup whatever the number of subscriptions.
    event_types           TEXT[] NOT NULL,
    filter                JSONB NOT NULL DEFAULT '{}',
    credentials_id        BIGINT,
    headers               JSONB NOT NULL DEFAULT '{}',
    max_retries           INT NOT NULL,
    retry_strategy        TEXT NOT NULL,
    ordering_key          TEXT,
    rate_limit_per_second INT,
    status                TEXT NOT NULL,
    disabled_reason       TEXT,
    created_at            TIMESTAMPTZ NOT NULL,
    updated_at            TIMESTAMPTZ NOT NULL,
    CONSTRAINT dispatch_subscription_status_check CHECK (status IN ('ACTIVE','PENDING_VERIFICATION','DISABLED'))
);
-- fastupdate off: subscriptions change rarely and are read on every
-- publish, so entries go straight into the index instead of a pending list
-- that every lookup would scan until the next vacuum.
CREATE INDEX idx_subscription_active_types ON dispatch_subscription USING GIN (event_types)
    WITH (fastupdate = off) WHERE status = 'ACTIVE';
CREATE INDEX idx_subscription_types ON dispatch_subscription USING GIN (event_types) WITH (fastupdate = off);

-- rateLimitPerSecond as a ring of that many delivery slots per
-- subscription, shared by every processor: a delivery holds a slot from
-- before its request until one second after its response, so no second
-- ever sees more requests arrive than there are slots.
CREATE TABLE dispatch_subscription_slot (
    subscription_id BIGINT NOT NULL,
    slot            INT NOT NULL,
    free_at         TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (subscription_id, slot)
);

CREATE TABLE dispatch_event (
    id              BIGINT PRIMARY KEY,
    source          TEXT NOT NULL,
    type            TEXT NOT NULL,
    data            TEXT NOT NULL,
    metadata        JSONB NOT NULL DEFAULT '{}',
    idempotency_key TEXT,
    created_at      TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX dispatch_event_idempotency_key ON dispatch_event (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX idx_event_type ON dispatch_event (type, id DESC);
CREATE INDEX idx_event_source ON dispatch_event (source, id DESC);
CREATE INDEX idx_event_created ON dispatch_event (created_at DESC);

ALTER TABLE dispatch_job ADD COLUMN event_id BIGINT, ADD COLUMN subscription_id BIGINT;
CREATE INDEX idx_dispatch_event_id ON dispatch_job (event_id) WHERE event_id IS NOT NULL;
-- automatic disabling: a subscription's finished jobs by outcome and time.
CREATE INDEX idx_dispatch_subscription_done ON dispatch_job (subscription_id, status, completed_at)
    WHERE subscription_id IS NOT NULL AND status IN ('COMPLETED', 'ERROR');
