-- Credentials are bound to the targets an admin allows them for
-- (docs/decisions/credential-allowed-targets.md): allowed_targets lists
-- origins (scheme://host[:port]), each optionally followed by a path
-- prefix. Empty: the credentials may be sent nowhere.
ALTER TABLE dispatch_credentials ADD COLUMN allowed_targets TEXT[] NOT NULL DEFAULT '{}';

-- On upgrade, existing credentials are bound to the origins they are
-- already used with: their jobs' target_url and their subscriptions' url.
-- The origin is scheme://host[:port], scheme and host in lower case, a
-- trailing dot of the host and the scheme's default port dropped, as the
-- service writes allowedTargets. Each distinct (credentials, url) pair is
-- parsed once.
WITH used AS (
    SELECT DISTINCT credentials_id, target_url AS url FROM dispatch_job WHERE credentials_id IS NOT NULL
    UNION
    SELECT credentials_id, url FROM dispatch_subscription WHERE credentials_id IS NOT NULL
), parts AS (
    -- scheme, host (an [IPv6] literal or a name), port; userinfo skipped
    SELECT credentials_id, lower(m[1]) AS scheme, lower(regexp_replace(m[2], '\.$', '')) AS host, NULLIF(m[3], '') AS port
    FROM used, regexp_match(url, '^([A-Za-z][A-Za-z0-9+.-]*)://(?:[^/?#]*@)?(\[[^]/?#]*\]|[^/?#:\[\]]+)(?::([0-9]{1,5}))?(?:[/?#]|$)') AS m
    WHERE m IS NOT NULL
), origins AS (
    SELECT credentials_id, scheme || '://' || host ||
        CASE WHEN port IS NULL OR (scheme = 'https' AND port::int = 443) OR (scheme = 'http' AND port::int = 80)
             THEN '' ELSE ':' || port::int END AS origin
    FROM parts
    WHERE scheme IN ('http', 'https') AND host NOT IN ('', '[]')
)
UPDATE dispatch_credentials c SET allowed_targets = o.targets
FROM (SELECT credentials_id, array_agg(DISTINCT origin ORDER BY origin) AS targets FROM origins GROUP BY credentials_id) o
WHERE c.id = o.credentials_id;
