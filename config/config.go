// Package config reads dispatch's configuration from the environment and
// validates all of it at once, so a bad start names every problem.
package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"
)

// Defaults.
const (
	DefaultDatabaseURL     = "postgres://postgres@127.0.0.1:5432/dispatch?sslmode=disable"
	DefaultHTTPAddr        = ":8080"
	DefaultRouterAddr      = ":8081"
	DefaultQueueName       = "dispatch.fifo"
	DefaultProcessURL      = "http://127.0.0.1:8080/api/dispatch/process"
	DefaultPools           = "DISPATCH-POOL:20"
	DefaultRetryBase       = 5 * time.Second
	DefaultRetryMax        = time.Hour
	DefaultDeliveryTimeout = 30 * time.Second
	DefaultMaxPayload      = 1 << 20
	DefaultShutdownTimeout = 30 * time.Second // or DISPATCH_DELIVERY_TIMEOUT + DefaultShutdownMargin, if longer
	DefaultRequeueAfter    = 15 * time.Minute
	DefaultReceiveWait     = 20 * time.Second
	DefaultRotationGrace   = 24 * time.Hour
	DefaultBreakerFailures = 5
	DefaultBreakerOpen     = 30 * time.Second
	DefaultSQSTimeout      = 10 * time.Second
	DefaultHTTPReadTimeout = 30 * time.Second
	DefaultHTTPIdleTimeout = 60 * time.Second
	DefaultHTTPMaxConns    = 1024

	// MinShutdownMargin is how much longer than one delivery a graceful
	// stop must last: a processing request claims the job, delivers it,
	// and records the outcome; stopping sooner could leave a delivery the
	// target accepted unrecorded (a duplicate later). DefaultShutdownMargin
	// is the margin of the default.
	MinShutdownMargin     = 5 * time.Second
	DefaultShutdownMargin = 15 * time.Second
	// DefaultSubscriptionDisableAfter is how long a subscription may fail
	// every delivery before it is disabled (5 days, as Svix).
	DefaultSubscriptionDisableAfter = 120 * time.Hour
	// Operational alerts: at most one alert per destination and kind per
	// DefaultAlertWindow; DefaultAlertExhaustedThreshold jobs of one source
	// and type exhausting their retries within DefaultAlertExhaustedWindow,
	// or a due job waiting DefaultAlertBacklogAge, raise one.
	DefaultAlertWindow             = time.Minute
	DefaultAlertExhaustedThreshold = 10
	DefaultAlertExhaustedWindow    = 5 * time.Minute
	DefaultAlertBacklogAge         = 15 * time.Minute
	// DefaultRetention is how long finished jobs, their attempts and
	// events are kept (30 days); DefaultPartitionInterval the width of a
	// time partition of them.
	DefaultRetention         = 720 * time.Hour
	DefaultPartitionInterval = 24 * time.Hour
	DefaultLogFormat         = "json"
	DefaultLogLevel          = "info"
	// DefaultMaxFanout is how many ACTIVE subscriptions one event may
	// match; DefaultMaxFanoutBytes bounds the event's data times that
	// number (every job holds a copy of the data).
	DefaultMaxFanout      = 1000
	DefaultMaxFanoutBytes = 256 << 20
)

// InsecureHTTPAddr and InsecureRouterAddr are the listeners of
// DISPATCH_INSECURE=true when none is given: loopback only, so routes
// without tokens are not open to the network.
const (
	InsecureHTTPAddr   = "127.0.0.1:8080"
	InsecureRouterAddr = "127.0.0.1:8081"
)

// Queue is one SQS FIFO queue: the router consumes it, and a job may name
// it (queueUrl). The first queue of Config.Queues is the default: jobs that
// name none go there.
type Queue struct {
	// URL is the queue's URL, used as is (the file's queueUri).
	URL string
	// Name is the queue's name (queueName), looked up, and created with
	// DISPATCH_QUEUE_CREATE, when URL is empty; with URL, the last segment
	// of URL.
	Name string
	// Connections is how many receive loops long-poll it at once.
	Connections int
	// VisibilityTimeout is how long a received message stays invisible
	// (the receive asks for it, the heartbeat extends to it); 0: the
	// queue's own.
	VisibilityTimeout time.Duration
	// Endpoint is the SQS endpoint this queue is reached through (the
	// file's endpoint); "": AWS_ENDPOINT_URL_SQS, or the SDK's own.
	Endpoint string
}

// Key is how a job names the queue: its URL, or its name when it is
// configured by name.
func (q Queue) Key() string {
	if q.URL != "" {
		return q.URL
	}
	return q.Name
}

// Limits of a queue's settings.
const (
	MaxQueueConnections  = 20
	MaxVisibilityTimeout = 12 * time.Hour // SQS's maximum
)

// Pool is one processing pool of the router.
type Pool struct {
	Code               string `yaml:"code" json:"code"`
	Concurrency        int    `yaml:"concurrency" json:"concurrency"`
	RateLimitPerMinute int    `yaml:"rateLimitPerMinute" json:"rateLimitPerMinute"`
}

