-- Operational alerts (docs/decisions/observability.md).
--
-- dispatch_alert_destination: where alerts go, managed by admins. A
-- webhook is signed with its credentials (whose allowedTargets include the
-- url); a Slack-compatible incoming webhook is not signed.
CREATE TABLE dispatch_alert_destination (
    id             BIGINT PRIMARY KEY,
    name           TEXT NOT NULL,
    kind           TEXT NOT NULL,
    url            TEXT NOT NULL,
    credentials_id BIGINT,
    created_at     TIMESTAMPTZ NOT NULL,
    CONSTRAINT dispatch_alert_destination_kind_check CHECK (kind IN ('webhook', 'slack')),
    CONSTRAINT dispatch_alert_destination_signed_check CHECK (kind <> 'webhook' OR credentials_id IS NOT NULL)
);

-- dispatch_alert_event: what happened, one row each, in the order it was
-- recorded. Alert jobs are made from these rows: each destination keeps,
-- per kind, the last event it was sent (dispatch_alert_window).
CREATE TABLE dispatch_alert_event (
    id         BIGSERIAL PRIMARY KEY,
    kind       TEXT NOT NULL,
    subject    TEXT NOT NULL,
    detail     TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_alert_event_kind ON dispatch_alert_event (kind, id);

-- dispatch_alert_window: per destination and kind, when its last alert
-- job was made and the last event it covered. At most one alert job per
-- window; the events of the window wait for the next, as a summary.
CREATE TABLE dispatch_alert_window (
    destination_id BIGINT NOT NULL REFERENCES dispatch_alert_destination (id) ON DELETE CASCADE,
    kind           TEXT NOT NULL,
    last_event_id  BIGINT NOT NULL,
    prev_event_id  BIGINT NOT NULL DEFAULT 0,
    sent_at        TIMESTAMPTZ,
    PRIMARY KEY (destination_id, kind)
);

-- dispatch_alert_state: conditions that are on or off across every
-- replica (a target's breaker, the old backlog): an event is recorded only
-- when one changes, so each replica's breaker opening for the same host
-- makes one alert.
CREATE TABLE dispatch_alert_state (
    key        TEXT PRIMARY KEY,
    active     BOOLEAN NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL
);

-- dispatch_alert_count: jobs that exhausted their retries per source, type
-- and window, added up by every replica; crossing the threshold records
-- one event.
CREATE TABLE dispatch_alert_count (
    source       TEXT NOT NULL,
    type         TEXT NOT NULL,
    window_start TIMESTAMPTZ NOT NULL,
    count        BIGINT NOT NULL,
    PRIMARY KEY (source, type, window_start)
);

-- A subscription disabled (by request or by the automatic disable) or
-- enabled again records an event in the transaction that changes it,
-- whatever statement does it. The url is named without its query, which
-- may hold a token.
CREATE FUNCTION dispatch_subscription_alert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'DISABLED' THEN
        INSERT INTO dispatch_alert_event (kind, subject, detail)
        VALUES ('subscription.disabled', NEW.name || ' (' || NEW.id || ', ' || split_part(NEW.url, '?', 1) || ')', COALESCE(NEW.disabled_reason, ''));
    ELSIF OLD.status = 'DISABLED' AND NEW.status = 'ACTIVE' THEN
        INSERT INTO dispatch_alert_event (kind, subject, detail)
        VALUES ('subscription.enabled', NEW.name || ' (' || NEW.id || ', ' || split_part(NEW.url, '?', 1) || ')', '');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER dispatch_subscription_alert AFTER UPDATE OF status ON dispatch_subscription
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION dispatch_subscription_alert();
