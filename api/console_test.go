package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
)

func cookie(c *http.Cookie) reqOption { return func(r *http.Request) { r.AddCookie(c) } }

func header(k, v string) reqOption { return func(r *http.Request) { r.Header.Set(k, v) } }

func TestStatsCountsAttemptsByOutcome(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ok1, ok2, bad := f.createJob(t), f.createJob(t), f.createJob(t)
	f.runAttempt(t, ok1.ID, dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})
	f.runAttempt(t, ok2.ID, dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})
	f.runAttempt(t, bad.ID, dispatch.AttemptFailure, 410, dispatch.Transition{Status: dispatch.StatusError, LastError: "HTTP 410"})

	var s struct {
		Window  string `json:"window"`
		Bucket  string `json:"bucket"`
		Buckets []struct {
			Attempts int `json:"attempts"`
		} `json:"buckets"`
		Totals struct {
			Attempts    int      `json:"attempts"`
			Success     int      `json:"success"`
			Failure     int      `json:"failure"`
			SuccessRate *float64 `json:"successRate"`
			P50Millis   *float64 `json:"p50Millis"`
		} `json:"totals"`
	}
	f.do(t, "GET", "/api/dispatch/stats?window=1h&bucket=1m", "").want(t, http.StatusOK).decode(t, &s)
	if len(s.Buckets) != 60 || s.Buckets[59].Attempts != 3 {
		t.Errorf("%d buckets, the last with %d attempts; want 60, the last with 3", len(s.Buckets), s.Buckets[len(s.Buckets)-1].Attempts)
	}
	if s.Totals.Attempts != 3 || s.Totals.Success != 2 || s.Totals.Failure != 1 {
		t.Errorf("totals = %+v, want 3 attempts: 2 successes, 1 failure", s.Totals)
	}
	if s.Totals.SuccessRate == nil || *s.Totals.SuccessRate < 0.66 || *s.Totals.SuccessRate > 0.67 {
		t.Errorf("success rate = %v, want 2/3", s.Totals.SuccessRate)
	}
	if s.Totals.P50Millis == nil || *s.Totals.P50Millis != 15 {
		t.Errorf("p50 = %v, want 15 ms (every attempt took 15 ms)", s.Totals.P50Millis)
	}

	fields := f.do(t, "GET", "/api/dispatch/stats?window=forever&bucket=7m&x=1", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	slices.Sort(fields)
	if !slices.Equal(fields, []string{"bucket", "window", "x"}) {
		t.Errorf("bad stats query names %v, want bucket, window and x", fields)
	}
}

func TestBulkReplayDryRunCountsAndChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for range 3 {
		j := f.createJob(t, "source", "billing")
		f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "").want(t, http.StatusOK)
	}
	before := f.countJobs(t)
	var dry struct {
		DryRun      bool  `json:"dryRun"`
		Matched     int   `json:"matched"`
		WouldReplay int   `json:"wouldReplay"`
		Replayed    int   `json:"replayed"`
		Items       []job `json:"items"`
	}
	f.do(t, "POST", "/api/dispatch/jobs/replay?source=billing&limit=2&dryRun=true", "").want(t, http.StatusOK).decode(t, &dry)
	if !dry.DryRun || dry.Matched != 3 || dry.WouldReplay != 2 || dry.Replayed != 0 || len(dry.Items) != 0 {
		t.Errorf("dry run = %+v, want 3 matched, 2 would be replayed (limit), none replayed", dry)
	}
	if n := f.countJobs(t); n != before {
		t.Errorf("the dry run created %d jobs", n-before)
	}
	f.do(t, "POST", "/api/dispatch/jobs/replay?source=billing&limit=2", "").want(t, http.StatusOK)
	f.do(t, "POST", "/api/dispatch/jobs/replay?source=billing&dryRun=true", "").want(t, http.StatusOK).decode(t, &dry)
	if dry.Matched != 1 {
		t.Errorf("after replaying 2 of 3, the dry run matches %d, want 1", dry.Matched)
	}
	f.do(t, "POST", "/api/dispatch/jobs/replay?source=billing&dryRun=maybe", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
}