// Config is the whole configuration of a dispatch process.
type Config struct {
	DatabaseURL string
	HTTPAddr    string
	RouterAddr  string
	QueueURL    string
	QueueName   string
	QueueCreate bool
	// Queues are the queues the router consumes and jobs may name, the
	// default first: the router configuration file's queues, or
	// DISPATCH_QUEUES, or the one queue of DISPATCH_QUEUE_URL or
	// DISPATCH_QUEUE_NAME.
	Queues     []Queue
	ProcessURL string
	// LocalDelivery: in `all`, the router takes the pointers of jobs this
	// process created straight into a pool with room (router.Router.Offer).
	LocalDelivery bool
	// ProcessURLSet is true when DISPATCH_PROCESS_URL was given explicitly.
	ProcessURLSet bool
	Pools         []Pool
	APITokens     []string
	AdminToken    string
	InternalToken string
	Insecure      bool
	// EncryptionKey is the AES-256 key for secrets at rest (nil when insecure and unset).
	EncryptionKey []byte
	// PreviousEncryptionKey lets `dispatch rekey` read secrets sealed under the old key.
	PreviousEncryptionKey []byte
	AllowPrivateTargets   bool
	AllowedTargetCIDRs    []netip.Prefix
	AllowHTTPTargets      bool
	RetryBase             time.Duration
	RetryMax              time.Duration
	DeliveryTimeout       time.Duration
	MaxPayload            int64
	NodeID                int64
	NodeIDDerived         bool // NodeID came from host and pid, not DISPATCH_NODE_ID
	LogFormat             string
	LogLevel              string
	// CPUProfile, when set, is a file the process writes a pprof CPU profile
	// of its whole run to (dispatch-bench -cpuprofile sets it for the
	// processes it starts).
	CPUProfile      string
	ShutdownTimeout time.Duration
	RequeueAfter    time.Duration
	ReceiveWait     time.Duration
	RotationGrace   time.Duration
	BreakerFailures int
	BreakerOpen     time.Duration
	// SQSTimeout bounds every SQS call (a receive: its wait plus this).
	SQSTimeout time.Duration
	// HTTPReadTimeout bounds reading one whole request (body included),
	// HTTPIdleTimeout an idle keep-alive connection, and HTTPMaxConns the
	// connections each listener serves at once.
	HTTPReadTimeout time.Duration
	HTTPIdleTimeout time.Duration
	HTTPMaxConns    int
	// SubscriptionDisableAfter disables a subscription whose jobs have all
	// ended ERROR for this long; 0 turns automatic disabling off.
	SubscriptionDisableAfter time.Duration
	// AlertWindow is the least time between two alerts of one kind to one
	// destination; AlertExhaustedThreshold (0: off) jobs of one source and
	// type exhausting retries within AlertExhaustedWindow raise one, and so
	// does a due job waiting longer than AlertBacklogAge (0: off).
	AlertWindow             time.Duration
	AlertExhaustedThreshold int
	AlertExhaustedWindow    time.Duration
	AlertBacklogAge         time.Duration
	// Retention is how long finished jobs, their attempts and events are
	// kept before their partition is dropped (0: kept forever);
	// PartitionInterval the width of a partition.
	Retention         time.Duration
	PartitionInterval time.Duration
	AutoMigrate       bool
	// PublicURL is the URL operators reach dispatch at ("" when not
	// given). When it is https, the console's session cookie is Secure
	// even though a proxy in front terminates TLS.
	PublicURL string
	// TrustedProxies are the addresses of the proxies in front of the API
	// whose X-Forwarded-For and X-Forwarded-Proto are believed (none by
	// default: the client is the connection's peer).
	TrustedProxies []netip.Prefix
	// MaxFanout caps the ACTIVE subscriptions one event may match, and
	// MaxFanoutBytes the event's data times that number; a publish beyond
	// either is refused (422) and stores nothing.
	MaxFanout      int
	MaxFanoutBytes int64
}

// Load reads the configuration through getenv and reports every problem.
//
// Load checks the secrets of every command (as `dispatch all` needs them);
// LoadFor only those command reads.
func Load(getenv func(string) string) (Config, error) { return LoadFor("all", getenv) }

