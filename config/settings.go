package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Setting is one variable of the configuration: its name, its default, what
// it means, which commands read it, and whether its value is a secret.
// Settings is the one table `dispatch <command> -h` and `dispatch config`
// print; a test keeps it equal to what Load reads.
type Setting struct {
	Name    string
	Default string
	// Range is what values are accepted ("1s-20s", "true or false",
	// "host:port"); "" when any value is.
	Range string
	Help  string
	// Doc says more, for docs/configuration.md only (optional).
	Doc string
	// Commands that read it: "api", "router", "migrate", "rekey", "listen"
	// (`all` is api and router).
	Commands []string
	// Secret values are never printed: tokens and keys wholly, the
	// password of DATABASE_URL.
	Secret bool
	// derived is the value in effect when the variable is not set, when
	// it depends on other settings.
	derived func(Config) string
}

var (
	apiOnly      = []string{"api"}
	routerOnly   = []string{"router"}
	apiAndRouter = []string{"api", "router"}
	everyService = []string{"api", "router", "migrate", "rekey"}
)

// Settings lists every variable dispatch reads, grouped as an operator
// meets them.
var Settings = []Setting{
	{Name: "DATABASE_URL", Range: "a PostgreSQL URL or key=value string",
		Doc:     "Each connection runs `SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off` when it opens, unless the URL names either setting (then neither is set: `…&plan_cache_mode=auto` keeps PostgreSQL's defaults) or a `default_query_exec_mode` other than pgx's `cache_statement`. Behind PgBouncer in transaction mode, name `exec` or `simple_protocol`. Each connection also runs `SET jit = off` unless the URL names `jit`. See [the decision](decisions/plans-made-once.md).",
		Default: DefaultDatabaseURL, Commands: []string{"api", "router", "migrate", "rekey"}, Secret: true,
		Help: "PostgreSQL connection URL (pool size: the pools' concurrency + 10, max 64, unless pool_max_conns is set; a router alone opens 2 connections, to report its pools for the console, and delivers without the database)"},
	{Name: "DISPATCH_HTTP_ADDR", Range: "host:port", Default: DefaultHTTPAddr + " (" + InsecureHTTPAddr + " with DISPATCH_INSECURE=true)", Commands: apiOnly,
		Help: "API listener address", derived: func(c Config) string { return c.HTTPAddr }},
	{Name: "DISPATCH_ROUTER_ADDR", Range: "host:port", Default: DefaultRouterAddr + " (" + InsecureRouterAddr + " with DISPATCH_INSECURE=true)", Commands: routerOnly,
		Help:    "router health/metrics/monitoring listener (the console reads the routers' pools from the database, not from here)",
		derived: func(c Config) string { return c.RouterAddr }},
	{Name: "DISPATCH_PUBLIC_URL", Range: "an absolute http(s) URL without credentials, query or fragment",
		Doc:      "Set it whenever a proxy in front ends TLS.",
		Commands: apiOnly,
		Help:     "the URL operators reach dispatch at (https: the console's session cookie is Secure behind a TLS proxy)"},
	{Name: "DISPATCH_TRUSTED_PROXIES", Range: "IP addresses or CIDRs, comma-separated; not /0",
		Doc:      "Anyone else's X-Forwarded-For (the client address the sign-in throttle counts) and X-Forwarded-Proto are ignored.",
		Commands: apiOnly,
		Help:     "IP addresses/CIDRs of the proxies in front of the API whose X-Forwarded-For/-Proto are believed"},

	{Name: "DISPATCH_QUEUE_URL", Range: "an SQS queue URL", Commands: apiAndRouter,
		Doc:  "The one-queue shorthand; not with DISPATCH_QUEUES or a DISPATCH_ROUTER_CONFIG file that lists queues.",
		Help: "SQS FIFO queue URL; when empty DISPATCH_QUEUE_NAME is looked up"},
	{Name: "DISPATCH_QUEUE_NAME", Range: "a name ending in .fifo", Default: DefaultQueueName, Commands: apiAndRouter,
		Help: "SQS FIFO queue name, looked up when DISPATCH_QUEUE_URL is empty"},
	{Name: "DISPATCH_QUEUES", Range: "URL_OR_NAME[:CONNECTIONS[:VISIBILITY_TIMEOUT]], comma-separated; each ending in .fifo, connections 1–20, visibility 1s–12h",
		Doc: "Several queues: the router consumes all of them, each with its own receive loops (connections) and visibility timeout (the queue's own when not given), and a job may name any of them (`queueUrl`, by URL, or by name for a queue given by name). The first is the default. " +
			"Example: `https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo:4,slow-partner.fifo:1:300s`. A DISPATCH_ROUTER_CONFIG file may list them instead (`queues`).",
		Commands: apiAndRouter,
		Help:     "several queues, the default first: URL_OR_NAME[:CONNECTIONS[:VISIBILITY_TIMEOUT]], comma-separated (instead of DISPATCH_QUEUE_URL/NAME)"},
	{Name: "DISPATCH_QUEUE_CREATE", Range: "true or false", Default: "false", Commands: apiAndRouter,
		Help: "create the queues given by name (FIFO, high throughput) when they do not exist"},
	{Name: "DISPATCH_SQS_TIMEOUT", Range: "100ms–5m", Default: dur(DefaultSQSTimeout), Commands: apiAndRouter,
		Help: "deadline of every SQS call (a receive: its long-poll wait plus this)"},
	{Name: "DISPATCH_RECEIVE_WAIT", Range: "1s–20s", Default: dur(DefaultReceiveWait), Commands: routerOnly,
		Help: "SQS long-poll wait, 1s-20s"},
	{Name: "DISPATCH_LOCAL_DELIVERY", Range: "true or false", Default: "true", Commands: routerOnly,
		Help: "a new job goes straight to a pool with an idle worker, with no SQS round trip: in `all` from this process's API; split, the router asks the API at DISPATCH_PROCESS_URL for new jobs (grouped jobs, retries and a busy pool go through the queue)"},
	{Name: "DISPATCH_PROCESS_URL", Range: "an absolute http(s) URL", Default: DefaultProcessURL, Commands: routerOnly,
		Help: "the processing endpoint the router hands pointers to (`all`: its own API unless set)"},
	{Name: "DISPATCH_POOLS", Range: "CODE:CONCURRENCY[:RATE_PER_MINUTE], comma-separated; concurrency 1–1000", Default: DefaultPools, Commands: apiAndRouter,
		Help: "processing pools, CODE:CONCURRENCY[:RATE_PER_MINUTE], comma-separated"},
	{Name: "DISPATCH_ROUTER_CONFIG", Range: "a readable YAML or JSON file", Commands: apiAndRouter,
		Doc: "Seed 002's shape: `{\"queues\": [{\"queueUri\" or \"queueName\", \"connections\", \"visibilityTimeout\"}], \"processingPools\": [{\"code\", \"concurrency\", \"rateLimitPerMinute\"}]}`; " +
			"`visibilityTimeout` in seconds (or a duration such as `300s`). A queue may add `\"endpoint\"`, the SQS endpoint it is reached through instead of AWS_ENDPOINT_URL_SQS (a queue on another ElasticMQ or LocalStack, or behind a proxy of its own; in AWS, an endpoint of the region dispatch signs for). " +
			"Its queues replace DISPATCH_QUEUES and DISPATCH_QUEUE_URL/NAME, its pools DISPATCH_POOLS. A key it does not know (a misspelt one) stops the start, or a reload, naming its line.",
		Help: "YAML/JSON file with queues and processingPools (seed 002's router configuration); SIGHUP or POST /monitoring/reload reads its pools again"},

	{Name: "DISPATCH_API_TOKENS", Range: "comma-separated, 16+ characters each", Commands: apiOnly, Secret: true,
		Help: "bearer tokens for /api/dispatch/*, comma-separated, 16+ characters each"},
	{Name: "DISPATCH_ADMIN_TOKEN", Range: "16+ characters", Commands: apiAndRouter, Secret: true,
		Help: "bearer token for /api/admin/* and the console's sign-in, and for the router's changes (PUT /monitoring/pools/{code}, POST /monitoring/reload)"},
	{Name: "DISPATCH_INTERNAL_TOKEN", Range: "16+ characters", Commands: apiAndRouter, Secret: true,
		Help: "bearer token the router sends to the processing endpoint"},
	{Name: "DISPATCH_ENCRYPTION_KEY", Range: "32 bytes in standard base64", Commands: []string{"api", "rekey"}, Secret: true,
		Help: "base64 32-byte key that encrypts credentials' secrets at rest (openssl rand -base64 32)"},
	{Name: "DISPATCH_ENCRYPTION_KEY_PREVIOUS", Range: "32 bytes in standard base64", Commands: []string{"api", "rekey"}, Secret: true,
		Help: "the previous key, while `dispatch rekey` re-encrypts under the new one"},
	{Name: "DISPATCH_INSECURE", Range: "true or false", Default: "false", Commands: everyService,
		Help: "true: run without tokens and key (local use only); routes without tokens then answer only requests for localhost, an IP address, a one-label name or DISPATCH_PUBLIC_URL's host"},

	{Name: "DISPATCH_ALLOW_PRIVATE_TARGETS", Range: "true or false", Default: "false", Commands: apiOnly,
		Help: "allow targets on loopback/private/link-local addresses, and plain http"},
	{Name: "DISPATCH_ALLOWED_TARGET_CIDRS", Range: "CIDRs, comma-separated", Commands: apiOnly,
		Help: "private ranges to allow anyway, comma-separated CIDRs"},
	{Name: "DISPATCH_ALLOW_HTTP_TARGETS", Range: "true or false", Default: "false", Commands: apiOnly,
		Help: "accept http:// target URLs (https is required otherwise)"},
	{Name: "DISPATCH_MAX_PAYLOAD", Range: "1024–67108864", Default: fmt.Sprint(DefaultMaxPayload), Commands: apiOnly,
		Help: "request body limit in bytes"},
	{Name: "DISPATCH_MAX_FANOUT", Range: "1–100000", Default: fmt.Sprint(DefaultMaxFanout), Commands: apiOnly,
		Help: "the most ACTIVE subscriptions one event may match"},
	{Name: "DISPATCH_MAX_FANOUT_BYTES", Range: "1048576–68719476736", Default: fmt.Sprint(DefaultMaxFanoutBytes), Commands: apiOnly,
		Help: "the most bytes of event data one event may copy into its jobs"},

	{Name: "DISPATCH_RETRY_BASE", Range: "above 0, at most DISPATCH_RETRY_MAX", Default: dur(DefaultRetryBase), Commands: apiOnly, Help: "retry backoff base"},
	{Name: "DISPATCH_RETRY_MAX", Range: "at least DISPATCH_RETRY_BASE", Default: dur(DefaultRetryMax), Commands: apiOnly, Help: "retry backoff cap"},
	{Name: "DISPATCH_DELIVERY_TIMEOUT", Range: "1ms–15m",
		Doc:     "A claim's lease is twice this plus 15s.",
		Default: dur(DefaultDeliveryTimeout), Commands: apiAndRouter,
		Help: "timeout of one webhook request"},
	{Name: "DISPATCH_BREAKER_FAILURES", Range: "0–1000", Default: fmt.Sprint(DefaultBreakerFailures), Commands: apiOnly,
		Help: "failures in a row that open a target host's circuit breaker (0: off)"},
	{Name: "DISPATCH_BREAKER_OPEN", Range: "at least 1s while DISPATCH_BREAKER_FAILURES is above 0",
		Doc:     "The breaker library would read 0 as 60s, so it is refused while breaking is on.",
		Default: dur(DefaultBreakerOpen), Commands: apiOnly,
		Help: "how long an open breaker stays open"},
	{Name: "DISPATCH_REQUEUE_AFTER", Range: "at least 1s",
		Doc:     "Keep it above the deepest backlog you expect: a live job this overdue has its pointer sent again.",
		Default: dur(DefaultRequeueAfter), Commands: apiOnly,
		Help: "how overdue a live job may go before its pointer is sent again"},
	{Name: "DISPATCH_ROTATION_GRACE", Range: "0s–720h", Default: dur(DefaultRotationGrace), Commands: apiOnly,
		Help: "default grace period of a secret rotation"},
	{Name: "DISPATCH_SUBSCRIPTION_DISABLE_AFTER", Range: "a duration; 0 turns it off", Default: dur(DefaultSubscriptionDisableAfter), Commands: apiOnly,
		Help: "disable a subscription whose jobs all failed for this long (0: never)"},
	{Name: "DISPATCH_ALERT_WINDOW", Range: "1s–24h", Default: dur(DefaultAlertWindow), Commands: apiOnly,
		Doc:  "Alerts go to the destinations an admin adds (`/api/admin/dispatch/alerts/destinations`), as jobs of source `dispatch.alerts`.",
		Help: "the least time between two alerts of one kind to one destination; what happens meanwhile comes in the next, summed up"},
	{Name: "DISPATCH_ALERT_EXHAUSTED_THRESHOLD", Range: "0–1000000", Default: fmt.Sprint(DefaultAlertExhaustedThreshold), Commands: apiOnly,
		Help: "jobs of one source and type exhausting their retries within DISPATCH_ALERT_EXHAUSTED_WINDOW that raise an alert (0: never)"},
	{Name: "DISPATCH_ALERT_EXHAUSTED_WINDOW", Range: "1s–24h", Default: dur(DefaultAlertExhaustedWindow), Commands: apiOnly,
		Help: "the window DISPATCH_ALERT_EXHAUSTED_THRESHOLD counts in"},
	{Name: "DISPATCH_ALERT_BACKLOG_AGE", Range: "0 turns it off, or at least 1s", Default: dur(DefaultAlertBacklogAge), Commands: apiOnly,
		Help: "alert when the oldest due job has waited longer than this (0: never)"},

	{Name: "DISPATCH_RETENTION", Range: "0 (keep everything), or 1m–876000h",
		Doc:     "A partition that still holds a live job is kept until none is left.",
		Default: dur(DefaultRetention), Commands: apiOnly,
		Help: "how long finished jobs, attempts and events are kept (0: forever)"},
	{Name: "DISPATCH_PARTITION_INTERVAL", Range: "1m–744h", Default: dur(DefaultPartitionInterval), Commands: apiOnly,
		Help: "width of a time partition of the history"},
	{Name: "DISPATCH_AUTO_MIGRATE", Range: "true or false", Default: "true", Commands: apiOnly,
		Help: "apply the schema's migrations at start"},
	{Name: "DISPATCH_NODE_ID", Range: "0–1023",
		Doc:      "Set a distinct one per replica in production; should two processes still collide, a create retries with a fresh id.",
		Commands: apiOnly,
		Help:     "snowflake node id, 0-1023, distinct per replica (default: derived from host and pid)",
		derived:  func(c Config) string { return fmt.Sprintf("%d (derived from host and pid)", c.NodeID) }},

	{Name: "DISPATCH_SHUTDOWN_TIMEOUT", Range: "at least DISPATCH_DELIVERY_TIMEOUT + 5s",
		Doc:     "A shorter stop could cut off a delivery the target accepted before it is recorded, which would be delivered again.",
		Default: "DISPATCH_DELIVERY_TIMEOUT + 15s, at least 30s", Commands: apiAndRouter,
		Help:    "how long in-flight work may finish after SIGTERM",
		derived: func(c Config) string { return c.ShutdownTimeout.String() }},
	{Name: "DISPATCH_HTTP_READ_TIMEOUT", Range: "1s–10m", Default: dur(DefaultHTTPReadTimeout), Commands: apiAndRouter,
		Help: "the longest a client may take to send one request"},
	{Name: "DISPATCH_HTTP_IDLE_TIMEOUT", Range: "1s–1h", Default: dur(DefaultHTTPIdleTimeout), Commands: apiAndRouter,
		Help: "idle keep-alive connections close after this"},
	{Name: "DISPATCH_HTTP_MAX_CONNS", Range: "16–1000000", Default: fmt.Sprint(DefaultHTTPMaxConns), Commands: apiAndRouter,
		Help: "connections served at once per listener"},
	{Name: "DISPATCH_LOG_FORMAT", Range: "json, text", Default: DefaultLogFormat, Commands: everyService, Help: "json or text"},
	{Name: "DISPATCH_LOG_LEVEL", Range: "debug, info, warn, error", Default: DefaultLogLevel, Commands: everyService, Help: "debug, info, warn or error"},
	{Name: "DISPATCH_CPU_PROFILE", Range: "a file path",
		Doc:      "Read with `go tool pprof`; dispatch-bench -cpuprofile sets it for the processes it starts.",
		Commands: apiAndRouter,
		Help:     "a file to write a pprof CPU profile of the whole run to"},

	{Name: "DISPATCH_LISTEN_SECRET", Range: "secrets, comma-separated", Commands: []string{"listen"}, Secret: true,
		Help: "signing secrets `dispatch listen` verifies with, comma-separated (rotation)"},
}

