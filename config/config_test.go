package config_test

import (
	"encoding/base64"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/config"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// secure returns the settings a production start needs, plus extra.
func secure(extra map[string]string) map[string]string {
	m := map[string]string{
		"DISPATCH_API_TOKENS":     "api-token-0123456789,api-token-abcdefghij",
		"DISPATCH_ADMIN_TOKEN":    "admin-token-0123456789",
		"DISPATCH_INTERNAL_TOKEN": "internal-token-0123456789",
		"DISPATCH_ENCRYPTION_KEY": base64.StdEncoding.EncodeToString(make([]byte, 32)),
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// insecure returns DISPATCH_INSECURE=true plus extra.
func insecure(extra map[string]string) map[string]string {
	m := map[string]string{"DISPATCH_INSECURE": "true"}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// loadErr loads m and returns the error text, failing when Load succeeds.
func loadErr(t *testing.T, m map[string]string) string {
	t.Helper()
	_, err := config.Load(env(m))
	if err == nil {
		t.Fatalf("Load(%v) succeeded, want an error", m)
	}
	if !strings.HasPrefix(err.Error(), "invalid configuration:") {
		t.Errorf("error does not start with the summary line: %q", err)
	}
	return err.Error()
}

func mustLoad(t *testing.T, m map[string]string) config.Config {
	t.Helper()
	c, err := config.Load(env(m))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestLoadDefaultsInsecure(t *testing.T) {
	c := mustLoad(t, insecure(nil))
	want := config.Config{
		DatabaseURL:     "postgres://postgres@127.0.0.1:5432/dispatch?sslmode=disable",
		HTTPAddr:        "127.0.0.1:8080", // insecure mode: loopback
		RouterAddr:      "127.0.0.1:8081",
		QueueName:       "dispatch.fifo",
		Queues:          []config.Queue{{Name: "dispatch.fifo", Connections: 1}},
		ProcessURL:      "http://127.0.0.1:8080/api/dispatch/process",
		LocalDelivery:   true,
		Pools:           []config.Pool{{Code: "DISPATCH-POOL", Concurrency: 20}},
		Insecure:        true,
		RetryBase:       5 * time.Second,
		RetryMax:        time.Hour,
		DeliveryTimeout: 30 * time.Second,
		MaxPayload:      1 << 20,
		NodeID:          c.NodeID, // derived from the host, checked below
		NodeIDDerived:   true,
		LogFormat:       "json",
		LogLevel:        "info",
		ShutdownTimeout: 45 * time.Second, // the 30s delivery timeout + 15s
		RequeueAfter:    15 * time.Minute,
		ReceiveWait:     20 * time.Second,
		RotationGrace:   24 * time.Hour,
		BreakerFailures: 5,
		BreakerOpen:     30 * time.Second,
		SQSTimeout:      10 * time.Second,
		HTTPReadTimeout: 30 * time.Second,
		HTTPIdleTimeout: time.Minute,
		HTTPMaxConns:    1024,
		AutoMigrate:     true,
		// 5 days, as Svix.
		SubscriptionDisableAfter: 120 * time.Hour,
		AlertWindow:              time.Minute, AlertExhaustedThreshold: 10,
		AlertExhaustedWindow: 5 * time.Minute, AlertBacklogAge: 15 * time.Minute,
		MaxFanout:         1000,
		MaxFanoutBytes:    256 << 20,
		Retention:         720 * time.Hour,
		PartitionInterval: 24 * time.Hour,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if c.NodeID < 0 || c.NodeID > 1023 {
		t.Errorf("derived node id %d outside 0..1023", c.NodeID)
	}
}

func TestLoadSecure(t *testing.T) {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	c := mustLoad(t, secure(map[string]string{
		"DISPATCH_ENCRYPTION_KEY": base64.StdEncoding.EncodeToString(key),
		"DISPATCH_PROCESS_URL":    "https://api.internal:8443/api/dispatch/process",
		"DISPATCH_NODE_ID":        "1023",
		"DATABASE_URL":            "postgres://u:p@db:5432/d",
		"DISPATCH_LOG_LEVEL":      "DEBUG",
	}))
	if c.Insecure {
		t.Errorf("insecure by default")
	}
	if !slices.Equal(c.APITokens, []string{"api-token-0123456789", "api-token-abcdefghij"}) {
		t.Errorf("API tokens = %q", c.APITokens)
	}
	if !slices.Equal(c.EncryptionKey, key) {
		t.Errorf("key = %x", c.EncryptionKey)
	}
	if c.ProcessURL != "https://api.internal:8443/api/dispatch/process" || !c.ProcessURLSet {
		t.Errorf("process URL = %q, set %v", c.ProcessURL, c.ProcessURLSet)
	}
	if c.NodeID != 1023 || c.DatabaseURL != "postgres://u:p@db:5432/d" || c.LogLevel != "debug" {
		t.Errorf("config = %+v", c)
	}
}

func TestLoadSecureNeedsTokensAndKey(t *testing.T) {
	for _, m := range []map[string]string{
		{},
		{"DISPATCH_INSECURE": "false"},
		{"DISPATCH_API_TOKENS": " , "},
	} {
		msg := loadErr(t, m)
		for _, name := range []string{"DISPATCH_API_TOKENS", "DISPATCH_ADMIN_TOKEN", "DISPATCH_INTERNAL_TOKEN", "DISPATCH_ENCRYPTION_KEY"} {
			if !strings.Contains(msg, name) {
				t.Errorf("env %v: error does not name %s:\n%s", m, name, msg)
			}
		}
	}
	// One missing piece is named alone.
	m := secure(nil)
	delete(m, "DISPATCH_INTERNAL_TOKEN")
	msg := loadErr(t, m)
	if !strings.Contains(msg, "DISPATCH_INTERNAL_TOKEN") || strings.Contains(msg, "DISPATCH_ADMIN_TOKEN") {
		t.Errorf("error:\n%s", msg)
	}
	// A key of blanks alone (a secret holding only a newline) is no key:
	// with none, secrets would be stored in plain text.
	for _, blank := range []string{" ", "\n"} {
		msg := loadErr(t, secure(map[string]string{"DISPATCH_ENCRYPTION_KEY": blank}))
		if !strings.Contains(msg, "DISPATCH_ENCRYPTION_KEY is required") {
			t.Errorf("DISPATCH_ENCRYPTION_KEY=%q: error:\n%s", blank, msg)
		}
	}
}

func TestLoadRejectsValue(t *testing.T) {
	tests := []struct {
		name, key, value string
	}{
		{"bad duration", "DISPATCH_RETRY_BASE", "soon"},
		{"negative duration", "DISPATCH_BREAKER_OPEN", "-5s"},
		{"base above max", "DISPATCH_RETRY_BASE", "2h"},
		{"zero base", "DISPATCH_RETRY_BASE", "0s"},
		{"zero delivery timeout", "DISPATCH_DELIVERY_TIMEOUT", "0s"},
		{"huge delivery timeout", "DISPATCH_DELIVERY_TIMEOUT", "1h"},
		{"receive wait above the SQS limit", "DISPATCH_RECEIVE_WAIT", "21s"},
		{"SQS timeout too short", "DISPATCH_SQS_TIMEOUT", "1ms"},
		{"read timeout zero", "DISPATCH_HTTP_READ_TIMEOUT", "0s"},
		{"idle timeout huge", "DISPATCH_HTTP_IDLE_TIMEOUT", "48h"},
		{"max conns too few", "DISPATCH_HTTP_MAX_CONNS", "3"},
		{"max conns not a number", "DISPATCH_HTTP_MAX_CONNS", "lots"},
		{"bad bool", "DISPATCH_QUEUE_CREATE", "maybe"},
		{"bad bool allow private", "DISPATCH_ALLOW_PRIVATE_TARGETS", "yes please"},
		{"pool concurrency 0", "DISPATCH_POOLS", "X:0"},
		{"pool concurrency not a number", "DISPATCH_POOLS", "X:many"},
		{"pool concurrency too high", "DISPATCH_POOLS", "X:1001"},
		{"pool without concurrency", "DISPATCH_POOLS", "X"},
		{"pool with too many parts", "DISPATCH_POOLS", "X:1:2:3"},
		{"pool negative rate", "DISPATCH_POOLS", "X:1:-5"},
		{"pool rate not a number", "DISPATCH_POOLS", "X:1:fast"},
		{"pool without code", "DISPATCH_POOLS", ":3"},
		{"duplicate pool", "DISPATCH_POOLS", "A:1,B:2,A:3"},
		{"key not base64", "DISPATCH_ENCRYPTION_KEY", "not base64!"},
		{"key too short", "DISPATCH_ENCRYPTION_KEY", base64.StdEncoding.EncodeToString(make([]byte, 16))},
		{"key too long", "DISPATCH_ENCRYPTION_KEY", base64.StdEncoding.EncodeToString(make([]byte, 33))},
		{"previous key bad", "DISPATCH_ENCRYPTION_KEY_PREVIOUS", "abc"},
		{"addr without port", "DISPATCH_HTTP_ADDR", "8080"},
		{"router addr garbage", "DISPATCH_ROUTER_ADDR", "localhost"},
		{"node id too big", "DISPATCH_NODE_ID", "1024"},
		{"node id not a number", "DISPATCH_NODE_ID", "one"},
		{"max payload too small", "DISPATCH_MAX_PAYLOAD", "10"},
		{"breaker failures not a number", "DISPATCH_BREAKER_FAILURES", "x"},
		{"log format", "DISPATCH_LOG_FORMAT", "xml"},
		{"log level", "DISPATCH_LOG_LEVEL", "loud"},
		{"cidr", "DISPATCH_ALLOWED_TARGET_CIDRS", "10.0.0.0/33"},
		{"process url relative", "DISPATCH_PROCESS_URL", "/api/dispatch/process"},
		{"process url ftp", "DISPATCH_PROCESS_URL", "ftp://host/x"},
		{"queue name not fifo", "DISPATCH_QUEUE_NAME", "dispatch"},
		{"short api token", "DISPATCH_API_TOKENS", "short"},
		{"short admin token", "DISPATCH_ADMIN_TOKEN", "short"},
		{"short internal token", "DISPATCH_INTERNAL_TOKEN", "short"},
		{"public url relative", "DISPATCH_PUBLIC_URL", "dispatch.example.com"},
		{"public url ftp", "DISPATCH_PUBLIC_URL", "ftp://dispatch.example.com"},
		{"public url without host", "DISPATCH_PUBLIC_URL", "https://"},
		{"public url with credentials", "DISPATCH_PUBLIC_URL", "https://u:p@dispatch.example.com"},
		{"public url with query", "DISPATCH_PUBLIC_URL", "https://dispatch.example.com/?a=1"},
		{"trusted proxy not an address", "DISPATCH_TRUSTED_PROXIES", "10.0.0.1,proxy.internal"},
		{"trusted proxy bad cidr", "DISPATCH_TRUSTED_PROXIES", "10.0.0.0/33"},
		{"trusted proxies every IPv4 address", "DISPATCH_TRUSTED_PROXIES", "0.0.0.0/0"},
		{"trusted proxies every IPv6 address", "DISPATCH_TRUSTED_PROXIES", "::/0"},
		{"max fanout zero", "DISPATCH_MAX_FANOUT", "0"},
		{"max fanout huge", "DISPATCH_MAX_FANOUT", "100001"},
		{"max fanout not a number", "DISPATCH_MAX_FANOUT", "many"},
		{"max fanout bytes below 1 MiB", "DISPATCH_MAX_FANOUT_BYTES", "1000"},
		{"max fanout bytes above 64 GiB", "DISPATCH_MAX_FANOUT_BYTES", "68719476737"},
		{"port past 65535", "DISPATCH_HTTP_ADDR", ":99999"},
		{"port an unknown service", "DISPATCH_ROUTER_ADDR", "localhost:no-such-service"},
		{"port missing", "DISPATCH_ROUTER_ADDR", "localhost:"},
		{"database URL with a bad port", "DATABASE_URL", "postgres://u@db:notaport/x"},
		{"database URL with a bad sslmode", "DATABASE_URL", "postgres://u@db/x?sslmode=sometimes"},
		{"shutdown timeout without a unit", "DISPATCH_SHUTDOWN_TIMEOUT", "45"}, // not also "below the delivery timeout"
		{"retention past 100 years", "DISPATCH_RETENTION", "1000000h"},
		{"rotation grace past 720h", "DISPATCH_ROTATION_GRACE", "721h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := loadErr(t, secure(map[string]string{tt.key: tt.value}))
			if !strings.Contains(msg, tt.key) {
				t.Errorf("error does not name %s:\n%s", tt.key, msg)
			}
			if n := strings.Count(msg, "\n"); n != 1 {
				t.Errorf("want exactly one problem, got %d:\n%s", n, msg)
			}
		})
	}
}

func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	msg := loadErr(t, map[string]string{
		"DISPATCH_RETRY_BASE":           "soon",
		"DISPATCH_QUEUE_CREATE":         "maybe",
		"DISPATCH_POOLS":                "X:0,A:1,A:2",
		"DISPATCH_ENCRYPTION_KEY":       "not-base64!",
		"DISPATCH_HTTP_ADDR":            "8080",
		"DISPATCH_LOG_LEVEL":            "loud",
		"DISPATCH_ALLOWED_TARGET_CIDRS": "10.0.0.0/33",
		"DISPATCH_NODE_ID":              "5000",
	})
	for _, want := range []string{
		"DISPATCH_RETRY_BASE", "DISPATCH_QUEUE_CREATE", "pool X", "pool A appears twice",
		"DISPATCH_ENCRYPTION_KEY must be 32 bytes", "DISPATCH_HTTP_ADDR", "DISPATCH_LOG_LEVEL",
		"DISPATCH_ALLOWED_TARGET_CIDRS", "DISPATCH_NODE_ID",
		"DISPATCH_API_TOKENS", "DISPATCH_ADMIN_TOKEN", "DISPATCH_INTERNAL_TOKEN",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	// A bad key is reported as bad, not also as missing.
	if strings.Count(msg, "DISPATCH_ENCRYPTION_KEY") != 1 {
		t.Errorf("DISPATCH_ENCRYPTION_KEY reported more than once:\n%s", msg)
	}
}

func TestLoadValues(t *testing.T) {
	c := mustLoad(t, insecure(map[string]string{
		"DISPATCH_HTTP_ADDR":             "127.0.0.1:9000",
		"DISPATCH_QUEUE_URL":             "http://127.0.0.1:9324/000000000000/q.fifo",
		"DISPATCH_QUEUE_NAME":            "not-fifo-but-unused",
		"DISPATCH_QUEUE_CREATE":          "true",
		"DISPATCH_ALLOW_PRIVATE_TARGETS": "1",
		"DISPATCH_ALLOW_HTTP_TARGETS":    "TRUE",
		"DISPATCH_ALLOWED_TARGET_CIDRS":  "10.1.2.3/8, fd00::/8",
		"DISPATCH_RETRY_BASE":            "250ms",
		"DISPATCH_RETRY_MAX":             "10m",
		"DISPATCH_DELIVERY_TIMEOUT":      " 5s ",
		"DISPATCH_BREAKER_FAILURES":      "0",
		"DISPATCH_AUTO_MIGRATE":          "false",
		"DISPATCH_LOG_FORMAT":            "text",
		"DISPATCH_PUBLIC_URL":            "https://dispatch.example.com/ops",
		"DISPATCH_TRUSTED_PROXIES":       "10.0.0.7, 10.2.0.0/16,::ffff:192.0.2.1, fd00::1/64",
		"DISPATCH_MAX_FANOUT":            "3",
		"DISPATCH_MAX_FANOUT_BYTES":      "1048576",
	}))
	if c.HTTPAddr != "127.0.0.1:9000" || !c.QueueCreate || !c.AllowPrivateTargets || !c.AllowHTTPTargets ||
		c.RetryBase != 250*time.Millisecond || c.RetryMax != 10*time.Minute || c.DeliveryTimeout != 5*time.Second ||
		c.BreakerFailures != 0 || c.AutoMigrate || c.LogFormat != "text" ||
		c.PublicURL != "https://dispatch.example.com/ops" || c.MaxFanout != 3 || c.MaxFanoutBytes != 1<<20 {
		t.Errorf("config = %+v", c)
	}
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("10.2.0.0/16"),
		netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("fd00::/64")}
	if !slices.Equal(c.TrustedProxies, proxies) {
		t.Errorf("trusted proxies = %v, want %v (bare addresses as one-address prefixes, masked)", c.TrustedProxies, proxies)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	if !slices.Equal(c.AllowedTargetCIDRs, want) {
		t.Errorf("CIDRs = %v, want %v (masked)", c.AllowedTargetCIDRs, want)
	}
}

func TestLoadPools(t *testing.T) {
	tests := []struct {
		spec string
		want []config.Pool
	}{
		{"", []config.Pool{{Code: "DISPATCH-POOL", Concurrency: 20}}},
		{"A:5", []config.Pool{{Code: "A", Concurrency: 5}}},
		{"A:5:120,B:1", []config.Pool{{Code: "A", Concurrency: 5, RateLimitPerMinute: 120}, {Code: "B", Concurrency: 1}}},
		{" DISPATCH-POOL:20:0 , SLOW:2:6 ,", []config.Pool{{Code: "DISPATCH-POOL", Concurrency: 20}, {Code: "SLOW", Concurrency: 2, RateLimitPerMinute: 6}}},
		{"A:1000", []config.Pool{{Code: "A", Concurrency: 1000}}},
	}
	for _, tt := range tests {
		c := mustLoad(t, insecure(map[string]string{"DISPATCH_POOLS": tt.spec}))
		if !slices.Equal(c.Pools, tt.want) {
			t.Errorf("DISPATCH_POOLS=%q: pools %+v, want %+v", tt.spec, c.Pools, tt.want)
		}
	}
	c := mustLoad(t, insecure(map[string]string{"DISPATCH_POOLS": "A:5:120,B:1"}))
	if len(c.Pools) != 2 || c.Pools[0].Code != "A" || c.Pools[0].RateLimitPerMinute != 120 {
		t.Errorf("pools = %+v", c.Pools)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadRouterConfigFile(t *testing.T) {
	want := []config.Pool{{Code: "DISPATCH-POOL", Concurrency: 5}, {Code: "SLOW", Concurrency: 2, RateLimitPerMinute: 30}}
	files := map[string]string{
		"router.yaml": `
processingPools:
  - code: DISPATCH-POOL
    concurrency: 5
  - code: SLOW
    concurrency: 2
    rateLimitPerMinute: 30
`,
		// The seed's JSON format, with its queues section, reads as is.
		"router.json": `{
  "queues": [{"queueUri": "http://localhost:9324/000000000000/flow-catalyst-dispatch.fifo"}],
  "processingPools": [
    {"code": "DISPATCH-POOL", "concurrency": 5},
    {"code": "SLOW", "concurrency": 2, "rateLimitPerMinute": 30}
  ]
}`,
	}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			c := mustLoad(t, insecure(map[string]string{
				"DISPATCH_ROUTER_CONFIG": writeFile(t, name, content),
				"DISPATCH_POOLS":         "IGNORED:1", // the file wins
			}))
			if !slices.Equal(c.Pools, want) {
				t.Errorf("pools = %+v, want %+v", c.Pools, want)
			}
		})
	}
}

// The queues: seed 002's file (queueUri or queueName, connections,
// visibilityTimeout), DISPATCH_QUEUES, or the one-queue shorthand.
func TestLoadQueues(t *testing.T) {
	seed := "http://localhost:9324/000000000000/flow-catalyst-dispatch.fifo"
	tests := []struct {
		name string
		env  map[string]string
		file string
		want []config.Queue
	}{
		{"the shorthand's URL", map[string]string{"DISPATCH_QUEUE_URL": seed}, "",
			[]config.Queue{{URL: seed, Name: "flow-catalyst-dispatch.fifo", Connections: 1}}},
		{"the shorthand's name", map[string]string{"DISPATCH_QUEUE_NAME": "orders.fifo"}, "",
			[]config.Queue{{Name: "orders.fifo", Connections: 1}}},
		{"seed 002's file", nil, `{"queues": [{"queueUri": "` + seed + `"}], "processingPools": [{"code": "DISPATCH-POOL", "concurrency": 5}]}`,
			[]config.Queue{{URL: seed, Name: "flow-catalyst-dispatch.fifo", Connections: 1}}},
		{"a file with several queues", nil, `
queues:
  - queueUri: ` + seed + `
    connections: 3
    visibilityTimeout: 120
  - queueName: slow-partner.fifo
    visibilityTimeout: 15m
  - queueUri: http://elasticmq-2:9324/000000000000/elsewhere.fifo
    endpoint: http://elasticmq-2:9324
processingPools:
  - {code: DISPATCH-POOL, concurrency: 5}
`, []config.Queue{
			{URL: seed, Name: "flow-catalyst-dispatch.fifo", Connections: 3, VisibilityTimeout: 2 * time.Minute},
			{Name: "slow-partner.fifo", Connections: 1, VisibilityTimeout: 15 * time.Minute},
			{URL: "http://elasticmq-2:9324/000000000000/elsewhere.fifo", Name: "elsewhere.fifo", Connections: 1, Endpoint: "http://elasticmq-2:9324"},
		}},
		{"a file with queues alone keeps DISPATCH_POOLS", map[string]string{"DISPATCH_POOLS": "A:2"},
			`{"queues": [{"queueName": "a.fifo", "connections": 2}]}`, []config.Queue{{Name: "a.fifo", Connections: 2}}},
		{"DISPATCH_QUEUES", map[string]string{"DISPATCH_QUEUES": seed + ":4, slow.fifo:1:300s ,https://sqs.eu-west-1.amazonaws.com/123456789012/c.fifo:2:45"}, "",
			[]config.Queue{
				{URL: seed, Name: "flow-catalyst-dispatch.fifo", Connections: 4},
				{Name: "slow.fifo", Connections: 1, VisibilityTimeout: 5 * time.Minute},
				{URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/c.fifo", Name: "c.fifo", Connections: 2, VisibilityTimeout: 45 * time.Second},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = v
			}
			if tt.file != "" {
				env["DISPATCH_ROUTER_CONFIG"] = writeFile(t, "router.yaml", tt.file)
			}
			c := mustLoad(t, insecure(env))
			if !slices.Equal(c.Queues, tt.want) {
				t.Errorf("queues = %+v\nwant %+v", c.Queues, tt.want)
			}
		})
	}
	c := mustLoad(t, insecure(map[string]string{"DISPATCH_POOLS": "A:2",
		"DISPATCH_ROUTER_CONFIG": writeFile(t, "router.yaml", `{"queues": [{"queueName": "a.fifo"}]}`)}))
	if !slices.Equal(c.Pools, []config.Pool{{Code: "A", Concurrency: 2}}) {
		t.Errorf("a file without processingPools: pools %+v, want DISPATCH_POOLS's", c.Pools)
	}
}

func TestLoadQueuesErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		file string
		want []string
	}{
		{"file queues and DISPATCH_QUEUES", map[string]string{"DISPATCH_QUEUES": "b.fifo"}, `{"queues": [{"queueName": "a.fifo"}]}`,
			[]string{"DISPATCH_QUEUES must not be set"}},
		{"file queues and the shorthand", map[string]string{"DISPATCH_QUEUE_URL": "http://h/1/a.fifo"}, `{"queues": [{"queueName": "a.fifo"}]}`,
			[]string{"DISPATCH_QUEUE_URL and DISPATCH_QUEUE_NAME must not be set"}},
		{"DISPATCH_QUEUES and the shorthand", map[string]string{"DISPATCH_QUEUES": "a.fifo", "DISPATCH_QUEUE_NAME": "b.fifo"}, "",
			[]string{"DISPATCH_QUEUE_URL and DISPATCH_QUEUE_NAME must not be set with DISPATCH_QUEUES"}},
		{"not FIFO", map[string]string{"DISPATCH_QUEUES": "a.fifo,plain"}, "", []string{`entry "plain"`}},
		{"bad options", map[string]string{"DISPATCH_QUEUES": "a.fifo:x,b.fifo:1:soon,c.fifo:1:2:3"}, "",
			[]string{`entry "a.fifo:x"`, `entry "b.fifo:1:soon"`, `entry "c.fifo:1:2:3"`}},
		{"too many connections", map[string]string{"DISPATCH_QUEUES": "a.fifo:21"}, "", []string{"(a.fifo): connections must be 1 to 20"}},
		{"visibility too long", map[string]string{"DISPATCH_QUEUES": "a.fifo:1:13h"}, "", []string{"(a.fifo): visibilityTimeout must be 1s to 12h"}},
		{"twice", map[string]string{"DISPATCH_QUEUES": "a.fifo,http://h/1/a.fifo"}, "", []string{"queue a.fifo appears twice"}},
		{"neither uri nor name", nil, `{"queues": [{"connections": 2}]}`, []string{"queue 1 has neither queueUri nor queueName"}},
		{"relative uri", nil, `{"queues": [{"queueUri": "/1/a.fifo"}]}`, []string{"queueUri must be the absolute http(s) URL of a FIFO queue"}},
		{"name not the uri's", nil, `{"queues": [{"queueUri": "http://h/1/a.fifo", "queueName": "b.fifo"}]}`,
			[]string{`queueName "b.fifo" is not the name in queueUri`}},
		{"bad visibility", nil, `{"queues": [{"queueName": "a.fifo", "visibilityTimeout": "soon"}]}`,
			[]string{`queue 1: visibilityTimeout must be seconds (30) or a duration (30s) (got "soon")`}},
		{"relative endpoint", nil, `{"queues": [{"queueName": "a.fifo", "endpoint": "elasticmq:9324"}]}`,
			[]string{`queue 1: endpoint must be an absolute http(s) URL, such as http://localhost:9324 (got "elasticmq:9324")`}},
		{"neither queues nor pools", nil, `{}`, []string{"defines neither queues nor processingPools"}},
		{"zero connections", map[string]string{"DISPATCH_QUEUES": "a.fifo:0"}, "", []string{"(a.fifo): connections must be 1 to 20"}},
		{"queue URL without a scheme", map[string]string{"DISPATCH_QUEUE_URL": "sqs.eu-west-1.amazonaws.com/1/orders.fifo"}, "",
			[]string{"DISPATCH_QUEUE_URL must be the absolute http(s) URL of a FIFO queue"}},
		{"queue URL of a standard queue", map[string]string{"DISPATCH_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/orders"}, "",
			[]string{"DISPATCH_QUEUE_URL must be the absolute http(s) URL of a FIFO queue"}},
		{"a file's pool", nil, `{"processingPools": [{"code": "A", "concurrency": 0}]}`,
			[]string{"DISPATCH_ROUTER_CONFIG pool A concurrency must be 1 to 1000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = v
			}
			if tt.file != "" {
				env["DISPATCH_ROUTER_CONFIG"] = writeFile(t, "router.yaml", tt.file)
			}
			msg := loadErr(t, insecure(env))
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestLoadRouterConfigFileErrors(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"not YAML", "processingPools: [", "not valid YAML/JSON"},
		{"wrong shape", `{"processingPools": {"code": "A"}}`, "not valid YAML/JSON"},
		{"duplicate pool", "processingPools:\n  - {code: A, concurrency: 1}\n  - {code: A, concurrency: 2}\n", "pool A appears twice"},
		{"zero concurrency", `{"processingPools":[{"code":"A","concurrency":0}]}`, "pool A concurrency"},
		{"negative rate", `{"processingPools":[{"code":"A","concurrency":1,"rateLimitPerMinute":-1}]}`, "pool A rate"},
		{"no code", `{"processingPools":[{"concurrency":1}]}`, "no code"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := loadErr(t, insecure(map[string]string{"DISPATCH_ROUTER_CONFIG": writeFile(t, "router.yaml", tt.content)}))
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error does not say %q:\n%s", tt.want, msg)
			}
		})
	}
	// Misspelt keys would leave a default in force silently; every one is
	// named, with every problem of every pool.
	t.Run("every problem named", func(t *testing.T) {
		content := "queues:\n  - queueName: a.fifo\n    visibilityTimout: 60\n    connection: 2\n" +
			"processingPools:\n  - code: A\n    concurrency: 0\n    rateLimitPerMinute: -1\n    ratelimitPerMinute: 5\n"
		msg := loadErr(t, insecure(map[string]string{"DISPATCH_ROUTER_CONFIG": writeFile(t, "router.yaml", content)}))
		for _, want := range []string{"line 3: field visibilityTimout is not a setting of the router file",
			"line 4: field connection is not", "line 9: field ratelimitPerMinute is not"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error does not say %q:\n%s", want, msg)
			}
		}
		good := strings.Replace(strings.Replace(strings.Replace(content, "    visibilityTimout: 60\n", "", 1),
			"    connection: 2\n", "", 1), "    ratelimitPerMinute: 5\n", "", 1)
		msg = loadErr(t, insecure(map[string]string{"DISPATCH_ROUTER_CONFIG": writeFile(t, "router.yaml", good)}))
		for _, want := range []string{"pool A concurrency must be 1 to 1000", "pool A rate per minute must be a positive number"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error does not say %q:\n%s", want, msg)
			}
		}
	})
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.yaml")
		msg := loadErr(t, insecure(map[string]string{"DISPATCH_ROUTER_CONFIG": path}))
		if !strings.Contains(msg, "DISPATCH_ROUTER_CONFIG cannot be read") {
			t.Errorf("error:\n%s", msg)
		}
	})
}