func TestListCredentialsShowsNoSecrets(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const path = "/api/admin/dispatch/credentials"
	var created []string
	for range 3 {
		var c struct{ ID, SigningSecret string }
		f.do(t, "POST", path, `{"bearerToken":"receiver-token-1"}`).want(t, http.StatusCreated).decode(t, &c)
		created = append(created, c.ID)
	}
	r := f.do(t, "GET", path+"?size=2", "").want(t, http.StatusOK)
	if strings.Contains(string(r.body), "receiver-token-1") || strings.Contains(string(r.body), "signingSecret") {
		t.Fatalf("the list shows a secret: %s", r.body)
	}
	var page struct {
		Items []struct {
			ID             string `json:"id"`
			HasBearerToken bool   `json:"hasBearerToken"`
		} `json:"items"`
		TotalItems int `json:"totalItems"`
		TotalPages int `json:"totalPages"`
	}
	r.decode(t, &page)
	if page.TotalItems != 3 || page.TotalPages != 2 || len(page.Items) != 2 || page.Items[0].ID != created[2] || !page.Items[0].HasBearerToken {
		t.Errorf("page = %+v, want the 2 newest of 3", page)
	}
	f.do(t, "GET", path+"?status=ERROR", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
}

// signIn logs in to the console and returns the session cookie and CSRF token.
func (f *fixture) signIn(t *testing.T) (*http.Cookie, string) {
	t.Helper()
	r := f.do(t, "POST", "/api/console/login", `{"token":"`+adminToken+`"}`, bearer("")).want(t, http.StatusOK)
	var s struct {
		CSRFToken string `json:"csrfToken"`
	}
	r.decode(t, &s)
	cookies := (&http.Response{Header: r.header}).Cookies()
	if len(cookies) != 1 || s.CSRFToken == "" {
		t.Fatalf("login set cookies %v and csrf %q", cookies, s.CSRFToken)
	}
	return cookies[0], s.CSRFToken
}

func TestConsoleSessionAndCSRF(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.do(t, "POST", "/api/console/login", `{"token":"`+apiToken+`"}`, bearer("")).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)
	f.do(t, "GET", "/api/console/session", "", bearer("")).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)

	c, csrf := f.signIn(t)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("session cookie %+v, want HttpOnly, SameSite=Strict, Path=/", c)
	}
	var s struct {
		CSRFToken string `json:"csrfToken"`
	}
	f.do(t, "GET", "/api/console/session", "", bearer(""), cookie(c)).want(t, http.StatusOK).decode(t, &s)
	if s.CSRFToken != csrf {
		t.Errorf("the session's CSRF token changed")
	}

	// Reads need the cookie only; on both the API and the admin routes.
	j := f.createJob(t)
	f.do(t, "GET", "/api/dispatch/jobs/"+j.ID, "", bearer(""), cookie(c)).want(t, http.StatusOK)
	f.do(t, "GET", "/api/admin/dispatch/credentials", "", bearer(""), cookie(c)).want(t, http.StatusOK)
	// State changes need the CSRF token too.
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "", bearer(""), cookie(c)).errorCode(t, http.StatusForbidden, dispatch.EForbidden)
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "", bearer(""), cookie(c), header("X-CSRF-Token", csrf+"x")).errorCode(t, http.StatusForbidden, dispatch.EForbidden)
	f.do(t, "POST", "/api/admin/dispatch/credentials", `{}`, bearer(""), cookie(c)).errorCode(t, http.StatusForbidden, dispatch.EForbidden)
	if got := f.do(t, "GET", "/api/dispatch/jobs/"+j.ID, "").object(t)["status"]; got != "PENDING" {
		t.Fatalf("a refused cancel changed the job to %v", got)
	}
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "", bearer(""), cookie(c), header("X-CSRF-Token", csrf)).want(t, http.StatusOK)
	// The session is no key to the internal processing endpoint.
	f.do(t, "POST", "/api/dispatch/process", `{"id":"1"}`, bearer(""), cookie(c), header("X-CSRF-Token", csrf)).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)
	// A made-up session is refused.
	f.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), cookie(&http.Cookie{Name: c.Name, Value: "forged"})).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)

	// Logout needs the CSRF token, then ends the session on the server.
	f.do(t, "POST", "/api/console/logout", "", bearer(""), cookie(c)).errorCode(t, http.StatusForbidden, dispatch.EForbidden)
	f.do(t, "POST", "/api/console/logout", "", bearer(""), cookie(c), header("X-CSRF-Token", csrf)).want(t, http.StatusNoContent)
	f.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), cookie(c)).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)
}