// dur formats a default duration as it is written: 1h, not 1h0m0s.
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// SDKSettings are variables the AWS SDK reads for the queue (its standard
// chain); `dispatch config` shows the ones set, secrets masked.
var SDKSettings = []Setting{
	{Name: "AWS_ENDPOINT_URL_SQS", Help: "SQS endpoint (ElasticMQ, LocalStack, the stand-in); unset: real SQS"},
	{Name: "AWS_REGION", Help: "region (a queue given by its AWS URL is called in the URL's region)"},
	{Name: "AWS_PROFILE", Help: "shared-config profile"},
	{Name: "AWS_ACCESS_KEY_ID", Help: "access key id", Secret: true},
	{Name: "AWS_SECRET_ACCESS_KEY", Help: "secret access key", Secret: true},
	{Name: "AWS_SESSION_TOKEN", Help: "session token", Secret: true},
	{Name: "AWS_ROLE_ARN", Help: "role to assume (web identity)"},
	{Name: "AWS_WEB_IDENTITY_TOKEN_FILE", Help: "web identity token file (EKS IRSA)"},
}

// Flag is the flag that sets the variable: --http-addr for
// DISPATCH_HTTP_ADDR, --database-url for DATABASE_URL.
func (s Setting) Flag() string {
	return "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.Name, "DISPATCH_")), "_", "-")
}

