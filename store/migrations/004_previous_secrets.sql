-- Every secret a rotation replaced stays valid for its own grace period:
-- a second rotation inside the first one's grace period must not drop the
-- first old secret. Newest first; sealed like previous_secret was (bound
-- to the row and the "previous_secret" column name).
ALTER TABLE dispatch_credentials
    ADD COLUMN previous_secrets BYTEA[] NOT NULL DEFAULT '{}',
    ADD COLUMN previous_expires TIMESTAMPTZ[] NOT NULL DEFAULT '{}';
UPDATE dispatch_credentials
    SET previous_secrets = ARRAY[previous_secret], previous_expires = ARRAY[previous_expires_at]
    WHERE previous_secret IS NOT NULL AND previous_expires_at IS NOT NULL;
ALTER TABLE dispatch_credentials DROP COLUMN previous_secret, DROP COLUMN previous_expires_at;