func TestConsoleLoginWithoutAdminToken(t *testing.T) {
	t.Parallel()
	// Not insecure: no admin token means no console.
	f := setup(t, withConfig(func(c *api.Config) { c.AdminToken = "" }))
	f.do(t, "POST", "/api/console/login", `{"token":""}`, bearer("")).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)
	// Insecure with no tokens at all (make run): any token opens it, and
	// the page says so.
	g := setup(t, withConfig(func(c *api.Config) { c.AdminToken, c.APITokens, c.Insecure = "", nil, true }))
	var e apiError
	g.do(t, "GET", "/api/console/session", "", bearer("")).want(t, http.StatusUnauthorized).decode(t, &e)
	if !strings.Contains(e.Error.Message, "any token signs in") {
		t.Errorf("the sign-in page is not told that any token works: %q", e.Error.Message)
	}
	var s struct {
		Insecure bool `json:"insecure"`
	}
	g.do(t, "POST", "/api/console/login", `{"token":"anything"}`, bearer("")).want(t, http.StatusOK).decode(t, &s)
	if !s.Insecure {
		t.Error("an insecure console session does not say so")
	}
}

var (
	scriptTag   = regexp.MustCompile(`(?is)<script[^>]*>`)
	inlineStyle = regexp.MustCompile(`(?is)\son[a-z]+=|\sstyle=|<style`)
)

func TestConsoleIsServedWithStrictHeaders(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.do(t, "GET", "/console/", "", bearer("")).want(t, http.StatusOK)
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP allows something unsafe: %q", csp)
	}
	if r.header.Get("Cache-Control") != "no-cache" {
		t.Errorf("the page is cached: %q", r.header.Get("Cache-Control"))
	}
	for _, tag := range scriptTag.FindAllString(string(r.body), -1) {
		if !strings.Contains(tag, " src=") {
			t.Errorf("the page has an inline script: %q", tag)
		}
	}
	if m := inlineStyle.FindString(string(r.body)); m != "" {
		t.Errorf("the page has an inline handler or style: %q", m)
	}
	if strings.Contains(string(r.body), "{{") {
		t.Errorf("the page holds a placeholder the server did not fill:\n%s", r.body)
	}
	assets := regexp.MustCompile(`(?:href|src)="(/console/static/[^"]+)"`).FindAllStringSubmatch(string(r.body), -1)
	if len(assets) < 4 {
		t.Fatalf("the page links %d assets", len(assets))
	}
	for _, a := range assets {
		ar := f.do(t, "GET", a[1], "", bearer("")).want(t, http.StatusOK)
		if cc := ar.header.Get("Cache-Control"); !strings.Contains(cc, "max-age=31536000") || !strings.Contains(cc, "immutable") {
			t.Errorf("%s: Cache-Control %q, want a year, immutable", a[1], cc)
		}
	}
	stale := regexp.MustCompile(`/console/static/[^/]+/`).ReplaceAllString(assets[0][1], "/console/static/oldbuild/")
	f.do(t, "GET", stale, "", bearer("")).errorCode(t, http.StatusNotFound, dispatch.ENotFound)
	f.do(t, "GET", "/console/static/x/../../api/openapi.json", "", bearer("")).want(t, http.StatusNotFound)
}

