package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

const (
	apiToken      = "api-token-4f7c2a91"
	apiToken2     = "api-token-second-0b3d"
	adminToken    = "admin-token-9b1e5c"
	internalToken = "internal-token-77d0aa"
	maxPayload    = 16 << 10
)

// apiTime is how the API renders times: RFC 3339, milliseconds, UTC.
var apiTime = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

// fakeProcessor stands in for the real processor (tested in its own package).
type fakeProcessor struct {
	process func(ctx context.Context, ptr dispatch.Pointer) (dispatch.Decision, error)
}

func (f *fakeProcessor) Process(ctx context.Context, ptr dispatch.Pointer) (dispatch.Decision, error) {
	return f.process(ctx, ptr)
}

// countingNotifier stands in for the outbox publisher: it has no room for
// hand-offs and counts the outbox passes the store asks for.
type countingNotifier struct{ n atomic.Int64 }

func (c *countingNotifier) Reserve(int) bool            { return false }
func (c *countingNotifier) Hand([]dispatch.Unsent, int) {}
func (c *countingNotifier) Notify()                     { c.n.Add(1) }

type fixture struct {
	url      string
	store    *store.Store
	pool     *pgxpool.Pool
	notifier *countingNotifier
}

type option func(*api.Config, *fakeProcessor)

func withConfig(fn func(*api.Config)) option {
	return func(c *api.Config, _ *fakeProcessor) { fn(c) }
}

func withProcessor(fn func(context.Context, dispatch.Pointer) (dispatch.Decision, error)) option {
	return func(_ *api.Config, p *fakeProcessor) { p.process = fn }
}

// setup serves the API over a real store on its own database, with every
// token configured.
func setup(t *testing.T, opts ...option) *fixture {
	t.Helper()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1})
	proc := &fakeProcessor{process: func(context.Context, dispatch.Pointer) (dispatch.Decision, error) {
		return dispatch.Decision{Done: true, JobStatus: dispatch.StatusCompleted}, nil
	}}
	cfg := api.Config{
		APITokens:     []string{apiToken, apiToken2},
		AdminToken:    adminToken,
		InternalToken: internalToken,
		MaxPayload:    maxPayload,
		JobRules:      dispatch.JobRules{AllowHTTP: true},
		RotationGrace: 24 * time.Hour,
		Logger:        slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&cfg, proc)
	}
	f := &fixture{store: st, pool: pool, notifier: &countingNotifier{}}
	st.HandOffTo(f.notifier)
	srv := httptest.NewServer(api.New(st, proc, cfg, prometheus.NewRegistry()).Handler())
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// reqOption adjusts a request before it is sent.
type reqOption func(*http.Request)

// bearer sends the given token ("" sends no Authorization header).
func bearer(token string) reqOption {
	return func(r *http.Request) {
		r.Header.Del("Authorization")
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
	}
}

func contentType(ct string) reqOption {
	return func(r *http.Request) {
		r.Header.Del("Content-Type")
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
	}
}

// streamed hides the body's length, so it is sent chunked.
func streamed() reqOption {
	return func(r *http.Request) {
		r.Body = io.NopCloser(io.MultiReader(r.Body))
		r.ContentLength = -1
		r.GetBody = nil
	}
}

// tokenFor is the token each route family accepts.
func tokenFor(path string) string {
	switch {
	case strings.HasPrefix(path, "/api/admin/"):
		return adminToken
	case strings.HasPrefix(path, "/api/dispatch/process"):
		return internalToken
	default:
		return apiToken
	}
}

