-- The console's sessions, shared by every API replica: a request, or a
-- sign-out, that lands on another replica than the sign-in finds its
-- session. key is the SHA-256 of the cookie's random id (the id itself is
-- never stored); csrf the token state changes must carry.
CREATE TABLE dispatch_console_session (
    key        BYTEA PRIMARY KEY,
    csrf       TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX idx_console_session_expires ON dispatch_console_session (expires_at);