// LoadFor is Load for command ("api", "router", "all", "migrate" or
// "rekey"): a secret it never reads is not required, so a router is not
// given the encryption key nor the API's tokens only to start.
func LoadFor(command string, getenv func(string) string) (Config, error) {
	r := reader{getenv: getenv}
	c := Config{
		DatabaseURL:              r.str("DATABASE_URL", DefaultDatabaseURL),
		HTTPAddr:                 r.addr("DISPATCH_HTTP_ADDR", DefaultHTTPAddr),
		RouterAddr:               r.addr("DISPATCH_ROUTER_ADDR", DefaultRouterAddr),
		QueueURL:                 r.str("DISPATCH_QUEUE_URL", ""),
		QueueName:                r.str("DISPATCH_QUEUE_NAME", DefaultQueueName),
		QueueCreate:              r.bool("DISPATCH_QUEUE_CREATE", false),
		ProcessURL:               r.str("DISPATCH_PROCESS_URL", DefaultProcessURL),
		LocalDelivery:            r.bool("DISPATCH_LOCAL_DELIVERY", true),
		APITokens:                r.list("DISPATCH_API_TOKENS"),
		AdminToken:               r.str("DISPATCH_ADMIN_TOKEN", ""),
		InternalToken:            r.str("DISPATCH_INTERNAL_TOKEN", ""),
		Insecure:                 r.bool("DISPATCH_INSECURE", false),
		AllowPrivateTargets:      r.bool("DISPATCH_ALLOW_PRIVATE_TARGETS", false),
		AllowHTTPTargets:         r.bool("DISPATCH_ALLOW_HTTP_TARGETS", false),
		RetryBase:                r.duration("DISPATCH_RETRY_BASE", DefaultRetryBase),
		RetryMax:                 r.duration("DISPATCH_RETRY_MAX", DefaultRetryMax),
		DeliveryTimeout:          r.duration("DISPATCH_DELIVERY_TIMEOUT", DefaultDeliveryTimeout),
		MaxPayload:               int64(r.int("DISPATCH_MAX_PAYLOAD", DefaultMaxPayload, 1024, 64<<20)),
		LogFormat:                r.oneOf("DISPATCH_LOG_FORMAT", DefaultLogFormat, "json", "text"),
		LogLevel:                 r.oneOf("DISPATCH_LOG_LEVEL", DefaultLogLevel, "debug", "info", "warn", "error"),
		CPUProfile:               r.str("DISPATCH_CPU_PROFILE", ""),
		ShutdownTimeout:          r.duration("DISPATCH_SHUTDOWN_TIMEOUT", DefaultShutdownTimeout),
		RequeueAfter:             r.duration("DISPATCH_REQUEUE_AFTER", DefaultRequeueAfter),
		ReceiveWait:              r.duration("DISPATCH_RECEIVE_WAIT", DefaultReceiveWait),
		RotationGrace:            r.duration("DISPATCH_ROTATION_GRACE", DefaultRotationGrace),
		BreakerFailures:          r.int("DISPATCH_BREAKER_FAILURES", DefaultBreakerFailures, 0, 1000),
		BreakerOpen:              r.duration("DISPATCH_BREAKER_OPEN", DefaultBreakerOpen),
		SQSTimeout:               r.duration("DISPATCH_SQS_TIMEOUT", DefaultSQSTimeout),
		HTTPReadTimeout:          r.duration("DISPATCH_HTTP_READ_TIMEOUT", DefaultHTTPReadTimeout),
		HTTPIdleTimeout:          r.duration("DISPATCH_HTTP_IDLE_TIMEOUT", DefaultHTTPIdleTimeout),
		HTTPMaxConns:             r.int("DISPATCH_HTTP_MAX_CONNS", DefaultHTTPMaxConns, 16, 1_000_000),
		AutoMigrate:              r.bool("DISPATCH_AUTO_MIGRATE", true),
		SubscriptionDisableAfter: r.duration("DISPATCH_SUBSCRIPTION_DISABLE_AFTER", DefaultSubscriptionDisableAfter),
		AlertWindow:              r.duration("DISPATCH_ALERT_WINDOW", DefaultAlertWindow),
		AlertExhaustedThreshold:  r.int("DISPATCH_ALERT_EXHAUSTED_THRESHOLD", DefaultAlertExhaustedThreshold, 0, 1_000_000),
		AlertExhaustedWindow:     r.duration("DISPATCH_ALERT_EXHAUSTED_WINDOW", DefaultAlertExhaustedWindow),
		AlertBacklogAge:          r.duration("DISPATCH_ALERT_BACKLOG_AGE", DefaultAlertBacklogAge),
		MaxFanout:                r.int("DISPATCH_MAX_FANOUT", DefaultMaxFanout, 1, 100_000),
		Retention:                r.duration("DISPATCH_RETENTION", DefaultRetention),
		PartitionInterval:        r.duration("DISPATCH_PARTITION_INTERVAL", DefaultPartitionInterval),
		MaxFanoutBytes:           int64(r.int("DISPATCH_MAX_FANOUT_BYTES", DefaultMaxFanoutBytes, 1<<20, 64<<30)),
	}
	c.ProcessURLSet = r.str("DISPATCH_PROCESS_URL", "") != ""
	if c.Insecure { // local use: loopback unless an address is given
		if r.str("DISPATCH_HTTP_ADDR", "") == "" {
			c.HTTPAddr = InsecureHTTPAddr
		}
		if r.str("DISPATCH_ROUTER_ADDR", "") == "" {
			c.RouterAddr = InsecureRouterAddr
		}
	}
	c.EncryptionKey = r.key("DISPATCH_ENCRYPTION_KEY")
	c.PreviousEncryptionKey = r.key("DISPATCH_ENCRYPTION_KEY_PREVIOUS")
	c.AllowedTargetCIDRs = r.cidrs("DISPATCH_ALLOWED_TARGET_CIDRS")
	c.PublicURL = r.publicURL("DISPATCH_PUBLIC_URL")
	c.TrustedProxies = r.proxies("DISPATCH_TRUSTED_PROXIES")
	c.NodeID = r.nodeID()
	c.NodeIDDerived = r.str("DISPATCH_NODE_ID", "") == ""
	file := r.routerFile()
	c.Pools = r.pools(file)
	c.Queues = r.queues(file, c)
	if u, err := url.Parse(c.ProcessURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail("DISPATCH_PROCESS_URL", "must be an absolute http(s) URL")
	}
	if c.RetryBase <= 0 || c.RetryMax < c.RetryBase {
		r.fail("DISPATCH_RETRY_BASE", "must be positive and not above DISPATCH_RETRY_MAX")
	}
	if c.DeliveryTimeout <= 0 || c.DeliveryTimeout > 15*time.Minute {
		r.fail("DISPATCH_DELIVERY_TIMEOUT", "must be between 1ms and 15m (got %v)", c.DeliveryTimeout)
	}
	if c.ReceiveWait < time.Second || c.ReceiveWait > 20*time.Second {
		r.fail("DISPATCH_RECEIVE_WAIT", "must be between 1s and 20s, the SQS long-poll limit (got %v)", c.ReceiveWait)
	}
	if c.SQSTimeout < 100*time.Millisecond || c.SQSTimeout > 5*time.Minute {
		r.fail("DISPATCH_SQS_TIMEOUT", "must be between 100ms and 5m (got %v)", c.SQSTimeout)
	}
	if c.HTTPReadTimeout < time.Second || c.HTTPReadTimeout > 10*time.Minute {
		r.fail("DISPATCH_HTTP_READ_TIMEOUT", "must be between 1s and 10m, the longest a client may take to send one request (got %v)", c.HTTPReadTimeout)
	}
	if c.HTTPIdleTimeout < time.Second || c.HTTPIdleTimeout > time.Hour {
		r.fail("DISPATCH_HTTP_IDLE_TIMEOUT", "must be between 1s and 1h (got %v)", c.HTTPIdleTimeout)
	}
	if c.PartitionInterval < time.Minute || c.PartitionInterval > 31*24*time.Hour {
		r.fail("DISPATCH_PARTITION_INTERVAL", "must be between 1m and 744h, 31 days (got %v)", c.PartitionInterval)
	}
	if c.Retention != 0 && (c.Retention < time.Minute || c.Retention > 100*365*24*time.Hour) {
		r.fail("DISPATCH_RETENTION", "must be 0 (keep everything) or between 1m and 876000h, 100 years (got %v)", c.Retention)
	}
	if c.RotationGrace > 720*time.Hour {
		r.fail("DISPATCH_ROTATION_GRACE", "must be between 0s and 720h, the longest grace period a rotation may ask for (got %v)", c.RotationGrace)
	}
	if c.RequeueAfter < time.Second {
		r.fail("DISPATCH_REQUEUE_AFTER", "must be at least 1s, and longer than the deepest expected backlog (got %v)", c.RequeueAfter)
	}
	if !c.Insecure {
		reads := func(name string) bool {
			s, ok := settingNamed(name)
			return ok && s.ReadBy(command)
		}
		if reads("DISPATCH_API_TOKENS") && len(c.APITokens) == 0 {
			r.fail("DISPATCH_API_TOKENS", "is required unless DISPATCH_INSECURE=true")
		}
		if reads("DISPATCH_ADMIN_TOKEN") && c.AdminToken == "" {
			r.fail("DISPATCH_ADMIN_TOKEN", "is required unless DISPATCH_INSECURE=true")
		}
		if reads("DISPATCH_INTERNAL_TOKEN") && c.InternalToken == "" {
			r.fail("DISPATCH_INTERNAL_TOKEN", "is required unless DISPATCH_INSECURE=true")
		}
		// Blank counts as unset (a secret holding only a newline): with no
		// key, secrets would be stored in plain text.
		if reads("DISPATCH_ENCRYPTION_KEY") && c.EncryptionKey == nil && strings.TrimSpace(getenv("DISPATCH_ENCRYPTION_KEY")) == "" {
			r.fail("DISPATCH_ENCRYPTION_KEY", "is required unless DISPATCH_INSECURE=true (generate one with: openssl rand -base64 32)")
		}
	}
	for _, t := range c.APITokens {
		if len(t) < 16 {
			r.fail("DISPATCH_API_TOKENS", "each token must be at least 16 characters")
			break
		}
	}
	for name, t := range map[string]string{"DISPATCH_ADMIN_TOKEN": c.AdminToken, "DISPATCH_INTERNAL_TOKEN": c.InternalToken} {
		if t != "" && len(t) < 16 {
			r.fail(name, "must be at least 16 characters")
		}
	}
	r.crossCheck(&c)
	if (command == "all" || command == "config") && !r.bad["DISPATCH_HTTP_ADDR"] && !r.bad["DISPATCH_ROUTER_ADDR"] && sameListener(c.HTTPAddr, c.RouterAddr) {
		r.fail("DISPATCH_ROUTER_ADDR", "must not take DISPATCH_HTTP_ADDR's port: `all` listens on both (got %q and %q)", c.RouterAddr, c.HTTPAddr)
	}
	if _, err := pgconn.ParseConfig(c.DatabaseURL); err != nil {
		// Never the parser's own words, nor a url.Error's: they quote the
		// URL, password and all. The error under them names only the part
		// at fault (a port, an option, a certificate file).
		detail := ""
		for inner := errors.Unwrap(err); inner != nil; inner = errors.Unwrap(inner) {
			if _, quotes := inner.(*url.Error); !quotes {
				detail = ": " + inner.Error()
				break
			}
		}
		r.fail("DATABASE_URL", "is not a PostgreSQL connection string such as postgres://user:password@host:5432/dispatch%s", detail)
	}
	if err := errors.Join(r.errs...); err != nil {
		return Config{}, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return c, nil
}

// crossCheck reports settings that are valid one by one but do the wrong
// thing together, and derives defaults that depend on other settings.
func (r *reader) crossCheck(c *Config) {
	if r.str("DISPATCH_SHUTDOWN_TIMEOUT", "") == "" {
		c.ShutdownTimeout = max(DefaultShutdownTimeout, c.DeliveryTimeout+DefaultShutdownMargin)
	} else if !r.bad["DISPATCH_SHUTDOWN_TIMEOUT"] && !r.bad["DISPATCH_DELIVERY_TIMEOUT"] && c.ShutdownTimeout < c.DeliveryTimeout+MinShutdownMargin {
		r.fail("DISPATCH_SHUTDOWN_TIMEOUT", "must be at least DISPATCH_DELIVERY_TIMEOUT + %v (%v): a graceful stop must let a delivery in progress finish and be recorded (got %v)",
			MinShutdownMargin, c.DeliveryTimeout+MinShutdownMargin, c.ShutdownTimeout)
	}
	for name, d := range map[string]time.Duration{"DISPATCH_ALERT_WINDOW": c.AlertWindow, "DISPATCH_ALERT_EXHAUSTED_WINDOW": c.AlertExhaustedWindow} {
		if d < time.Second || d > 24*time.Hour {
			r.fail(name, "must be between 1s and 24h (got %v)", d)
		}
	}
	if c.AlertBacklogAge != 0 && c.AlertBacklogAge < time.Second {
		r.fail("DISPATCH_ALERT_BACKLOG_AGE", "must be 0 (off) or at least 1s (got %v)", c.AlertBacklogAge)
	}
	if c.BreakerFailures > 0 && c.BreakerOpen < time.Second {
		r.fail("DISPATCH_BREAKER_OPEN", "must be at least 1s while DISPATCH_BREAKER_FAILURES is above 0 (the breaker library reads 0 as 60s; set DISPATCH_BREAKER_FAILURES=0 to turn breaking off) (got %v)",
			c.BreakerOpen)
	}
}

type reader struct {
	getenv func(string) string
	errs   []error
	bad    map[string]bool // the settings that failed
}

func (r *reader) fail(name, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("  %s %s", name, fmt.Sprintf(format, args...)))
	if r.bad == nil {
		r.bad = map[string]bool{}
	}
	r.bad[name] = true
}