func TestCheckUnknown(t *testing.T) {
	err := config.CheckUnknown([]string{
		"PATH=/usr/bin",
		"DISPATCH_HTTP_ADDR=:9000",
		"DISPATCH_TYPO=1",
		"DISPATCH_POOL=A:1", // the real name is DISPATCH_POOLS
		"DISPATCH_TEST_DATABASE_URL=postgres://x",
		"DISPATCH_BENCH_N=3",
		"DATABASE_URL=postgres://x",
		"NOEQUALS",
	})
	if err == nil {
		t.Fatal("unknown variables not reported")
	}
	msg := err.Error()
	for _, want := range []string{"DISPATCH_TYPO", "DISPATCH_POOL "} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not name %q:\n%s", want, msg)
		}
	}
	for _, not := range []string{"DISPATCH_HTTP_ADDR", "DISPATCH_TEST_", "DISPATCH_BENCH_", "PATH", "DATABASE_URL"} {
		if strings.Contains(msg, not) {
			t.Errorf("error names %q:\n%s", not, msg)
		}
	}
	if err := config.CheckUnknown([]string{"HOME=/root", "DISPATCH_INSECURE=true"}); err != nil {
		t.Errorf("known variables reported: %v", err)
	}
}

// Every DISPATCH_* variable Load reads must be one CheckUnknown knows, or a
// correct setting would be refused as a typo.
func TestCheckUnknownKnowsEverythingLoadReads(t *testing.T) {
	var read []string
	_, _ = config.Load(func(k string) string {
		read = append(read, k)
		return ""
	})
	var environ []string
	for _, k := range read {
		if strings.HasPrefix(k, "DISPATCH_") {
			environ = append(environ, k+"=x")
		}
	}
	if len(environ) < 25 {
		t.Fatalf("Load read only %d DISPATCH_ variables: %v", len(environ), environ)
	}
	if err := config.CheckUnknown(environ); err != nil {
		t.Errorf("variables Load reads are flagged as unknown: %v", err)
	}
}

