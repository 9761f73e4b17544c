-- Every change of credentials (a rotation, a delete, new allowed targets,
-- a re-seal, or an operator's own UPDATE) is announced on the channel
-- dispatch_credentials with the credentials' id, when it commits: each
-- replica listens (Store.WatchCredentials) and drops its cached copy, so a
-- rotation with no grace period or a delete takes effect on every replica
-- at once, not when its cache entry ends.
CREATE FUNCTION dispatch_credentials_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('dispatch_credentials', OLD.id::text);
	RETURN NULL;
END
$$;

CREATE TRIGGER dispatch_credentials_changed
	AFTER UPDATE OR DELETE ON dispatch_credentials
	FOR EACH ROW EXECUTE FUNCTION dispatch_credentials_changed();