// do sends a request with the right token for the route and JSON content.
func (f *fixture) do(t *testing.T, method, path, body string, opts ...reqOption) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, f.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+tokenFor(path))
	for _, o := range opts {
		o(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	checkAgainstSpec(t, req, resp.StatusCode, resp.Header, b)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// want fails unless the response has the status.
func (r response) want(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	return r
}

func (r response) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %T: %v: %s", v, err, r.body)
	}
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"details"`
	} `json:"error"`
}

// errorCode fails unless the response is an error with the status and code;
// it returns the fields named in the details.
func (r response) errorCode(t *testing.T, status int, code string) []string {
	t.Helper()
	r.want(t, status)
	var e apiError
	r.decode(t, &e)
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error = %+v, want code %s with a message", e.Error, code)
	}
	var fields []string
	for _, d := range e.Error.Details {
		fields = append(fields, d.Field)
	}
	return fields
}

// job is the part of the job JSON the tests look at.
type job struct {
	ID             string            `json:"id"`
	Source         string            `json:"source"`
	Type           string            `json:"type"`
	GroupID        string            `json:"groupId"`
	Status         string            `json:"status"`
	Payload        string            `json:"payload"`
	MaxRetries     int               `json:"maxRetries"`
	RetryStrategy  string            `json:"retryStrategy"`
	AttemptCount   int               `json:"attemptCount"`
	Metadata       map[string]string `json:"metadata"`
	Headers        map[string]string `json:"headers"`
	ReplayOf       string            `json:"replayOf"`
	CreatedAt      string            `json:"createdAt"`
	UpdatedAt      string            `json:"updatedAt"`
	CompletedAt    string            `json:"completedAt"`
	IdempotencyKey string            `json:"idempotencyKey"`
}

func jobBody(t *testing.T, fields ...any) string {
	t.Helper()
	m := map[string]any{
		"source":    "orders",
		"type":      "order.created",
		"targetUrl": "https://example.com/hooks/orders",
		"payload":   `{"order":42}`,
	}
	for i := 0; i+1 < len(fields); i += 2 {
		m[fields[i].(string)] = fields[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// createJob creates a job over HTTP; fields are key, value pairs.
func (f *fixture) createJob(t *testing.T, fields ...any) job {
	t.Helper()
	var j job
	f.do(t, "POST", "/api/dispatch/jobs", jobBody(t, fields...)).want(t, http.StatusCreated).decode(t, &j)
	return j
}

func (f *fixture) countJobs(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dispatch_job`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func parseID(t *testing.T, s string) int64 {
	t.Helper()
	id, ok := dispatch.ParseID(s)
	if !ok {
		t.Fatalf("id %q is not a positive integer string", s)
	}
	return id
}

// runAttempt claims the job through the store and records one attempt.
func (f *fixture) runAttempt(t *testing.T, id string, as dispatch.AttemptStatus, code int, tr dispatch.Transition) {
	t.Helper()
	now := time.Now()
	c, err := f.store.ClaimJob(t.Context(), parseID(t, id), now, time.Minute)
	if err != nil || c.State != dispatch.Claimed {
		t.Fatalf("ClaimJob(%s) = %v, %v", id, c.State, err)
	}
	ok, err := f.store.FinishAttempt(t.Context(), dispatch.Attempt{
		JobID: c.Job.ID, AttemptNumber: c.Job.AttemptCount, AttemptedAt: now, CompletedAt: now.Add(15 * time.Millisecond),
		Status: as, ResponseCode: code,
	}, tr)
	if err != nil || !ok {
		t.Fatalf("FinishAttempt(%s) = %v, %v", id, ok, err)
	}
}

func TestCreateJob(t *testing.T) {
	t.Parallel()
	f := setup(t)
	scheduled := time.Now().Add(48 * time.Hour).In(time.FixedZone("CEST", 2*3600)).Truncate(time.Second)

	r := f.do(t, "POST", "/api/dispatch/jobs", jobBody(t,
		"groupId", "customer-7",
		"metadata", map[string]string{"tenant": "acme"},
		"headers", map[string]string{"X-Trace": "abc"},
		"scheduledFor", scheduled.Format(time.RFC3339),
	)).want(t, http.StatusCreated)

	raw := r.object(t)
	id, isString := raw["id"].(string)
	if !isString {
		t.Fatalf("id = %#v, want a string", raw["id"])
	}
	parseID(t, id)
	for _, k := range []string{"createdAt", "updatedAt", "scheduledFor"} {
		if s, _ := raw[k].(string); !apiTime.MatchString(s) {
			t.Errorf("%s = %#v, want RFC 3339 UTC with milliseconds", k, raw[k])
		}
	}
	if want := scheduled.UTC().Format("2006-01-02T15:04:05.000Z"); raw["scheduledFor"] != want {
		t.Errorf("scheduledFor = %v, want %s (the same instant in UTC)", raw["scheduledFor"], want)
	}
	var j job
	r.decode(t, &j)
	if j.Status != "PENDING" || j.MaxRetries != 5 || j.RetryStrategy != "exponential" || j.AttemptCount != 0 {
		t.Errorf("job = %+v, want PENDING with the defaults (5 attempts, exponential)", j)
	}
	if j.Payload != `{"order":42}` || j.GroupID != "customer-7" || j.Metadata["tenant"] != "acme" || j.Headers["X-Trace"] != "abc" {
		t.Errorf("job does not carry what was sent: %+v", j)
	}
	if n := f.notifier.n.Load(); n != 1 {
		t.Errorf("notifier called %d times, want 1", n)
	}

	var got job
	f.do(t, "GET", "/api/dispatch/jobs/"+id, "").want(t, http.StatusOK).decode(t, &got)
	if got.ID != id || got.CreatedAt != j.CreatedAt || got.Status != "PENDING" {
		t.Errorf("GET = %+v, want the created job", got)
	}
}

func TestCreateJobIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	body := jobBody(t, "idempotencyKey", "order-42-created")

	var first, again job
	f.do(t, "POST", "/api/dispatch/jobs", body).want(t, http.StatusCreated).decode(t, &first)
	f.do(t, "POST", "/api/dispatch/jobs", body).want(t, http.StatusOK).decode(t, &again)
	if again.ID != first.ID {
		t.Errorf("repeat returned job %s, want %s", again.ID, first.ID)
	}
	if n := f.countJobs(t); n != 1 {
		t.Errorf("%d job rows, want 1", n)
	}
	if n := f.notifier.n.Load(); n != 1 {
		t.Errorf("notifier called %d times, want once (for the new job only)", n)
	}
}

// A retry of a create that was stored is answered with its job (200) even
// when the body would no longer pass: its expiresAt has passed, or its
// credentials were deleted. Refused, the client would take it that nothing
// was created. A body that does not pass, with a key no job holds, is
// still refused.
func TestARetryOfAStoredCreateIsAnsweredWithItsJobThoughItNoLongerPasses(t *testing.T) {
	t.Parallel()
	clock := &manualClock{t: time.Now()}
	f := setup(t, withConfig(func(c *api.Config) { c.Now = clock.now }))
	body := jobBody(t, "idempotencyKey", "order-7-created", "expiresAt", clock.now().Add(time.Minute).UTC().Format(time.RFC3339Nano))
	var first, again job
	f.do(t, "POST", "/api/dispatch/jobs", body).want(t, http.StatusCreated).decode(t, &first)
	clock.advance(2 * time.Minute) // past its expiresAt
	f.do(t, "POST", "/api/dispatch/jobs", body).want(t, http.StatusOK).decode(t, &again)
	if again.ID != first.ID {
		t.Errorf("the retry answered job %s, want %s", again.ID, first.ID)
	}

	var cred struct {
		ID string `json:"id"`
	}
	f.do(t, "POST", "/api/admin/dispatch/credentials", `{"allowedTargets":["https://example.com"]}`).want(t, http.StatusCreated).decode(t, &cred)
	signed := jobBody(t, "idempotencyKey", "order-8-created", "credentialsId", cred.ID)
	f.do(t, "POST", "/api/dispatch/jobs", signed).want(t, http.StatusCreated).decode(t, &first)
	f.do(t, "DELETE", "/api/admin/dispatch/credentials/"+cred.ID, "").want(t, http.StatusNoContent)
	f.do(t, "POST", "/api/dispatch/jobs", signed).want(t, http.StatusOK).decode(t, &again)
	if again.ID != first.ID {
		t.Errorf("the retry after its credentials were deleted answered job %s, want %s", again.ID, first.ID)
	}

	stale := jobBody(t, "idempotencyKey", "never-stored", "expiresAt", clock.now().Add(-time.Minute).UTC().Format(time.RFC3339Nano))
	if fields := f.do(t, "POST", "/api/dispatch/jobs", stale).errorCode(t, http.StatusBadRequest, dispatch.EInvalid); !slices.Equal(fields, []string{"expiresAt"}) {
		t.Errorf("a stale body with a new key: fields %v, want [expiresAt]", fields)
	}
	if n := f.countJobs(t); n != 2 {
		t.Errorf("%d job rows, want 2", n)
	}
}