// ReadBy reports whether command reads the setting; "all" and "config" are
// api and router together.
func (s Setting) ReadBy(command string) bool {
	for _, c := range s.Commands {
		if c == command || (command == "all" || command == "config") && (c == "api" || c == "router") {
			return true
		}
	}
	return false
}

// Reads reports whether command reads the setting called name.
func Reads(command, name string) bool {
	s, ok := settingNamed(name)
	return ok && s.ReadBy(command)
}

// settingNamed returns the setting called name.
func settingNamed(name string) (Setting, bool) {
	for _, s := range Settings {
		if s.Name == name {
			return s, true
		}
	}
	return Setting{}, false
}

// SettingsFor returns the settings command reads, in table order.
func SettingsFor(command string) []Setting {
	var out []Setting
	for _, s := range Settings {
		if s.ReadBy(command) {
			out = append(out, s)
		}
	}
	return out
}

// Value is a setting's value in effect, as `dispatch config` prints it.
type Value struct {
	Setting
	Value  string // masked when the setting is secret
	Source string // "set" (environment or flag), "default", or "derived"
}

// Effective returns the value of each of settings in effect under getenv,
// secrets masked. c, when not nil, is the loaded configuration: it gives
// the values derived from other settings.
func Effective(settings []Setting, getenv func(string) string, c *Config) []Value {
	out := make([]Value, 0, len(settings))
	for _, s := range settings {
		v := Value{Setting: s, Value: s.Default, Source: "default"}
		if raw := strings.TrimSpace(getenv(s.Name)); raw != "" {
			v.Value, v.Source = s.Mask(raw), "set"
		} else if s.derived != nil && c != nil {
			if d := s.derived(*c); d != s.Default {
				v.Value, v.Source = d, "derived"
			}
		}
		out = append(out, v)
	}
	return out
}