// Settings valid one by one but wrong together stop the start, every such
// problem listed in the one message.
func TestLoadRejectsSettingsThatContradictEachOther(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"shutdown shorter than a delivery", map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "30s", "DISPATCH_SHUTDOWN_TIMEOUT": "10s"},
			[]string{"DISPATCH_SHUTDOWN_TIMEOUT", "DISPATCH_DELIVERY_TIMEOUT"}},
		{"shutdown equal to a delivery, no margin to record it", map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "30s", "DISPATCH_SHUTDOWN_TIMEOUT": "30s"},
			[]string{"DISPATCH_SHUTDOWN_TIMEOUT"}},
		{"breaker open for 0s", map[string]string{"DISPATCH_BREAKER_OPEN": "0s"},
			[]string{"DISPATCH_BREAKER_OPEN"}},
		{"both at once", map[string]string{"DISPATCH_BREAKER_OPEN": "0s", "DISPATCH_SHUTDOWN_TIMEOUT": "1s"},
			[]string{"DISPATCH_BREAKER_OPEN", "DISPATCH_SHUTDOWN_TIMEOUT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := loadErr(t, insecure(tt.env))
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not name %s:\n%s", w, msg)
				}
			}
		})
	}
	// What they guard against is allowed when it is harmless.
	for _, env := range []map[string]string{
		{"DISPATCH_BREAKER_FAILURES": "0", "DISPATCH_BREAKER_OPEN": "0s"}, // breaking is off
		{"DISPATCH_DELIVERY_TIMEOUT": "5s", "DISPATCH_SHUTDOWN_TIMEOUT": "10s"},
	} {
		mustLoad(t, insecure(env))
	}
	// Without DISPATCH_SHUTDOWN_TIMEOUT the default follows a long delivery timeout.
	if c := mustLoad(t, insecure(map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "2m"})); c.ShutdownTimeout < 2*time.Minute+5*time.Second {
		t.Errorf("default shutdown timeout %v with a 2m delivery timeout: a graceful stop would cut a delivery off", c.ShutdownTimeout)
	}
}