func TestCreateJobInvalid(t *testing.T) {
	t.Parallel()
	f := setup(t)
	body := `{
		"type": "order.created",
		"targetUrl": "ftp://example.com/hook",
		"payload": "{}",
		"maxRetries": 0,
		"retryStrategy": "sometimes",
		"headers": {"X-Trace": "a\r\nInjected: yes", "Authorization": "Bearer stolen"},
		"colour": "blue"
	}`
	fields := f.do(t, "POST", "/api/dispatch/jobs", body).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	for _, want := range []string{"source", "targetUrl", "maxRetries", "retryStrategy", "headers.X-Trace", "headers.Authorization", "colour"} {
		if !slices.Contains(fields, want) {
			t.Errorf("details name %v; %s is missing", fields, want)
		}
	}
	if n := f.countJobs(t); n != 0 {
		t.Errorf("%d job rows after a rejected create, want 0", n)
	}
	if n := f.notifier.n.Load(); n != 0 {
		t.Errorf("notifier called %d times for a rejected create", n)
	}
}

func TestCreateJobBadBodies(t *testing.T) {
	t.Parallel()
	f := setup(t)
	valid := jobBody(t)
	big := jobBody(t, "payload", strings.Repeat("x", maxPayload))

	tests := []struct {
		name   string
		body   string
		opts   []reqOption
		status int
		code   string
		field  string // a field the details must name, if any
	}{
		{"malformed JSON", `{"source": "orders",`, nil, 400, dispatch.EInvalid, "body"},
		{"trailing data", valid + `{}`, nil, 400, dispatch.EInvalid, "body"},
		{"not an object", `["orders"]`, nil, 400, dispatch.EInvalid, "body"},
		{"empty body", ``, nil, 400, dispatch.EInvalid, "body"},
		{"duplicate key", `{"source":"a","source":"b","type":"t","targetUrl":"https://example.com","payload":"{}"}`, nil, 400, dispatch.EInvalid, "source"},
		{"not UTF-8", "{\"source\":\"ord\xffers\",\"type\":\"t\",\"targetUrl\":\"https://example.com\",\"payload\":\"{}\"}", nil, 400, dispatch.EInvalid, "body"},
		{"wrong type", jobBody(t, "maxRetries", "five"), nil, 400, dispatch.EInvalid, "maxRetries"},
		{"too large", big, nil, 413, dispatch.ETooLarge, ""},
		{"too large, chunked", big, []reqOption{streamed()}, 413, dispatch.ETooLarge, ""},
		{"text/plain", valid, []reqOption{contentType("text/plain")}, 415, dispatch.EMediaType, ""},
		{"no content type", valid, []reqOption{contentType("")}, 415, dispatch.EMediaType, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fields := f.do(t, "POST", "/api/dispatch/jobs", tt.body, tt.opts...).errorCode(t, tt.status, tt.code)
			if tt.field != "" && !slices.Contains(fields, tt.field) {
				t.Errorf("details name %v, want %s", fields, tt.field)
			}
		})
	}
	if n := f.countJobs(t); n != 0 {
		t.Errorf("%d job rows after rejected creates, want 0", n)
	}

	// The same valid body with the right content type is accepted.
	f.do(t, "POST", "/api/dispatch/jobs", valid, contentType("application/json; charset=utf-8")).want(t, http.StatusCreated)
}

func TestGetJobErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		path   string
		status int
		code   string
	}{
		{"/api/dispatch/jobs/123456789", 404, dispatch.ENotFound},
		{"/api/dispatch/jobs/123456789/attempts", 404, dispatch.ENotFound},
		{"/api/dispatch/jobs/abc", 400, dispatch.EInvalid},
		{"/api/dispatch/jobs/0", 400, dispatch.EInvalid},
		{"/api/dispatch/jobs/-7", 400, dispatch.EInvalid},
		{"/api/dispatch/jobs/99999999999999999999", 400, dispatch.EInvalid},
		{"/api/dispatch/nothing-here", 404, dispatch.ENotFound},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			f.do(t, "GET", tt.path, "").errorCode(t, tt.status, tt.code)
		})
	}
}

func TestSearchJobs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	j1 := f.createJob(t, "groupId", "g1", "metadata", map[string]string{"tenant": "acme", "region": "eu"})
	j2 := f.createJob(t, "type", "order.paid", "metadata", map[string]string{"tenant": "acme", "region": "us"})
	between := time.Now()
	j3 := f.createJob(t, "source", "billing", "groupId", "g1")
	j4 := f.createJob(t, "source", "billing")
	f.do(t, "POST", "/api/dispatch/jobs/"+j4.ID+"/cancel", "").want(t, http.StatusOK)

	type page struct {
		Items      []job `json:"items"`
		Page       int   `json:"page"`
		Size       int   `json:"size"`
		TotalItems int   `json:"totalItems"`
		TotalPages int   `json:"totalPages"`
	}
	tests := []struct {
		query     string
		want      []job
		total     int
		size      int
		pageCount int
	}{
		{"", []job{j4, j3, j2, j1}, 4, 20, 1},
		{"?status=CANCELLED", []job{j4}, 1, 20, 1},
		{"?status=pending,cancelled", []job{j4, j3, j2, j1}, 4, 20, 1},
		{"?status=PENDING&status=CANCELLED&source=billing", []job{j4, j3}, 2, 20, 1},
		{"?type=order.paid", []job{j2}, 1, 20, 1},
		{"?groupId=g1", []job{j3, j1}, 2, 20, 1},
		{"?metadata.tenant=acme", []job{j2, j1}, 2, 20, 1},
		{"?metadata.tenant=acme&metadata.region=eu", []job{j1}, 1, 20, 1},
		{"?createdAfter=" + between.UTC().Format(time.RFC3339Nano), []job{j4, j3}, 2, 20, 1},
		{"?createdBefore=" + between.UTC().Format(time.RFC3339Nano), []job{j2, j1}, 2, 20, 1},
		{"?size=3", []job{j4, j3, j2}, 4, 3, 2},
		{"?size=3&page=1", []job{j1}, 4, 3, 2},
		{"?size=3&page=2", nil, 4, 3, 2},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			var p page
			f.do(t, "GET", "/api/dispatch/jobs"+tt.query, "").want(t, http.StatusOK).decode(t, &p)
			var got, want []string
			for _, j := range p.Items {
				got = append(got, j.ID)
			}
			for _, j := range tt.want {
				want = append(want, j.ID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("items = %v, want %v", got, want)
			}
			if p.TotalItems != tt.total || p.Size != tt.size || p.TotalPages != tt.pageCount {
				t.Errorf("totalItems %d size %d totalPages %d, want %d %d %d", p.TotalItems, p.Size, p.TotalPages, tt.total, tt.size, tt.pageCount)
			}
		})
	}
}