// Mask returns value as it may be shown: a secret token or key as ****
// (each of a list), a URL or connection string with its password masked.
// Any other setting's URL is shown with the password it may carry masked
// too (https://user:pass@host).
func (s Setting) Mask(value string) string {
	if !s.Secret || value == "" {
		if strings.Contains(value, "://") {
			return MaskDatabaseURL(value)
		}
		return value
	}
	if s.Name == "DATABASE_URL" {
		return MaskDatabaseURL(value)
	}
	parts := strings.Split(value, ",")
	for i := range parts {
		parts[i] = "****"
	}
	return strings.Join(parts, ",")
}

var keywordPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// MaskDatabaseURL masks the password of a PostgreSQL URL
// (postgres://user:password@host/db, or ?password=) or keyword/value
// connection string (password=...). A URL Go's parser refuses (pgx reads
// some of them: a password with a '#' in it, say) has everything between
// the user name and its last '@' masked.
func MaskDatabaseURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "****")
		}
		q := u.Query()
		masked := false
		for _, k := range []string{"password", "sslpassword"} { // sslpassword: the client key's passphrase
			if q.Has(k) {
				q.Set(k, "****")
				masked = true
			}
		}
		if masked {
			u.RawQuery = q.Encode()
		}
		return strings.ReplaceAll(u.String(), "%2A%2A%2A%2A", "****")
	}
	if pw, ok := urlPassword(raw); ok {
		raw = strings.Replace(raw, ":"+pw+"@", ":****@", 1)
	}
	return keywordPassword.ReplaceAllString(raw, "${1}****")
}