func (r *reader) str(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	return def
}

func (r *reader) addr(name, def string) string {
	v := r.str(name, def)
	_, port, err := net.SplitHostPort(v)
	if err == nil && port != "" {
		_, err = net.LookupPort("tcp", port) // a number to 65535, or a service name such as http
	}
	if err != nil || port == "" {
		r.fail(name, "must be host:port with a port from 0 to 65535 (or a service name), such as :8080 (got %q)", v)
	}
	return v
}

// sameListener reports whether listening on a and b (both host:port)
// would take the same port: the same port, not 0, on hosts that overlap
// (one of them every address).
func sameListener(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	every := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || every(ha) || every(hb)
}

func (r *reader) bool(name string, def bool) bool {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, "must be true or false (got %q)", v)
	}
	return b
}

func (r *reader) int(name string, def, min, max int) int {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		r.fail(name, "must be a whole number from %d to %d (got %q)", min, max, v)
		return def
	}
	return n
}

func (r *reader) duration(name string, def time.Duration) time.Duration {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		r.fail(name, "must be a duration such as 5s or 1h (got %q)", v)
		return def
	}
	return d
}

func (r *reader) oneOf(name, def string, allowed ...string) string {
	v := strings.ToLower(r.str(name, def))
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.fail(name, "must be one of %s (got %q)", strings.Join(allowed, ", "), v)
	return def
}