// TestConsoleScriptsNeverParseMarkup keeps the console's own code from
// turning outside data into markup: no innerHTML and friends, no eval.
func TestConsoleScriptsNeverParseMarkup(t *testing.T) {
	banned := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(|setAttribute\(\s*['"]on`)
	err := fs.WalkDir(api.ConsoleFiles, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") || strings.Contains(p, "/vendor/") {
			return err
		}
		b, err := fs.ReadFile(api.ConsoleFiles, p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := banned.FindString(line); m != "" {
				t.Errorf("%s:%d uses %s", p, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The monitoring shows every router's pools as the routers reported them
// to the database, whichever host they run on: up, stopped (it said so),
// or gone (silent for over a minute); and the breakers open in this API.
func TestMonitoringShowsEveryRoutersPoolsAndOpenBreakers(t *testing.T) {
	t.Parallel()
	until := time.Now().Add(30 * time.Second)
	f := setup(t, withConfig(func(c *api.Config) {
		c.Breakers = func() []api.OpenBreaker { return []api.OpenBreaker{{Host: "down.example:443", OpenUntil: until}} }
	}))
	empty := f.do(t, "GET", "/api/dispatch/monitoring", "").want(t, http.StatusOK).object(t)
	if rs, ok := empty["routers"].([]any); !ok || len(rs) != 0 {
		t.Errorf("before any report: routers %v, want []", empty["routers"])
	}

	pools := func(inFlight int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`[{"code":"DISPATCH-POOL","concurrency":20,"inFlight":%d,"buffered":1,"succeeded":10,"retried":2,"failed":1,"rateLimited":0,"avgMediationMillis":0.4}]`, inFlight))
	}
	// a-host:1:y reports its queues, what it holds and its warnings; the
	// others run a version that reports its pools only.
	queues := json.RawMessage(`[{"name":"orders.fifo","url":"http://sqs.local/000000000000/orders.fifo","status":"UP","connections":2,
		"visibilityTimeoutSeconds":60,"receives":40,"messagesReceived":12,"receiveErrors":1,"held":5,
		"depth":{"visible":7,"inFlight":5,"delayed":0},"depthAt":"2025-10-04T15:00:00.000Z"},
		{"name":"bulk.fifo","status":"DOWN","lastError":"queue: receive: connection refused","failedAt":"2025-10-04T15:00:01Z",
		"connections":1,"visibilityTimeoutSeconds":0,"receives":3,"messagesReceived":0,"receiveErrors":3,"held":0,
		"depth":null,"depthError":"queue: attributes: connection refused","depthAt":"2025-10-04T15:00:00.000Z"}]`)
	inFlight := json.RawMessage(`{"count":5,"mediating":4,"buffered":1,"oldest":{"jobId":"0HZXJ4Q2A0001","messageId":"m-1",
		"queue":"orders.fifo","pool":"DISPATCH-POOL","groupId":"customer-1","state":"MEDIATING","receivedAt":"2025-10-04T14:59:30.000Z",
		"ageMillis":30000,"startedAt":"2025-10-04T14:59:30.001Z","mediatingMillis":29999,"receiveCount":1}}`)
	warnings := json.RawMessage(`[{"type":"UNKNOWN_POOL","message":"pool NO-SUCH is not configured: the default pool took the job",
		"pool":"NO-SUCH","jobId":"0HZXJ4Q2A0002","count":3,"firstAt":"2025-10-04T14:00:00.000Z","lastAt":"2025-10-04T14:59:00.000Z"}]`)
	started := time.Now().Add(-time.Hour)
	stopped := time.Now()
	for _, r := range []dispatch.RouterReport{
		{ID: "b-host:2:x", Host: "b-host", Version: "1.2.0", Pools: pools(3), StartedAt: started},
		{ID: "a-host:1:y", Host: "a-host", Version: "1.3.0", Pools: pools(5), Queues: queues, InFlight: inFlight, Warnings: warnings, StartedAt: started},
		{ID: "a-host:0:z", Host: "a-host", Version: "1.1.0", Pools: pools(0), StartedAt: started, StoppedAt: &stopped},
		{ID: "c-host:9:w", Host: "c-host", Version: "1.2.0", Pools: pools(7), StartedAt: started},
	} {
		if err := f.store.ReportRouter(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	// c-host has not reported for two minutes.
	if _, err := f.pool.Exec(t.Context(), `UPDATE dispatch_router SET reported_at = now() - interval '2 minutes' WHERE host = 'c-host'`); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Routers []struct {
			ID, Host, State string
			SilentSeconds   float64
			Pools           []struct {
				Code     string
				InFlight int
			}
		}
		Breakers []struct{ Host string }
	}
	f.do(t, "GET", "/api/dispatch/monitoring", "").want(t, http.StatusOK).decode(t, &m)
	var got []string
	for _, r := range m.Routers {
		got = append(got, fmt.Sprintf("%s %s %d", r.ID, r.State, r.Pools[0].InFlight))
	}
	want := []string{"a-host:1:y UP 5", "b-host:2:x UP 3", "a-host:0:z STOPPED 0", "c-host:9:w GONE 7"}
	if !slices.Equal(got, want) {
		t.Errorf("routers = %q, want %q (the running ones first, by host)", got, want)
	}
	if len(m.Routers) == 4 && (m.Routers[3].SilentSeconds < 119 || m.Routers[0].SilentSeconds > 60) {
		t.Errorf("silences %v and %v, want about 120 s for the gone one and little for the first", m.Routers[3].SilentSeconds, m.Routers[0].SilentSeconds)
	}
	if len(m.Breakers) != 1 || m.Breakers[0].Host != "down.example:443" {
		t.Errorf("breakers = %+v", m.Breakers)
	}

	// The queues, in-flight messages and warnings as the router reported
	// them; a router that reported none has none of these fields.
	var raw struct {
		Routers []map[string]json.RawMessage
	}
	f.do(t, "GET", "/api/dispatch/monitoring", "").want(t, http.StatusOK).decode(t, &raw)
	for _, r := range raw.Routers {
		var id string
		_ = json.Unmarshal(r["id"], &id)
		_, hasQueues := r["queues"]
		_, hasInFlight := r["inFlight"]
		_, hasWarnings := r["warnings"]
		if id != "a-host:1:y" {
			if hasQueues || hasInFlight || hasWarnings {
				t.Errorf("router %s reported no queues, in-flight messages or warnings, but shows %v", id, r)
			}
			continue
		}
		for field, want := range map[string]json.RawMessage{"queues": queues, "inFlight": inFlight, "warnings": warnings} {
			if !jsonEqual(t, r[field], want) {
				t.Errorf("router %s's %s = %s, want %s as reported", id, field, r[field], want)
			}
		}
	}
}

// jsonEqual says whether two JSON documents hold the same values.
func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// The backlog says how far delivery is behind: live jobs by state, the
// pointers not on the queue, the longest wait of a due job by the server's
// clock, and the queue's depth; a queue that cannot be read is named
// without failing the rest.
func TestBacklogShowsLiveJobsWaitAndQueueDepth(t *testing.T) {
	t.Parallel()
	later := time.Now().Add(90 * time.Second) // the server's clock: the jobs below have waited 90 s
	f := setup(t, withConfig(func(c *api.Config) {
		c.Now = func() time.Time { return later }
		c.QueueDepth = func(context.Context) (api.QueueDepth, error) {
			return api.QueueDepth{Name: "dispatch.fifo", Visible: 7, InFlight: 2, Delayed: 1}, nil
		}
	}))
	f.createJob(t)
	f.createJob(t)
	retried := f.createJob(t)
	f.runAttempt(t, retried.ID, dispatch.AttemptFailure, 503, dispatch.Transition{Status: dispatch.StatusFailed,
		LastError: "HTTP 503", NextAttemptAt: later.Add(time.Hour)})
	f.createJob(t, "scheduledFor", later.Add(24*time.Hour).Format(time.RFC3339))

	var b struct {
		Pending, InProgress, Failed, Unsent int
		OldestDueAt                         *string
		OldestWaitSeconds                   float64
		Queue                               *struct {
			Name                       string
			Visible, InFlight, Delayed int
		}
		QueueError string
	}
	f.do(t, "GET", "/api/dispatch/backlog", "").want(t, http.StatusOK).decode(t, &b)
	if b.Pending != 3 || b.Failed != 1 || b.InProgress != 0 || b.Unsent != 2 {
		t.Errorf("backlog = %+v, want 3 PENDING (one scheduled for tomorrow), 1 FAILED, 2 unsent (the due ones)", b)
	}
	if b.OldestDueAt == nil || b.OldestWaitSeconds < 85 || b.OldestWaitSeconds > 120 {
		t.Errorf("oldest due at %v, waited %.1f s; want about 90 s", b.OldestDueAt, b.OldestWaitSeconds)
	}
	if b.Queue == nil || b.Queue.Name != "dispatch.fifo" || b.Queue.Visible != 7 || b.Queue.InFlight != 2 || b.Queue.Delayed != 1 || b.QueueError != "" {
		t.Errorf("queue = %+v (%q), want the depth read", b.Queue, b.QueueError)
	}

	down := setup(t, withConfig(func(c *api.Config) {
		c.QueueDepth = func(context.Context) (api.QueueDepth, error) {
			return api.QueueDepth{}, errors.New("AWS.SimpleQueueService.NonExistentQueue")
		}
	}))
	r := down.do(t, "GET", "/api/dispatch/backlog", "").want(t, http.StatusOK).object(t)
	if r["queue"] != nil || !strings.Contains(r["queueError"].(string), "NonExistentQueue") || r["pending"] != 0.0 || r["oldestDueAt"] != nil {
		t.Errorf("with the queue not answering: %v, want queue null, the reason, and an empty backlog", r)
	}
}

// A subscription's health counts its last finished jobs and names its last
// success and its last failure with the error, on the list (for the whole
// page at once) and on GET; a subscription with no finished job has
// none of them.
func TestSubscriptionsShowTheirHealth(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var billing, quiet struct{ ID string }
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"billing","url":"https://billing.example/hooks","eventTypes":["order.*"]}`).
		want(t, http.StatusCreated).decode(t, &billing)
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"quiet","url":"https://quiet.example/hooks","eventTypes":["refund.*"]}`).
		want(t, http.StatusCreated).decode(t, &quiet)
	publish := func() string {
		var e eventOut
		f.do(t, "POST", "/api/dispatch/events", `{"source":"shop","type":"order.created","data":{}}`).want(t, http.StatusCreated).decode(t, &e)
		if len(e.Jobs) != 1 {
			t.Fatalf("event made %d jobs, want 1", len(e.Jobs))
		}
		return e.Jobs[0].ID
	}
	for range 3 {
		f.runAttempt(t, publish(), dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})
	}
	f.runAttempt(t, publish(), dispatch.AttemptFailure, 410, dispatch.Transition{Status: dispatch.StatusError, LastError: "HTTP 410: not retryable"})
	publish() // still PENDING: not counted

	type health struct {
		RecentJobs, RecentCompleted  int
		SuccessRate                  *float64
		LastSuccessAt, LastFailureAt *string
		LastError                    string
	}
	var page struct {
		Items []struct {
			ID     string
			Health *health
		}
	}
	f.do(t, "GET", "/api/dispatch/subscriptions", "").want(t, http.StatusOK).decode(t, &page)
	got := map[string]*health{}
	for _, it := range page.Items {
		got[it.ID] = it.Health
	}
	b := got[billing.ID]
	if b == nil || b.RecentJobs != 4 || b.RecentCompleted != 3 || b.SuccessRate == nil || *b.SuccessRate != 0.75 ||
		b.LastSuccessAt == nil || b.LastFailureAt == nil || b.LastError != "HTTP 410: not retryable" {
		t.Errorf("billing's health = %+v, want 3 of 4 delivered, a last success and the last failure with its error", b)
	}
	if q := got[quiet.ID]; q == nil || q.RecentJobs != 0 || q.SuccessRate != nil || q.LastSuccessAt != nil || q.LastFailureAt != nil {
		t.Errorf("quiet's health = %+v, want nothing finished", q)
	}
	var one struct{ Health *health }
	f.do(t, "GET", "/api/dispatch/subscriptions/"+billing.ID, "").want(t, http.StatusOK).decode(t, &one)
	if one.Health == nil || one.Health.RecentJobs != 4 || one.Health.LastError != "HTTP 410: not retryable" {
		t.Errorf("GET's health = %+v, want the list's", one.Health)
	}
}

// The success rate that matters to a sender is per job: of the jobs that
// finished in the window, the share delivered. A job delivered on its
// second try is one delivered job (and one failed attempt); a job still
// waiting for a retry has not finished; a cancelled one does not count.
func TestStatsSuccessRateIsPerJob(t *testing.T) {
	t.Parallel()
	f := setup(t)
	retried, once, dead, waiting, cancelled := f.createJob(t), f.createJob(t), f.createJob(t), f.createJob(t), f.createJob(t)
	f.runAttempt(t, retried.ID, dispatch.AttemptFailure, 503, dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503",
		NextAttemptAt: time.Now().Add(-time.Second)})
	f.runAttempt(t, retried.ID, dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})
	f.runAttempt(t, once.ID, dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})
	f.runAttempt(t, dead.ID, dispatch.AttemptFailure, 410, dispatch.Transition{Status: dispatch.StatusError, LastError: "HTTP 410"})
	f.runAttempt(t, waiting.ID, dispatch.AttemptFailure, 503, dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503",
		NextAttemptAt: time.Now().Add(time.Hour)})
	f.do(t, "POST", "/api/dispatch/jobs/"+cancelled.ID+"/cancel", "").want(t, http.StatusOK)

	var s struct {
		Totals struct {
			Attempts, Success, JobsDelivered, JobsFailed int
			SuccessRate, JobSuccessRate                  *float64
		}
	}
	f.do(t, "GET", "/api/dispatch/stats", "").want(t, http.StatusOK).decode(t, &s)
	tt := s.Totals
	if tt.Attempts != 5 || tt.Success != 2 || tt.SuccessRate == nil || *tt.SuccessRate != 0.4 {
		t.Errorf("attempts: %+v, want 2 of 5 succeeded", tt)
	}
	if tt.JobsDelivered != 2 || tt.JobsFailed != 1 || tt.JobSuccessRate == nil || *tt.JobSuccessRate < 0.66 || *tt.JobSuccessRate > 0.67 {
		t.Errorf("jobs: %d delivered, %d failed, rate %v; want 2 of the 3 finished jobs delivered", tt.JobsDelivered, tt.JobsFailed, tt.JobSuccessRate)
	}
}