// urlPassword is the password in a URL's user information (scheme://
// user:password@…), found without Go's URL parser: everything between the
// user name's ':' and the last '@'.
func urlPassword(raw string) (string, bool) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return "", false
	}
	at := strings.LastIndex(raw, "@")
	if at <= i+3 {
		return "", false
	}
	c := strings.IndexByte(raw[i+3:at], ':')
	if c < 0 {
		return "", false
	}
	return raw[i+3+c+1 : at], true
}

// passwordParam is a password parameter's value, in a URL's query or a
// keyword/value string.
var passwordParam = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|[^&\s]+)`)

// Passwords is every password the connection string or URL raw may carry,
// for scrubbing them from text that may quote it (a driver's error): its
// user information's, as written and unescaped, and each password
// parameter's, with and without quotes.
func Passwords(raw string) []string {
	var out []string
	if pw, ok := urlPassword(raw); ok {
		out = append(out, pw)
		if u, err := url.PathUnescape(pw); err == nil && u != pw {
			out = append(out, u)
		}
	}
	for _, m := range passwordParam.FindAllStringSubmatch(raw, -1) {
		out = append(out, m[1], strings.Trim(m[1], "'"))
	}
	return slices.DeleteFunc(out, func(p string) bool { return strings.Trim(p, "'") == "" })
}