func (r *reader) list(name string) []string {
	var out []string
	for _, s := range strings.Split(r.getenv(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (r *reader) key(name string) []byte {
	v := r.str(name, "")
	if v == "" {
		return nil
	}
	k, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(k) != 32 {
		r.fail(name, "must be 32 bytes in standard base64 (openssl rand -base64 32)")
		return nil
	}
	return k
}

func (r *reader) cidrs(name string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range r.list(name) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			r.fail(name, "must be comma-separated CIDRs (bad %q)", s)
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}

// publicURL reads an absolute http(s) URL with a host and no credentials,
// query or fragment.
func (r *reader) publicURL(name string) string {
	v := r.str(name, "")
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		r.fail(name, "must be the absolute http(s) URL operators reach dispatch at, such as https://dispatch.example.com (got %q)", MaskDatabaseURL(v))
		return ""
	}
	return v
}

// proxies reads comma-separated IP addresses and CIDRs. Trusting every
// address (/0) is refused: any client could then say who it is.
func (r *reader) proxies(name string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range r.list(name) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				r.fail(name, "must be comma-separated IP addresses or CIDRs (bad %q)", s)
				continue
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Bits() == 0 {
			r.fail(name, "must not trust every address (%q): any client could then choose the address it is seen from", s)
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}

func (r *reader) nodeID() int64 {
	if v := r.str("DISPATCH_NODE_ID", ""); v != "" {
		return int64(r.int("DISPATCH_NODE_ID", 0, 0, 1023))
	}
	host, _ := os.Hostname()
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", host, os.Getpid())
	return int64(h.Sum32() % 1024)
}

// routerFile is DISPATCH_ROUTER_CONFIG's content in seed 002's shape
// (nil when the variable is not set or the file is unusable).
type routerFile struct {
	Queues          []fileQueue `yaml:"queues"`
	ProcessingPools []Pool      `yaml:"processingPools"`
}

// fileQueue is one entry of the file's queues.
type fileQueue struct {
	QueueURI          string  `yaml:"queueUri"`
	QueueName         string  `yaml:"queueName"`
	Connections       int     `yaml:"connections"`
	VisibilityTimeout seconds `yaml:"visibilityTimeout"`
	Endpoint          string  `yaml:"endpoint"`
}

// seconds reads a number of seconds (30), as seed 002 and FlowCatalyst
// write them, or a duration (30s).
type seconds struct {
	d   time.Duration
	bad string
}

func (s *seconds) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return nil
	}
	if n, err := strconv.Atoi(node.Value); err == nil {
		s.d = time.Duration(n) * time.Second
		return nil
	}
	d, err := time.ParseDuration(node.Value)
	if err != nil || node.Kind != yaml.ScalarNode {
		s.bad = node.Value
		return nil // reported with the queue it belongs to
	}
	s.d = d
	return nil
}

// ReadRouterFile reads the router configuration file at path again (a
// reload): its pools, and its queues (nil when it lists none), read and
// checked as Load reads and checks them.
func ReadRouterFile(path string) ([]Pool, []Queue, error) {
	r := reader{getenv: func(name string) string {
		if name == "DISPATCH_ROUTER_CONFIG" {
			return path
		}
		return ""
	}}
	file := r.routerFile()
	if file != nil && len(file.ProcessingPools) == 0 {
		r.fail("DISPATCH_ROUTER_CONFIG", "defines no processingPools")
	}
	pools := r.pools(file)
	var queues []Queue
	if file != nil && len(file.Queues) > 0 {
		queues = r.queues(file, Config{})
	}
	if err := errors.Join(r.errs...); err != nil {
		return nil, nil, fmt.Errorf("invalid router configuration:\n%w", err)
	}
	return pools, queues, nil
}

func (r *reader) routerFile() *routerFile {
	path := r.str("DISPATCH_ROUTER_CONFIG", "")
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		r.fail("DISPATCH_ROUTER_CONFIG", "cannot be read: %v", err)
		return nil
	}
	var file routerFile
	// YAML is a superset of JSON, so one decoder reads both. A key it does
	// not know is a mistake (a misspelt visibilityTimeout would otherwise
	// leave the queue's own in force, silently).
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, e := range te.Errors {
				if unknownKey.MatchString(e) {
					r.fail("DISPATCH_ROUTER_CONFIG", "%s", unknownKey.ReplaceAllString(e, "$1 is not a setting of the router file"))
				} else {
					r.fail("DISPATCH_ROUTER_CONFIG", "is not valid YAML/JSON: %s", e)
				}
			}
			return nil
		}
		r.fail("DISPATCH_ROUTER_CONFIG", "is not valid YAML/JSON: %v", err)
		return nil
	}
	return &file
}