// A metadata key is counted in characters by the search as by a create:
// a key of 40 "é" (80 bytes) a job was created with finds it.
func TestAJobIsFoundByAnyMetadataKeyItWasCreatedWith(t *testing.T) {
	t.Parallel()
	f := setup(t)
	key := strings.Repeat("é", 40)
	j := f.createJob(t, "metadata", map[string]string{key: "v"})
	var p struct {
		Items []job `json:"items"`
	}
	f.do(t, "GET", "/api/dispatch/jobs?metadata."+url.QueryEscape(key)+"=v", "").want(t, http.StatusOK).decode(t, &p)
	if len(p.Items) != 1 || p.Items[0].ID != j.ID {
		t.Errorf("search by the key: %+v, want job %s", p.Items, j.ID)
	}
}

func TestSearchJobsBadQuery(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		query string
		field string
	}{
		{"?colour=blue", "colour"},
		{"?status=DONE", "status"},
		{"?size=0", "size"},
		{"?size=101", "size"},
		{"?page=-1", "page"},
		{"?createdAfter=yesterday", "createdAfter"},
		{"?source=a&source=b", "source"},
		{"?metadata.k=a&metadata.k=b", "metadata.k"},
		// No PostgreSQL text holds these: refused before the database.
		{"?source=%00", "source"},
		{"?groupId=%ff", "groupId"},
		{"?metadata.k=a%00b", "metadata.k"},
		{"/../events?type=%00", "type"},
		{"/../subscriptions?eventType=%c3", "eventType"},
		// Pairs Go's parser drops, the rest kept: the filter would vanish.
		{"?status=ERROR&source=acme;eu", "source"},
		{"?status=ERROR&metadata.tenant=a%", "metadata.tenant"},
		{"?status=ERROR&source%zz=a", "source%zz"},
		{"?" + strings.Repeat("source=a&", 10_001), "query"},
	}
	for _, tt := range tests {
		name := tt.query
		if len(name) > 60 {
			name = name[:60] + "…"
		}
		t.Run(name, func(t *testing.T) {
			path := "/api/dispatch/jobs" + tt.query
			if rest, ok := strings.CutPrefix(tt.query, "/../"); ok {
				path = "/api/dispatch/" + rest
			}
			fields := f.do(t, "GET", path, "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
			if !slices.Contains(fields, tt.field) {
				t.Errorf("details name %v, want %s", fields, tt.field)
			}
		})
	}
}

func TestListAttempts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	j := f.createJob(t)
	f.do(t, "GET", "/api/dispatch/jobs/"+j.ID+"/attempts", "").want(t, http.StatusOK)

	f.runAttempt(t, j.ID, dispatch.AttemptFailure, 503, dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503", NextAttemptAt: time.Now()})
	f.runAttempt(t, j.ID, dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})

	r := f.do(t, "GET", "/api/dispatch/jobs/"+j.ID+"/attempts", "").want(t, http.StatusOK)
	var as []struct {
		ID             string `json:"id"`
		JobID          string `json:"jobId"`
		AttemptNumber  int    `json:"attemptNumber"`
		Status         string `json:"status"`
		ResponseCode   int    `json:"responseCode"`
		DurationMillis int64  `json:"durationMillis"`
		AttemptedAt    string `json:"attemptedAt"`
		CompletedAt    string `json:"completedAt"`
	}
	r.decode(t, &as)
	if len(as) != 2 {
		t.Fatalf("%d attempts, want 2: %s", len(as), r.body)
	}
	for i, want := range []struct {
		status string
		code   int
	}{{"FAILURE", 503}, {"SUCCESS", 200}} {
		a := as[i]
		if a.AttemptNumber != i+1 || a.Status != want.status || a.ResponseCode != want.code || a.JobID != j.ID {
			t.Errorf("attempt %d = %+v, want #%d %s %d", i, a, i+1, want.status, want.code)
		}
		if !apiTime.MatchString(a.AttemptedAt) || !apiTime.MatchString(a.CompletedAt) || a.DurationMillis != 15 {
			t.Errorf("attempt %d times %q %q duration %d", i, a.AttemptedAt, a.CompletedAt, a.DurationMillis)
		}
	}

	var got job
	f.do(t, "GET", "/api/dispatch/jobs/"+j.ID, "").want(t, http.StatusOK).decode(t, &got)
	if got.Status != "COMPLETED" || got.AttemptCount != 2 || !apiTime.MatchString(got.CompletedAt) {
		t.Errorf("job = %s with %d attempts, completedAt %q", got.Status, got.AttemptCount, got.CompletedAt)
	}
}

func TestCancelJob(t *testing.T) {
	t.Parallel()
	f := setup(t)
	j := f.createJob(t)

	var got job
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "").want(t, http.StatusOK).decode(t, &got)
	if got.Status != "CANCELLED" || !apiTime.MatchString(got.CompletedAt) {
		t.Errorf("cancelled job = %s completedAt %q", got.Status, got.CompletedAt)
	}
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "").errorCode(t, http.StatusConflict, dispatch.EConflict)
	f.do(t, "POST", "/api/dispatch/jobs/123456789/cancel", "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)
}

