-- dispatch schema, version 1. Ids are snowflake TSIDs (BIGINT); no foreign
-- keys between aggregates (seed 002), referential checks live in the code.

CREATE TABLE dispatch_job (
    id                   BIGINT PRIMARY KEY,
    external_id          VARCHAR(32),
    created_at           TIMESTAMPTZ NOT NULL,
    updated_at           TIMESTAMPTZ NOT NULL,
    source               TEXT NOT NULL,
    type                 TEXT NOT NULL,
    group_id             TEXT,
    target_url           TEXT NOT NULL,
    protocol             TEXT NOT NULL DEFAULT 'HTTP_WEBHOOK',
    headers              JSONB NOT NULL DEFAULT '{}',
    payload              TEXT NOT NULL,
    payload_content_type TEXT NOT NULL,
    credentials_id       BIGINT,
    status               TEXT NOT NULL,
    max_retries          INT NOT NULL,
    retry_strategy       TEXT NOT NULL,
    scheduled_for        TIMESTAMPTZ,
    expires_at           TIMESTAMPTZ,
    attempt_count        INT NOT NULL DEFAULT 0,
    last_attempt_at      TIMESTAMPTZ,
    completed_at         TIMESTAMPTZ,
    duration_millis      BIGINT,
    last_error           TEXT,
    idempotency_key      TEXT,
    metadata             JSONB NOT NULL DEFAULT '{}',
    replay_of            BIGINT,
    -- outbox: when the pointer went onto the queue (NULL: not sent yet, or
    -- to be sent again), when the next attempt is due, and the claim lease.
    queued_at            TIMESTAMPTZ,
    next_attempt_at      TIMESTAMPTZ NOT NULL,
    claimed_until        TIMESTAMPTZ,
    CONSTRAINT dispatch_job_status_check CHECK (status IN
        ('PENDING','IN_PROGRESS','COMPLETED','FAILED','ERROR','CANCELLED','EXPIRED')),
    CONSTRAINT dispatch_job_attempts_check CHECK (attempt_count >= 0 AND attempt_count <= max_retries)
);

CREATE UNIQUE INDEX dispatch_job_idempotency_key ON dispatch_job (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX idx_dispatch_external_id ON dispatch_job (external_id) WHERE external_id IS NOT NULL;
CREATE INDEX idx_dispatch_status ON dispatch_job (status, id DESC);
CREATE INDEX idx_dispatch_source ON dispatch_job (source, id DESC);
CREATE INDEX idx_dispatch_type ON dispatch_job (type, id DESC);
CREATE INDEX idx_dispatch_group_id ON dispatch_job (group_id, id DESC) WHERE group_id IS NOT NULL;
CREATE INDEX idx_dispatch_scheduled ON dispatch_job (scheduled_for) WHERE scheduled_for IS NOT NULL;
CREATE INDEX idx_dispatch_created ON dispatch_job (created_at DESC);
CREATE INDEX idx_dispatch_metadata ON dispatch_job USING GIN (metadata jsonb_path_ops);
-- the publisher's work list: unsent pointers, oldest first.
CREATE INDEX idx_dispatch_unsent ON dispatch_job (next_attempt_at, id)
    WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS');
-- the ordering guard and the recovery sweep: live jobs only.
CREATE INDEX idx_dispatch_live_group ON dispatch_job (group_id, id)
    WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND group_id IS NOT NULL;
CREATE INDEX idx_dispatch_live ON dispatch_job (next_attempt_at)
    WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND queued_at IS NOT NULL;

CREATE TABLE dispatch_attempt (
    id              BIGINT PRIMARY KEY,
    job_id          BIGINT NOT NULL,
    attempt_number  INT NOT NULL,
    attempted_at    TIMESTAMPTZ NOT NULL,
    completed_at    TIMESTAMPTZ NOT NULL,
    duration_millis BIGINT NOT NULL,
    status          TEXT NOT NULL,
    response_code   INT,
    response_body   TEXT,
    error_message   TEXT,
    CONSTRAINT dispatch_attempt_status_check CHECK (status IN ('SUCCESS','FAILURE','TIMEOUT','NETWORK_ERROR','BLOCKED'))
);
CREATE UNIQUE INDEX idx_attempt_job_number ON dispatch_attempt (job_id, attempt_number);
CREATE INDEX idx_attempt_status ON dispatch_attempt (status);
CREATE INDEX idx_attempt_attempted_at ON dispatch_attempt (attempted_at);

CREATE TABLE dispatch_credentials (
    id                  BIGINT PRIMARY KEY,
    -- sealed with AES-256-GCM under DISPATCH_ENCRYPTION_KEY (see store/seal.go)
    bearer_token        BYTEA,
    signing_secret      BYTEA NOT NULL,
    previous_secret     BYTEA,
    previous_expires_at TIMESTAMPTZ,
    algorithm           TEXT NOT NULL,
    signature_scheme    TEXT NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL,
    updated_at          TIMESTAMPTZ NOT NULL
);