// A DATABASE_URL that does not parse is refused at start, without its
// password: the parser's own errors quote the URL whole.
func TestLoadRefusesABadDatabaseURLWithoutShowingItsPassword(t *testing.T) {
	for _, u := range []string{
		"postgres://dispatch:s3cret-pw@db:notaport/dispatch",
		"postgres://dispatch:s3cret-pw%zz@db/dispatch",
		"host=db password=s3cret-pw port=abc",
	} {
		msg := loadErr(t, secure(map[string]string{"DATABASE_URL": u}))
		if !strings.Contains(msg, "DATABASE_URL") || strings.Contains(msg, "s3cret") {
			t.Errorf("DATABASE_URL %q: error %q; want it named, its password not shown", u, msg)
		}
	}
	mustLoad(t, secure(map[string]string{"DATABASE_URL": "postgres://dispatch:s3cret-pw@db:5432/dispatch?sslmode=require"}))
}

// dispatch all listens on DISPATCH_HTTP_ADDR and DISPATCH_ROUTER_ADDR: the
// same port is refused at once, naming both, rather than failing to bind
// as if another process held it.
func TestLoadRefusesOnePortForBothListenersOfAll(t *testing.T) {
	same := map[string]string{"DISPATCH_HTTP_ADDR": ":8081"}
	msg := loadErr(t, secure(same))
	if !strings.Contains(msg, "DISPATCH_ROUTER_ADDR") || !strings.Contains(msg, "DISPATCH_HTTP_ADDR") {
		t.Errorf("error %q; want both listeners named", msg)
	}
	for _, pair := range [][2]string{{"127.0.0.1:8081", "0.0.0.0:8081"}, {"[::1]:9000", ":9000"}} {
		loadErr(t, secure(map[string]string{"DISPATCH_HTTP_ADDR": pair[0], "DISPATCH_ROUTER_ADDR": pair[1]}))
	}
	for _, pair := range [][2]string{{"127.0.0.1:9000", "127.0.0.2:9000"}, {":0", ":0"}, {":8080", ":8081"}} {
		mustLoad(t, secure(map[string]string{"DISPATCH_HTTP_ADDR": pair[0], "DISPATCH_ROUTER_ADDR": pair[1]}))
	}
	// An api alone does not listen on DISPATCH_ROUTER_ADDR.
	if _, err := config.LoadFor("api", env(secure(same))); err != nil {
		t.Errorf("dispatch api with DISPATCH_HTTP_ADDR=:8081: %v", err)
	}
}