// unknownKey matches yaml's error for a key the file's type lacks.
var unknownKey = regexp.MustCompile(`(field \S+) not found in type config\.(?:routerFile|fileQueue|Pool)`)

// queues reads the queues: the file's, or DISPATCH_QUEUES, or the one queue
// of DISPATCH_QUEUE_URL or DISPATCH_QUEUE_NAME. Two of these at once is a
// mistake (which queue was meant?), reported, not resolved.
func (r *reader) queues(file *routerFile, c Config) []Queue {
	var (
		qs     []Queue
		source string
	)
	list := r.list("DISPATCH_QUEUES")
	shorthand := r.str("DISPATCH_QUEUE_URL", "") != "" || r.str("DISPATCH_QUEUE_NAME", "") != ""
	switch {
	case file != nil && len(file.Queues) > 0:
		source = "DISPATCH_ROUTER_CONFIG"
		if len(list) > 0 {
			r.fail("DISPATCH_QUEUES", "must not be set when the DISPATCH_ROUTER_CONFIG file lists queues (one list of queues, not two)")
		}
		if shorthand {
			r.fail("DISPATCH_QUEUE_URL", "and DISPATCH_QUEUE_NAME must not be set when the DISPATCH_ROUTER_CONFIG file lists queues")
		}
		for i, fq := range file.Queues {
			if fq.VisibilityTimeout.bad != "" {
				r.fail(source, "queue %d: visibilityTimeout must be seconds (30) or a duration (30s) (got %q)", i+1, fq.VisibilityTimeout.bad)
			}
			q := Queue{URL: strings.TrimSpace(fq.QueueURI), Name: strings.TrimSpace(fq.QueueName),
				Connections: fq.Connections, VisibilityTimeout: fq.VisibilityTimeout.d, Endpoint: strings.TrimSpace(fq.Endpoint)}
			if u, err := url.Parse(q.Endpoint); q.Endpoint != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
				r.fail(source, "queue %d: endpoint must be an absolute http(s) URL, such as http://localhost:9324 (got %q)", i+1, MaskDatabaseURL(q.Endpoint))
			}
			qs = append(qs, q)
		}
	case len(list) > 0:
		source = "DISPATCH_QUEUES"
		if shorthand {
			r.fail("DISPATCH_QUEUE_URL", "and DISPATCH_QUEUE_NAME must not be set with DISPATCH_QUEUES (one list of queues, not two)")
		}
		for _, spec := range list {
			q, ok := parseQueueSpec(spec)
			if !ok {
				r.fail(source, "entry %q must be URL_OR_NAME[:CONNECTIONS[:VISIBILITY_TIMEOUT]], the queue ending in .fifo", spec)
				continue
			}
			qs = append(qs, q)
		}
	default:
		if c.QueueURL == "" && c.QueueName == "" {
			r.fail("DISPATCH_QUEUE_NAME", "must be set when DISPATCH_QUEUE_URL is empty")
			return nil
		}
		if c.QueueURL == "" && !strings.HasSuffix(c.QueueName, ".fifo") {
			r.fail("DISPATCH_QUEUE_NAME", "must name a FIFO queue (ending in .fifo)")
		}
		q := Queue{URL: c.QueueURL, Name: c.QueueName, Connections: 1}
		if q.URL != "" {
			// Checked as a queueUri of DISPATCH_QUEUES is: a bad one fails
			// the start naming it, not each receive later.
			u, err := url.Parse(q.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.HasSuffix(u.Path, ".fifo") {
				r.fail("DISPATCH_QUEUE_URL", "must be the absolute http(s) URL of a FIFO queue, ending in .fifo (got %q)", MaskDatabaseURL(q.URL))
				return nil
			}
			q.Name = lastSegment(q.URL) // DISPATCH_QUEUE_NAME is for a URL not given
		}
		return []Queue{q}
	}
	seen := map[string]bool{}
	for i := range qs {
		q := &qs[i]
		what := fmt.Sprintf("queue %d", i+1)
		if q.Connections == 0 {
			q.Connections = 1
		}
		switch {
		case q.URL == "" && q.Name == "":
			r.fail(source, "%s has neither queueUri nor queueName", what)
			continue
		case q.URL != "":
			u, err := url.Parse(q.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.HasSuffix(u.Path, ".fifo") {
				r.fail(source, "%s: queueUri must be the absolute http(s) URL of a FIFO queue, ending in .fifo (got %q)", what, MaskDatabaseURL(q.URL))
				continue
			}
			if q.Name != "" && q.Name != lastSegment(q.URL) {
				r.fail(source, "%s: queueName %q is not the name in queueUri %q", what, q.Name, q.URL)
			}
			q.Name = lastSegment(q.URL)
		case !strings.HasSuffix(q.Name, ".fifo") || strings.Contains(q.Name, "/"):
			r.fail(source, "%s: queueName must name a FIFO queue, ending in .fifo (got %q)", what, q.Name)
			continue
		}
		if q.Connections < 1 || q.Connections > MaxQueueConnections {
			r.fail(source, "%s (%s): connections must be 1 to %d", what, q.Name, MaxQueueConnections)
		}
		if q.VisibilityTimeout != 0 && (q.VisibilityTimeout < time.Second || q.VisibilityTimeout > MaxVisibilityTimeout) {
			r.fail(source, "%s (%s): visibilityTimeout must be 1s to 12h, or 0 for the queue's own", what, q.Name)
		}
		if seen[q.Name] {
			r.fail(source, "queue %s appears twice", q.Name)
		}
		seen[q.Name] = true
	}
	return qs
}

// parseQueueSpec reads one DISPATCH_QUEUES entry,
// URL_OR_NAME[:CONNECTIONS[:VISIBILITY_TIMEOUT]]. A URL holds colons of its
// own; the queue's part ends in .fifo, and what follows it are the options.
func parseQueueSpec(spec string) (Queue, bool) {
	end := strings.LastIndex(spec, ".fifo")
	if end < 0 {
		return Queue{}, false
	}
	end += len(".fifo")
	q := Queue{Connections: 1}
	if id := spec[:end]; strings.Contains(id, "://") {
		q.URL = id
	} else {
		q.Name = id
	}
	rest := spec[end:]
	if rest == "" {
		return q, true
	}
	opts, ok := strings.CutPrefix(rest, ":")
	if !ok {
		return Queue{}, false
	}
	parts := strings.Split(opts, ":")
	if len(parts) > 2 {
		return Queue{}, false
	}
	n, err := strconv.Atoi(parts[0])
	if err != nil {
		return Queue{}, false
	}
	if n == 0 {
		n = -1 // given as 0: refused by the range check, not read as unset
	}
	q.Connections = n
	if len(parts) == 2 {
		var s seconds
		_ = s.UnmarshalYAML(&yaml.Node{Kind: yaml.ScalarNode, Value: parts[1]})
		if s.bad != "" {
			return Queue{}, false
		}
		q.VisibilityTimeout = s.d
	}
	return q, true
}

func lastSegment(u string) string { return u[strings.LastIndex(u, "/")+1:] }

func (r *reader) pools(file *routerFile) []Pool {
	var pools []Pool
	source := "DISPATCH_POOLS" // the setting a bad pool's problem names
	switch {
	case file == nil && r.str("DISPATCH_ROUTER_CONFIG", "") != "":
		return nil // unusable, reported
	case file != nil && len(file.ProcessingPools) > 0:
		pools, source = file.ProcessingPools, "DISPATCH_ROUTER_CONFIG"
	case file != nil && len(file.Queues) == 0:
		r.fail("DISPATCH_ROUTER_CONFIG", "defines neither queues nor processingPools")
	default: // no file, or one with queues alone
		for _, spec := range r.list("DISPATCH_POOLS") {
			parts := strings.Split(spec, ":")
			p := Pool{Code: parts[0]}
			var err error
			if len(parts) < 2 || len(parts) > 3 {
				r.fail("DISPATCH_POOLS", "entry %q must be CODE:CONCURRENCY[:RATE_PER_MINUTE]", spec)
				continue
			}
			if p.Concurrency, err = strconv.Atoi(parts[1]); err != nil {
				p.Concurrency = -1
			}
			if len(parts) == 3 {
				if p.RateLimitPerMinute, err = strconv.Atoi(parts[2]); err != nil {
					p.RateLimitPerMinute = -1
				}
			}
			pools = append(pools, p)
		}
		if len(pools) == 0 && len(r.list("DISPATCH_POOLS")) == 0 {
			pools = []Pool{{Code: "DISPATCH-POOL", Concurrency: 20}}
		}
	}
	seen := map[string]bool{}
	for i, p := range pools {
		// Every problem of a pool is named, not the first only.
		what := "pool " + p.Code
		switch {
		case p.Code == "":
			r.fail(source, "pool %d has no code", i+1)
			what = fmt.Sprintf("pool %d", i+1)
		case seen[p.Code]:
			r.fail(source, "pool %s appears twice", p.Code)
		}
		if p.Concurrency < 1 || p.Concurrency > 1000 {
			r.fail(source, "%s concurrency must be 1 to 1000", what)
		}
		if p.RateLimitPerMinute < 0 {
			r.fail(source, "%s rate per minute must be a positive number", what)
		}
		seen[p.Code] = true
	}
	return pools
}

// known is every variable Load reads, and otherCommands those that only
// commands other than the services read (`dispatch listen`): not a typo in
// a service's environment. Both come from the settings table.
var known, otherCommands = settingNames()

// settingNames splits Settings into the variables a service command reads
// and the rest.
func settingNames() (services, others map[string]bool) {
	services, others = map[string]bool{}, map[string]bool{}
	for _, s := range Settings {
		if slices.ContainsFunc(s.Commands, func(c string) bool { return c != "listen" }) {
			services[s.Name] = true
		} else {
			others[s.Name] = true
		}
	}
	return services, others
}

// IsSetting reports whether name is a variable Load reads.
func IsSetting(name string) bool { return known[name] || name == "DATABASE_URL" }

// IsSecret reports whether the setting name holds a secret (a token, a
// key, a URL that may carry a password).
func IsSecret(name string) bool {
	s, ok := settingNamed(name)
	return ok && s.Secret
}

// CheckUnknown reports DISPATCH_* variables that nothing reads (a typo
// would otherwise silently leave a default in place), one error per line.
func CheckUnknown(environ []string) error {
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "DISPATCH_") && !known[name] && !otherCommands[name] &&
			!strings.HasPrefix(name, "DISPATCH_TEST_") && !strings.HasPrefix(name, "DISPATCH_BENCH_") {
			errs = append(errs, fmt.Errorf("  %s is not a dispatch setting (a typo?)", name))
		}
	}
	return errors.Join(errs...)
}