func TestReplayJob(t *testing.T) {
	t.Parallel()
	f := setup(t)
	j := f.createJob(t, "idempotencyKey", "k-1", "metadata", map[string]string{"tenant": "acme"})

	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/replay", "").errorCode(t, http.StatusConflict, dispatch.EConflict)
	if n := f.countJobs(t); n != 1 {
		t.Fatalf("%d job rows after a refused replay, want 1", n)
	}

	f.runAttempt(t, j.ID, dispatch.AttemptFailure, 410, dispatch.Transition{Status: dispatch.StatusError, LastError: "HTTP 410 is not retryable"})
	notified := f.notifier.n.Load()
	var replay job
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/replay", "").want(t, http.StatusCreated).decode(t, &replay)
	if replay.ID == j.ID || replay.ReplayOf != j.ID || replay.Status != "PENDING" || replay.AttemptCount != 0 {
		t.Errorf("replay = %+v, want a new PENDING job replaying %s", replay, j.ID)
	}
	if replay.Payload != j.Payload || replay.Metadata["tenant"] != "acme" {
		t.Errorf("replay does not carry the original job: %+v", replay)
	}
	if f.notifier.n.Load() != notified+1 {
		t.Errorf("the publisher was not notified of the replay")
	}
	f.do(t, "POST", "/api/dispatch/jobs/123456789/replay", "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)
}

func TestReplayJobsBulk(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.createJob(t, "source", "billing")
	b := f.createJob(t, "source", "billing")
	c := f.createJob(t, "source", "orders")
	for _, j := range []job{a, b, c} {
		f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "").want(t, http.StatusOK)
	}
	f.createJob(t, "source", "billing") // live: never replayed

	f.do(t, "POST", "/api/dispatch/jobs/replay", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	// Filters in a body would be ignored, and other jobs replayed than the
	// caller meant: refused, naming each, and nothing replayed.
	fields := f.do(t, "POST", "/api/dispatch/jobs/replay?source=billing", `{"status":"ERROR","limit":1}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	if !slices.Equal(fields, []string{"limit", "status"}) {
		t.Errorf("a redrive with a body: fields %v, want [limit status]", fields)
	}
	// A pair Go's parser would drop (dryRun with a broken escape, a
	// filter with a ';') is refused, and nothing is replayed: dropped, the
	// dry run would have been a redrive, of every source.
	for _, q := range []string{"?source=billing&dryRun=true%", "?source=billing;orders&dryRun=true"} {
		f.do(t, "POST", "/api/dispatch/jobs/replay"+q, "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	}
	for _, empty := range []string{"{}", "{ }", "{\n}"} {
		f.do(t, "POST", "/api/dispatch/jobs/replay?source=billing&dryRun=true", empty).want(t, http.StatusOK)
	}
	// dryRun given twice is refused, not read as its first: a real redrive
	// must not hang on which one counts. A bad dryRun is named with the
	// filters' own problems.
	for q, want := range map[string][]string{
		"?source=billing&dryRun=false&dryRun=true": {"dryRun"},
		"?status=DONE&dryRun=maybe":                {"dryRun", "status"},
	} {
		fields := f.do(t, "POST", "/api/dispatch/jobs/replay"+q, "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
		slices.Sort(fields)
		if !slices.Equal(fields, want) {
			t.Errorf("%s: fields %v, want %v", q, fields, want)
		}
	}

	var out struct {
		Replayed int   `json:"replayed"`
		Items    []job `json:"items"`
	}
	f.do(t, "POST", "/api/dispatch/jobs/replay?source=billing", "").want(t, http.StatusOK).decode(t, &out)
	var of []string
	for _, j := range out.Items {
		of = append(of, j.ReplayOf)
	}
	if out.Replayed != 2 || !slices.Equal(of, []string{a.ID, b.ID}) {
		t.Errorf("replayed %d: %v, want the two cancelled billing jobs %v", out.Replayed, of, []string{a.ID, b.ID})
	}

	// A job whose credentials were deleted is reported, and the rest replayed.
	var cred struct {
		ID string `json:"id"`
	}
	f.do(t, "POST", "/api/admin/dispatch/credentials", `{"allowedTargets":["https://example.com"]}`).want(t, http.StatusCreated).decode(t, &cred)
	orphan := f.createJob(t, "source", "refunds", "credentialsId", cred.ID)
	d := f.createJob(t, "source", "refunds")
	for _, j := range []job{orphan, d} {
		f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "").want(t, http.StatusOK)
	}
	f.do(t, "DELETE", "/api/admin/dispatch/credentials/"+cred.ID, "").want(t, http.StatusNoContent)
	// The dry run counts what the redrive would replay: not the job whose
	// credentials are gone.
	var dry struct {
		WouldReplay int `json:"wouldReplay"`
	}
	f.do(t, "POST", "/api/dispatch/jobs/replay?source=refunds&dryRun=true", "").want(t, http.StatusOK).decode(t, &dry)
	if dry.WouldReplay != 1 {
		t.Errorf("the dry run would replay %d, want 1 (not the job whose credentials were deleted)", dry.WouldReplay)
	}
	var res struct {
		Replayed int   `json:"replayed"`
		Items    []job `json:"items"`
		Failed   []struct {
			ID    string `json:"id"`
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"failed"`
	}
	f.do(t, "POST", "/api/dispatch/jobs/replay?source=refunds", "").want(t, http.StatusOK).decode(t, &res)
	if res.Replayed != 1 || res.Items[0].ReplayOf != d.ID {
		t.Errorf("replayed %+v, want only %s", res.Items, d.ID)
	}
	if len(res.Failed) != 1 || res.Failed[0].ID != orphan.ID || res.Failed[0].Error.Code != dispatch.EUnprocessable ||
		!strings.Contains(res.Failed[0].Error.Message, "credentials") {
		t.Errorf("failed = %+v, want %s reported for its deleted credentials", res.Failed, orphan.ID)
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const path = "/api/admin/dispatch/credentials"

	// A generated secret is shown once, on creation.
	var created struct {
		ID              string   `json:"id"`
		Algorithm       string   `json:"algorithm"`
		SignatureScheme string   `json:"signatureScheme"`
		SigningSecret   string   `json:"signingSecret"`
		AllowedTargets  []string `json:"allowedTargets"`
		CreatedAt       string   `json:"createdAt"`
	}
	f.do(t, "POST", path, `{"bearerToken": "bt-very-secret-7731", "allowedTargets": ["HTTPS://Example.com:443/hooks/"]}`).
		want(t, http.StatusCreated).decode(t, &created)
	if !slices.Equal(created.AllowedTargets, []string{"https://example.com/hooks/"}) {
		t.Errorf("allowedTargets = %q, want the one entry normalised", created.AllowedTargets)
	}
	if !strings.HasPrefix(created.SigningSecret, "whsec_") || len(created.SigningSecret) < 30 {
		t.Errorf("generated signingSecret = %q, want a whsec_ secret", created.SigningSecret)
	}
	if created.Algorithm != "HMAC_SHA256" || created.SignatureScheme != "FLOWCATALYST" || !apiTime.MatchString(created.CreatedAt) {
		t.Errorf("created = %+v", created)
	}
	parseID(t, created.ID)

	r := f.do(t, "GET", path+"/"+created.ID, "").want(t, http.StatusOK)
	for _, leak := range []string{created.SigningSecret, "bt-very-secret-7731", "signingSecret", "bearerToken"} {
		if strings.Contains(string(r.body), leak) {
			t.Errorf("GET body contains %q: %s", leak, r.body)
		}
	}
	if m := r.object(t); m["hasBearerToken"] != true || m["id"] != created.ID || fmt.Sprint(m["allowedTargets"]) != "[https://example.com/hooks/]" {
		t.Errorf("GET = %s", r.body)
	}

	// Jobs can refer to existing credentials only.
	f.createJob(t, "credentialsId", created.ID)
	fields := f.do(t, "POST", "/api/dispatch/jobs", jobBody(t, "credentialsId", "987654321")).errorCode(t, 400, dispatch.EInvalid)
	if !slices.Contains(fields, "credentialsId") {
		t.Errorf("details name %v, want credentialsId", fields)
	}

	// Rotation issues a new secret and keeps the old one for the grace period.
	var rotated struct {
		SigningSecret           string `json:"signingSecret"`
		PreviousSecretExpiresAt string `json:"previousSecretExpiresAt"`
	}
	f.do(t, "POST", path+"/"+created.ID+"/rotate", "").want(t, http.StatusOK).decode(t, &rotated)
	if rotated.SigningSecret == "" || rotated.SigningSecret == created.SigningSecret {
		t.Errorf("rotated secret = %q, want a new one", rotated.SigningSecret)
	}
	exp, err := time.Parse(time.RFC3339, rotated.PreviousSecretExpiresAt)
	if err != nil || !apiTime.MatchString(rotated.PreviousSecretExpiresAt) {
		t.Fatalf("previousSecretExpiresAt = %q", rotated.PreviousSecretExpiresAt)
	}
	if d := time.Until(exp); d < 23*time.Hour || d > 24*time.Hour {
		t.Errorf("previous secret expires in %v, want the 24h grace", d)
	}
	r = f.do(t, "GET", path+"/"+created.ID, "").want(t, http.StatusOK)
	if strings.Contains(string(r.body), rotated.SigningSecret) || strings.Contains(string(r.body), created.SigningSecret) {
		t.Errorf("GET after rotation shows a secret: %s", r.body)
	}
	if r.object(t)["previousSecretExpiresAt"] != rotated.PreviousSecretExpiresAt {
		t.Errorf("GET after rotation = %s, want previousSecretExpiresAt", r.body)
	}
	// A given secret is not echoed back.
	r = f.do(t, "POST", path+"/"+created.ID+"/rotate", `{"signingSecret": "my-own-secret-0042", "gracePeriod": "1h"}`).want(t, http.StatusOK)
	if strings.Contains(string(r.body), "my-own-secret-0042") {
		t.Errorf("rotate echoed the given secret: %s", r.body)
	}

	f.do(t, "DELETE", path+"/"+created.ID, "").want(t, http.StatusNoContent)
	f.do(t, "GET", path+"/"+created.ID, "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)
	f.do(t, "DELETE", path+"/"+created.ID, "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)
	f.do(t, "POST", path+"/"+created.ID+"/rotate", "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)
}

func TestCreateCredentialsInvalid(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fields := f.do(t, "POST", "/api/admin/dispatch/credentials",
		`{"signatureScheme": "ROT13", "algorithm": "MD5", "bearerToken": "a\nb", "owner": "me",
		  "allowedTargets": ["https://ok.example", "https://partner.example@evil.test", "ftp://x", "https://p.example/?q"]}`).errorCode(t, 400, dispatch.EInvalid)
	for _, want := range []string{"signatureScheme", "algorithm", "bearerToken", "owner", "allowedTargets[1]", "allowedTargets[2]", "allowedTargets[3]"} {
		if !slices.Contains(fields, want) {
			t.Errorf("details name %v; %s is missing", fields, want)
		}
	}
	var n int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM dispatch_credentials`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d credentials rows (err %v) after a rejected create, want 0", n, err)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const wrong = "not-the-token-5e8a"
	tests := []struct {
		name          string
		method, path  string
		body          string
		authorization string // the whole header; "" sends none
		status        int
	}{
		{"jobs without a token", "GET", "/api/dispatch/jobs", "", "", 401},
		{"jobs with a wrong token", "GET", "/api/dispatch/jobs", "", "Bearer " + wrong, 401},
		{"jobs with a non-bearer scheme", "GET", "/api/dispatch/jobs", "", "Basic " + wrong, 401},
		{"jobs with the admin token", "GET", "/api/dispatch/jobs", "", "Bearer " + adminToken, 401},
		{"jobs with the API token", "GET", "/api/dispatch/jobs", "", "Bearer " + apiToken, 200},
		{"jobs with the second API token", "GET", "/api/dispatch/jobs", "", "Bearer " + apiToken2, 200},
		{"the scheme is case-insensitive", "GET", "/api/dispatch/jobs", "", "bearer " + apiToken, 200},
		{"a bare token is not a bearer token", "GET", "/api/dispatch/jobs", "", apiToken, 401},
		{"bearer without a token", "GET", "/api/dispatch/jobs", "", "Bearer ", 401},
		{"create without a token", "POST", "/api/dispatch/jobs", `{}`, "", 401},
		{"admin without a token", "POST", "/api/admin/dispatch/credentials", `{}`, "", 401},
		{"admin with a wrong token", "POST", "/api/admin/dispatch/credentials", `{}`, "Bearer " + wrong, 401},
		{"admin with the API token", "POST", "/api/admin/dispatch/credentials", `{}`, "Bearer " + apiToken, 401},
		{"admin with the internal token", "GET", "/api/admin/dispatch/credentials/1", "", "Bearer " + internalToken, 401},
		{"admin with the admin token", "POST", "/api/admin/dispatch/credentials", `{}`, "Bearer " + adminToken, 201},
		{"process without a token", "POST", "/api/dispatch/process", `{"id":"1"}`, "", 401},
		{"process with the API token", "POST", "/api/dispatch/process", `{"id":"1"}`, "Bearer " + apiToken, 401},
		{"process with the internal token", "POST", "/api/dispatch/process", `{"id":"1"}`, "Bearer " + internalToken, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, tt.method, tt.path, tt.body, func(r *http.Request) {
				r.Header.Del("Authorization")
				if tt.authorization != "" {
					r.Header.Set("Authorization", tt.authorization)
				}
			})
			if tt.status == 401 {
				r.errorCode(t, 401, dispatch.EUnauthorized)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			} else {
				r.want(t, tt.status)
			}
			for _, tok := range []string{wrong, apiToken, apiToken2, adminToken, internalToken} {
				if strings.Contains(string(r.body), tok) {
					t.Errorf("response body echoes a token: %s", r.body)
				}
				for k, vs := range r.header {
					for _, v := range vs {
						if strings.Contains(v, tok) {
							t.Errorf("response header %s echoes a token: %s", k, v)
						}
					}
				}
			}
		})
	}
	if n := f.countJobs(t); n != 0 {
		t.Errorf("%d job rows after unauthorised requests, want 0", n)
	}
}

func TestAuthNotConfigured(t *testing.T) {
	t.Parallel()
	open := func(insecure bool) option {
		return withConfig(func(c *api.Config) {
			c.APITokens, c.AdminToken, c.InternalToken, c.Insecure = nil, "", "", insecure
		})
	}
	routes := []struct{ method, path, body string }{
		{"GET", "/api/dispatch/jobs", ""},
		{"POST", "/api/admin/dispatch/credentials", "{}"},
		{"POST", "/api/dispatch/process", `{"id":"1"}`},
	}

	t.Run("secure mode refuses", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open(false))
		for _, rt := range routes {
			f.do(t, rt.method, rt.path, rt.body).errorCode(t, http.StatusForbidden, dispatch.EForbidden)
		}
	})
	t.Run("insecure mode allows", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open(true))
		for _, rt := range routes {
			if r := f.do(t, rt.method, rt.path, rt.body, bearer("")); r.status >= 400 {
				t.Errorf("%s %s = %d in insecure mode: %s", rt.method, rt.path, r.status, r.body)
			}
		}
	})
}

func TestInsecureModeAnswersOnlyItsOwnHostNames(t *testing.T) {
	t.Parallel()
	// A page on a rebinding domain reaches 127.0.0.1 with its own name as
	// Host: insecure mode's open routes must not answer it.
	f := setup(t, withConfig(func(c *api.Config) {
		c.APITokens, c.AdminToken, c.InternalToken, c.Insecure = nil, "", "", true
		c.PublicURL = "https://Dispatch.Example.COM./console/"
	}))
	host := func(h string) reqOption { return func(r *http.Request) { r.Host = h } }
	for _, h := range []string{"rebind.attacker.example:8080", "rebind.attacker.example", "127.0.0.1.nip.io:8080", "localhost.attacker.example"} {
		f.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), host(h)).errorCode(t, http.StatusForbidden, dispatch.EForbidden)
		f.do(t, "POST", "/api/admin/dispatch/credentials", `{"bearerToken": "t"}`, bearer(""), host(h)).errorCode(t, http.StatusForbidden, dispatch.EForbidden)
	}
	var n int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM dispatch_credentials`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d credentials stored by refused requests (%v), want 0", n, err)
	}
	for _, h := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080", "LOCALHOST.", "app.localhost", "api:8080", "dispatch.example.com", "10.1.2.3"} {
		f.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), host(h)).want(t, http.StatusOK)
	}

	// With tokens the routes are not open, and a token is what a page
	// cannot have: Host is not checked.
	secure := setup(t)
	secure.do(t, "GET", "/api/dispatch/jobs", "", host("rebind.attacker.example")).want(t, http.StatusOK)
}

func TestProcess(t *testing.T) {
	t.Parallel()
	seen := make(chan dispatch.Pointer, 10)
	f := setup(t, withProcessor(func(_ context.Context, ptr dispatch.Pointer) (dispatch.Decision, error) {
		seen <- ptr
		switch ptr.ID {
		case "1":
			return dispatch.Decision{Done: true, JobStatus: dispatch.StatusCompleted, Reason: "delivered"}, nil
		case "2":
			return dispatch.Decision{RetryAfter: 2500 * time.Millisecond, JobStatus: dispatch.StatusFailed, Reason: "HTTP 503"}, nil
		default:
			return dispatch.Decision{}, errors.New("store: finish attempt: dial tcp 10.1.2.3:5432: connection refused (password=hunter2)")
		}
	}))

	tests := []struct {
		name   string
		id     string
		status int
		check  func(t *testing.T, r response)
	}{
		{"done", "1", 200, func(t *testing.T, r response) {
			if m := r.object(t); m["status"] != "done" || m["jobStatus"] != "COMPLETED" {
				t.Errorf("body = %s", r.body)
			}
		}},
		{"retry after 2.5s", "2", 400, func(t *testing.T, r response) {
			if m := r.object(t); m["retryAfterSeconds"] != float64(3) {
				t.Errorf("retryAfterSeconds = %v, want 3 (rounded up); body %s", m["retryAfterSeconds"], r.body)
			}
		}},
		{"processor error", "3", 503, func(t *testing.T, r response) {
			r.errorCode(t, 503, dispatch.EUnavailable)
			for _, internal := range []string{"10.1.2.3", "hunter2", "dial tcp", "store:"} {
				if strings.Contains(string(r.body), internal) {
					t.Errorf("503 body leaks %q: %s", internal, r.body)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ptr := dispatch.Pointer{ID: tt.id, PoolCode: dispatch.DefaultPool, MediationType: "HTTP", MessageGroupID: "g"}
			b, _ := json.Marshal(ptr)
			r := f.do(t, "POST", "/api/dispatch/process", string(b)).want(t, tt.status)
			tt.check(t, r)
			select {
			case got := <-seen:
				if got != ptr {
					t.Errorf("processor got %+v, want %+v", got, ptr)
				}
			default:
				t.Errorf("the processor was not called")
			}
		})
	}

	f.do(t, "POST", "/api/dispatch/process", `{"poolCode":"DISPATCH-POOL"}`).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	if len(seen) != 0 {
		t.Errorf("the processor was called for a pointer without an id")
	}
}

// The router says on a processing request what proves the pointer is the
// first copy of its job (an offer's handle, or a queue message's first
// receive); the endpoint passes exactly that on to the processor, which
// claims such a job without a statement. A proof the endpoint cannot read,
// or one for another job, is not passed on.
func TestProcessPassesOnWhatProvesAFirstCopy(t *testing.T) {
	t.Parallel()
	type seen struct {
		first  bool
		handle *handoff.Handle
	}
	got := make(chan seen, 1)
	f := setup(t, withProcessor(func(ctx context.Context, _ dispatch.Pointer) (dispatch.Decision, error) {
		s := seen{first: handoff.FirstReceive(ctx)}
		if h, ok := handoff.HandleFrom(ctx); ok {
			s.handle = &h
		}
		got <- s
		return dispatch.Decision{Done: true, JobStatus: dispatch.StatusCompleted}, nil
	}))
	mark := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	offer := handoff.Handle{ID: 42, Gen: 1, Mark: mark}
	header := func(k, v string) reqOption { return func(r *http.Request) { r.Header.Set(k, v) } }
	for _, c := range []struct {
		name       string
		opts       []reqOption
		first      bool
		withHandle bool
	}{
		{"nothing", nil, false, false},
		{"a first receive", []reqOption{header(handoff.FirstReceiveHeader, "1")}, true, false},
		{"a later receive", []reqOption{header(handoff.FirstReceiveHeader, "0")}, false, false},
		{"an offer's handle", []reqOption{header(handoff.Header, offer.EncodeHeader())}, false, true},
		{"another job's handle", []reqOption{header(handoff.Header, handoff.Handle{ID: 43, Mark: mark}.EncodeHeader())}, false, false},
		{"an unreadable handle", []reqOption{header(handoff.Header, "not base64!")}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, _ := json.Marshal(dispatch.Pointer{ID: "42", PoolCode: dispatch.DefaultPool, SentMark: mark.UnixMicro()})
			f.do(t, "POST", "/api/dispatch/process", string(b), c.opts...).want(t, http.StatusOK)
			s := <-got
			if s.first != c.first {
				t.Errorf("first receive = %v, want %v", s.first, c.first)
			}
			switch {
			case c.withHandle && (s.handle == nil || s.handle.ID != offer.ID || s.handle.Gen != offer.Gen || !s.handle.Mark.Equal(mark)):
				t.Errorf("handle = %+v, want %+v", s.handle, offer)
			case !c.withHandle && s.handle != nil:
				t.Errorf("handle = %+v, want none", s.handle)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	queueErr := errors.New("sqs: connection refused")

	tests := []struct {
		name      string
		queuePing func(context.Context) error
		closeDB   bool
		status    int
		want      map[string]any
	}{
		{"all up", func(context.Context) error { return nil }, false, 200, map[string]any{"status": "UP", "database": "UP", "queue": "UP"}},
		{"queue down", func(context.Context) error { return queueErr }, false, 503, map[string]any{"status": "DOWN", "database": "UP", "queue": "DOWN"}},
		{"database down", nil, true, 503, map[string]any{"status": "DOWN", "database": "DOWN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, withConfig(func(c *api.Config) { c.QueuePing = tt.queuePing }))
			f.do(t, "GET", "/health/live", "", bearer("")).want(t, http.StatusOK)
			if tt.closeDB {
				f.pool.Close()
			}
			m := f.do(t, "GET", "/health/ready", "", bearer("")).want(t, tt.status).object(t)
			for k, v := range tt.want {
				if m[k] != v {
					t.Errorf("%s = %v, want %v (body %v)", k, m[k], v, m)
				}
			}
			if tt.closeDB { // liveness does not depend on the database
				f.do(t, "GET", "/health/live", "", bearer("")).want(t, http.StatusOK)
			}
		})
	}
}

func TestNewWithZeroConfig(t *testing.T) {
	t.Parallel()
	// No logger, no processor, no tokens: a local insecure server still starts.
	srv := httptest.NewServer(api.New(nil, nil, api.Config{Insecure: true}, nil).Handler())
	t.Cleanup(srv.Close)
	f := &fixture{url: srv.URL}
	f.do(t, "GET", "/health/live", "").want(t, http.StatusOK)
	// Without a processor there is no processing endpoint.
	f.do(t, "POST", "/api/dispatch/process", `{"id":"1"}`).errorCode(t, http.StatusNotFound, dispatch.ENotFound)
}

func TestCreateJobsBatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	existing := f.createJob(t, "idempotencyKey", "seen-before")
	notified := f.notifier.n.Load()

	body := `{"jobs": [
		` + jobBody(t) + `,
		{"source": "orders"},
		` + jobBody(t, "idempotencyKey", "seen-before") + `
	]}`
	var out struct {
		Results []struct {
			Index  int       `json:"index"`
			Status int       `json:"status"`
			Job    *job      `json:"job"`
			Error  *struct{} `json:"error"`
		} `json:"results"`
	}
	f.do(t, "POST", "/api/dispatch/jobs/batch", body).want(t, http.StatusOK).decode(t, &out)
	if len(out.Results) != 3 {
		t.Fatalf("%d results, want 3", len(out.Results))
	}
	for i, want := range []int{201, 400, 200} {
		r := out.Results[i]
		if r.Index != i || r.Status != want {
			t.Errorf("result %d: index %d status %d, want status %d", i, r.Index, r.Status, want)
		}
		if (r.Job == nil) != (want == 400) || (r.Error == nil) != (want != 400) {
			t.Errorf("result %d: job %v error %v", i, r.Job, r.Error)
		}
	}
	if out.Results[2].Job != nil && out.Results[2].Job.ID != existing.ID {
		t.Errorf("repeated key answered with job %s, want %s", out.Results[2].Job.ID, existing.ID)
	}
	if n := f.countJobs(t); n != 2 {
		t.Errorf("%d job rows, want 2 (the existing one and one new)", n)
	}
	if f.notifier.n.Load() != notified+1 {
		t.Errorf("the publisher was not notified once for the batch")
	}

	// A large answer says its length up front (it is not chunked), and is
	// the JSON alone.
	items := make([]string, 20)
	for i := range items {
		items[i] = jobBody(t)
	}
	answer := f.do(t, "POST", "/api/dispatch/jobs/batch", `{"jobs":[`+strings.Join(items, ",")+`]}`).want(t, http.StatusOK)
	if cl := answer.header.Get("Content-Length"); len(answer.body) < 8<<10 || cl != strconv.Itoa(len(answer.body)) || bytes.HasSuffix(answer.body, []byte("\n")) {
		t.Errorf("answer of %d bytes came with Content-Length %q (or a trailing newline)", len(answer.body), cl)
	}

	// A problem only the store can see fails the batch and names the item
	// by its index in the request.
	body = `{"jobs": [{"source": ""}, ` + jobBody(t) + `, ` + jobBody(t, "credentialsId", "987654321") + `]}`
	r := f.do(t, "POST", "/api/dispatch/jobs/batch", body)
	fields := r.errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	var e apiError
	r.decode(t, &e)
	if !strings.Contains(e.Error.Message, "jobs[2]") {
		t.Errorf("message %q does not name jobs[2], the item with unknown credentials", e.Error.Message)
	}
	// The item refused on its own is named in the same answer.
	if !slices.Contains(fields, "jobs[0].source") {
		t.Errorf("the refusal names %v, want jobs[0].source too", fields)
	}
	if n := f.countJobs(t); n != 22 {
		t.Errorf("%d job rows after a failed batch, want 22", n)
	}
}