// Credentials have a name people know them by, set on create and changed
// with PATCH (alone, or with allowedTargets), and say where they are used:
// by how many subscriptions and how many live jobs (finished ones do not
// count).
func TestCredentialsHaveANameAndSayWhereTheyAreUsed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const path = "/api/admin/dispatch/credentials"
	type usage struct {
		Subscriptions, LiveJobs int
		LiveJobsExact           bool
	}
	type creds struct {
		ID, Name       string
		AllowedTargets []string
		Usage          *usage
	}
	var billing, spare creds
	f.do(t, "POST", path, `{"name":"  Billing partner ","allowedTargets":["https://billing.example"]}`).want(t, http.StatusCreated).decode(t, &billing)
	if billing.Name != "Billing partner" {
		t.Errorf("name %q, want it trimmed", billing.Name)
	}
	f.do(t, "POST", path, `{}`).want(t, http.StatusCreated).decode(t, &spare)
	if spare.Name != "" {
		t.Errorf("credentials created without a name are named %q", spare.Name)
	}
	for _, bad := range []string{`{"name":"a\u0007b"}`, `{"name":"` + strings.Repeat("n", 101) + `"}`, `{"name":7}`} {
		if fields := f.do(t, "POST", path, bad).errorCode(t, http.StatusBadRequest, dispatch.EInvalid); !slices.Equal(fields, []string{"name"}) {
			t.Errorf("create with %s: problems with %v, want name", bad, fields)
		}
	}

	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"invoices","url":"https://billing.example/hooks","eventTypes":["invoice.*"],"credentialsId":"`+billing.ID+`"}`).
		want(t, http.StatusCreated)
	for range 2 {
		f.createJob(t, "targetUrl", "https://billing.example/in", "credentialsId", billing.ID)
	}
	done := f.createJob(t, "targetUrl", "https://billing.example/in", "credentialsId", billing.ID)
	f.runAttempt(t, done.ID, dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})

	var page struct{ Items []creds }
	f.do(t, "GET", path, "").want(t, http.StatusOK).decode(t, &page)
	used := map[string]*usage{}
	for _, c := range page.Items {
		used[c.ID] = c.Usage
	}
	if u := used[billing.ID]; u == nil || *u != (usage{Subscriptions: 1, LiveJobs: 2, LiveJobsExact: true}) {
		t.Errorf("billing's usage = %+v, want 1 subscription and 2 live jobs", u)
	}
	if u := used[spare.ID]; u == nil || *u != (usage{LiveJobsExact: true}) {
		t.Errorf("unused credentials' usage = %+v, want none", u)
	}
	var one creds
	f.do(t, "GET", path+"/"+billing.ID, "").want(t, http.StatusOK).decode(t, &one)
	if one.Name != "Billing partner" || one.Usage == nil || one.Usage.LiveJobs != 2 {
		t.Errorf("GET = %+v", one)
	}

	// PATCH the name alone: the targets stay; then both; then neither.
	f.do(t, "PATCH", path+"/"+billing.ID, `{"name":"Billing (EU)"}`).want(t, http.StatusOK).decode(t, &one)
	if one.Name != "Billing (EU)" || !slices.Equal(one.AllowedTargets, []string{"https://billing.example"}) {
		t.Errorf("after renaming: %+v, want the new name and the same targets", one)
	}
	f.do(t, "PATCH", path+"/"+billing.ID, `{"name":"","allowedTargets":["https://billing.example","https://eu.billing.example"]}`).want(t, http.StatusOK).decode(t, &one)
	if one.Name != "" || len(one.AllowedTargets) != 2 {
		t.Errorf("after clearing the name and adding a target: %+v", one)
	}
	f.do(t, "PATCH", path+"/"+billing.ID, `{}`).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	f.do(t, "PATCH", path+"/4242", `{"name":"x"}`).errorCode(t, http.StatusNotFound, dispatch.ENotFound)
}
