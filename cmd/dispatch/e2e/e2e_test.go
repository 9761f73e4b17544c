package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/app"
	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

const (
	apiToken      = "test-api-token-0123456789"
	adminToken    = "test-admin-token-0123456789"
	internalToken = "test-internal-token-0123456789"
)

// instance is a running `dispatch all` (or api/router) under test.
type instance struct {
	t         *testing.T
	apiURL    string
	routerURL string
	dbURL     string
	queue     sqstest.Queue
	stderr    *syncBuffer
	done      chan error
	cancel    context.CancelFunc
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testKey() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// baseEnv is the environment of a test instance; overrides replace entries.
func baseEnv(dbURL string, q sqstest.Queue, overrides map[string]string) []string {
	env := map[string]string{
		"DATABASE_URL":                   dbURL,
		"DISPATCH_QUEUE_URL":             q.URL,
		"AWS_ENDPOINT_URL_SQS":           q.Endpoint,
		"DISPATCH_HTTP_ADDR":             "127.0.0.1:0",
		"DISPATCH_ROUTER_ADDR":           "127.0.0.1:0",
		"DISPATCH_API_TOKENS":            apiToken,
		"DISPATCH_ADMIN_TOKEN":           adminToken,
		"DISPATCH_INTERNAL_TOKEN":        internalToken,
		"DISPATCH_ENCRYPTION_KEY":        testKey(),
		"DISPATCH_ALLOW_PRIVATE_TARGETS": "true",
		"DISPATCH_RETRY_BASE":            "1s",
		"DISPATCH_RETRY_MAX":             "10s",
		"DISPATCH_DELIVERY_TIMEOUT":      "5s",
		"DISPATCH_SHUTDOWN_TIMEOUT":      "10s",
		"DISPATCH_LOG_LEVEL":             "debug",
	}
	for k, v := range overrides {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// start runs `dispatch <cmd>` with a fresh database and queue.
func start(t *testing.T, cmd string, overrides map[string]string) *instance {
	t.Helper()
	sqstest.SetEnv()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	return startWith(t, cmd, dbURL, q, overrides)
}

func startWith(t *testing.T, cmd, dbURL string, q sqstest.Queue, overrides map[string]string) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	in := &instance{t: t, dbURL: dbURL, queue: q, stderr: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	go func() {
		err := app.Run(ctx, []string{cmd}, baseEnv(dbURL, q, overrides), pw, in.stderr)
		pw.Close()
		in.done <- err
	}()
	addrs := make(chan [2]string, 1)
	go func() {
		var a [2]string
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "api listening on "); ok {
				a[0] = "http://" + v
			}
			if v, ok := strings.CutPrefix(line, "router listening on "); ok {
				a[1] = "http://" + v
			}
			want := (cmd != "router" && a[0] != "" || cmd == "router") && (cmd == "api" || a[1] != "")
			if want && !sent {
				addrs <- a
				sent = true
			}
		}
		if !sent {
			close(addrs)
		}
	}()
	select {
	case a, ok := <-addrs:
		if !ok {
			t.Fatalf("dispatch %s exited before listening: %v\n%s", cmd, <-in.done, in.stderr.String())
		}
		in.apiURL, in.routerURL = a[0], a[1]
	case <-time.After(30 * time.Second):
		t.Fatalf("dispatch %s did not start:\n%s", cmd, in.stderr.String())
	}
	t.Cleanup(func() {
		in.stop()
		if t.Failed() {
			t.Logf("dispatch %s log:\n%s", cmd, tail(in.stderr.String(), 200))
		}
	})
	return in
}

// stop cancels the instance (SIGTERM) and waits for app.Run to return.
func (in *instance) stop() error {
	in.cancel()
	select {
	case err, ok := <-in.done:
		if ok {
			close(in.done)
		}
		return err
	case <-time.After(45 * time.Second):
		in.t.Errorf("dispatch did not stop within 45s")
		return nil
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// do sends a JSON request with a bearer token and decodes the answer.
func (in *instance) do(method, path, token string, body any, out any) int {
	in.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, in.apiURL+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			in.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

type jobJSON struct {
	ID           string            `json:"id"`
	Status       string            `json:"status"`
	AttemptCount int               `json:"attemptCount"`
	LastError    string            `json:"lastError"`
	Metadata     map[string]string `json:"metadata"`
	GroupID      string            `json:"groupId"`
}

type attemptJSON struct {
	AttemptNumber int    `json:"attemptNumber"`
	Status        string `json:"status"`
	ResponseCode  int    `json:"responseCode"`
	AttemptedAt   string `json:"attemptedAt"`
}

func (in *instance) createJob(body map[string]any) jobJSON {
	in.t.Helper()
	var j jobJSON
	if code := in.do("POST", "/api/dispatch/jobs", apiToken, body, &j); code != http.StatusCreated {
		in.t.Fatalf("create job: status %d", code)
	}
	return j
}

func (in *instance) job(id string) jobJSON {
	in.t.Helper()
	var j jobJSON
	if code := in.do("GET", "/api/dispatch/jobs/"+id, apiToken, nil, &j); code != http.StatusOK {
		in.t.Fatalf("get job %s: status %d", id, code)
	}
	return j
}

func (in *instance) attempts(id string) []attemptJSON {
	in.t.Helper()
	var a []attemptJSON
	if code := in.do("GET", "/api/dispatch/jobs/"+id+"/attempts", apiToken, nil, &a); code != http.StatusOK {
		in.t.Fatalf("attempts %s: status %d", id, code)
	}
	return a
}

// pools returns the router's /monitoring/pools answer, for failure messages.
func (in *instance) pools() string {
	if in.routerURL == "" {
		return "(no router)"
	}
	resp, err := http.Get(in.routerURL + "/monitoring/pools")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitStatus waits until the job reaches one of the statuses.
func (in *instance) waitStatus(id string, timeout time.Duration, statuses ...string) jobJSON {
	in.t.Helper()
	var j jobJSON
	eventually(in.t, timeout, func() bool {
		j = in.job(id)
		for _, s := range statuses {
			if j.Status == s {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("job %s is %s (attempts %d, lastError %q), want %v; pools: %s", id, j.Status, j.AttemptCount, j.LastError, statuses, in.pools())
	})
	return j
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", timeout, msg())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// receiver is a webhook target that records requests.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
	respond  func(n int, r *http.Request, body []byte) int // n: 1-based request number
	open     int
	maxOpen  int
	hold     time.Duration
}

type received struct {
	at     time.Time
	header http.Header
	body   string
	code   int
}

func newReceiver(t *testing.T, respond func(n int, r *http.Request, body []byte) int) *receiver {
	rc := &receiver{respond: respond}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.open++
		rc.maxOpen = max(rc.maxOpen, rc.open)
		n := len(rc.requests) + 1
		rc.requests = append(rc.requests, received{at: time.Now(), header: r.Header.Clone(), body: string(body)})
		hold := rc.hold
		rc.mu.Unlock()
		code := http.StatusOK
		if rc.respond != nil {
			code = rc.respond(n, r, body)
		}
		if hold > 0 {
			time.Sleep(hold) // the target is slow on purpose
		}
		rc.mu.Lock()
		rc.open--
		rc.requests[n-1].code = code
		rc.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// heldLoad creates n jobs without a groupId (each its own group, so that
// they may run in parallel) for a new receiver that holds every request
// for hold, and returns the receiver and the jobs' ids.
func (in *instance) heldLoad(n int, hold time.Duration) (*receiver, []string) {
	in.t.Helper()
	rc := newReceiver(in.t, nil)
	rc.hold = hold
	ids := make([]string, n)
	for i := range ids {
		ids[i] = in.createJob(jobBody(rc.URL, nil)).ID
	}
	return rc, ids
}

// mostOpen is the most requests the receiver had open at once.
func (rc *receiver) mostOpen() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.maxOpen
}

func (rc *receiver) snapshot() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.requests...)
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.requests)
}

func jobBody(target string, extra map[string]any) map[string]any {
	b := map[string]any{
		"source": "order-service", "type": "order.created", "targetUrl": target,
		"payload": `{"orderId":"12345","amount":99.99}`,
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// queueEmpty reports whether no message (visible or in flight) is left.
func (in *instance) queueEmpty() bool {
	in.t.Helper()
	attrs, err := in.queue.Attributes(context.Background())
	if err != nil {
		in.t.Fatalf("queue attributes: %v", err)
	}
	return attrs["ApproximateNumberOfMessages"] == "0" && attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
}

func TestDeliveryIsSignedAndRecorded(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, nil)
	const secret = "whsec_e2e_signing_secret"
	var cred struct {
		ID            string `json:"id"`
		SigningSecret string `json:"signingSecret"`
	}
	if code := in.do("POST", "/api/admin/dispatch/credentials", adminToken,
		map[string]any{"bearerToken": "sk_live_e2e_bearer", "signingSecret": secret, "allowedTargets": []string{rc.URL}}, &cred); code != http.StatusCreated {
		t.Fatalf("create credentials: %d", code)
	}
	if cred.SigningSecret != "" {
		t.Errorf("a given secret was echoed back")
	}
	j := in.createJob(jobBody(rc.URL+"/hooks/orders", map[string]any{
		"credentialsId": cred.ID, "headers": map[string]string{"X-Custom": "v1"},
		"metadata": map[string]string{"tenant": "acme"},
	}))
	done := in.waitStatus(j.ID, 20*time.Second, "COMPLETED", "ERROR")
	if done.Status != "COMPLETED" || done.AttemptCount != 1 {
		t.Fatalf("job = %+v, want COMPLETED after 1 attempt", done)
	}
	reqs := rc.snapshot()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	ts := r.header.Get("X-FLOWCATALYST-TIMESTAMP")
	if _, err := time.Parse("2006-01-02T15:04:05.000Z", ts); err != nil {
		t.Errorf("timestamp %q is not ISO-8601 UTC with milliseconds", ts)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + r.body))
	if want := hex.EncodeToString(mac.Sum(nil)); r.header.Get("X-FLOWCATALYST-SIGNATURE") != want {
		t.Errorf("signature %q, want %q", r.header.Get("X-FLOWCATALYST-SIGNATURE"), want)
	}
	for k, want := range map[string]string{
		"Authorization": "Bearer sk_live_e2e_bearer", "Content-Type": "application/json",
		"X-Custom": "v1", "X-Dispatch-Job-Id": j.ID, "X-Dispatch-Attempt": "1",
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if r.body != `{"orderId":"12345","amount":99.99}` {
		t.Errorf("body = %q", r.body)
	}
	at := in.attempts(j.ID)
	if len(at) != 1 || at[0].Status != "SUCCESS" || at[0].ResponseCode != 200 {
		t.Errorf("attempts = %+v, want one SUCCESS 200", at)
	}
	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "the delivered job's message is still on the queue" })
	if strings.Contains(in.stderr.String(), secret) || strings.Contains(in.stderr.String(), "sk_live_e2e_bearer") {
		t.Errorf("a secret appears in the log")
	}
}

func TestRetriesUntilSuccessWithBackoff(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, func(n int, _ *http.Request, _ []byte) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	j := in.createJob(jobBody(rc.URL, nil))
	done := in.waitStatus(j.ID, 30*time.Second, "COMPLETED", "ERROR")
	if done.Status != "COMPLETED" || done.AttemptCount != 3 {
		t.Fatalf("job = %+v, want COMPLETED after exactly 3 attempts", done)
	}
	reqs := rc.snapshot()
	if len(reqs) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(reqs))
	}
	// exponential, base 1s, ±10% jitter: ≥0.9s then ≥1.8s (SQS rounds up to whole seconds).
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 900*time.Millisecond {
		t.Errorf("second attempt came %s after the first; backoff is 1s", gap)
	}
	if gap := reqs[2].at.Sub(reqs[1].at); gap < 1800*time.Millisecond {
		t.Errorf("third attempt came %s after the second; backoff is 2s", gap)
	}
	at := in.attempts(j.ID)
	if len(at) != 3 || at[0].Status != "FAILURE" || at[0].ResponseCode != 500 || at[2].Status != "SUCCESS" {
		t.Errorf("attempts = %+v", at)
	}
	for i, a := range at {
		if a.AttemptNumber != i+1 {
			t.Errorf("attempt %d numbered %d", i+1, a.AttemptNumber)
		}
	}
}

func TestAlwaysFailingTargetEndsInErrorAfterMaxRetries(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_RETRY_BASE": "200ms"})
	rc := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusServiceUnavailable })
	j := in.createJob(jobBody(rc.URL, map[string]any{"maxRetries": 3, "retryStrategy": "fixed"}))
	done := in.waitStatus(j.ID, 30*time.Second, "ERROR", "COMPLETED")
	if done.Status != "ERROR" || done.AttemptCount != 3 {
		t.Fatalf("job = %+v, want ERROR after exactly 3 attempts", done)
	}
	if !strings.Contains(done.LastError, "exhausted") {
		t.Errorf("lastError %q does not say the retries are exhausted", done.LastError)
	}
	// The message is acknowledged, so the job can never be tried again.
	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "the exhausted job's message is still on the queue" })
	if n := rc.count(); n != 3 {
		t.Errorf("target got %d requests, want exactly 3", n)
	}
}

func TestNotFoundIsNotRetried(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusNotFound })
	j := in.createJob(jobBody(rc.URL, nil))
	done := in.waitStatus(j.ID, 20*time.Second, "ERROR", "COMPLETED")
	if done.Status != "ERROR" || done.AttemptCount != 1 || !strings.Contains(done.LastError, "404") {
		t.Fatalf("job = %+v, want ERROR after 1 attempt naming 404", done)
	}
	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "message still queued" })
	if n := rc.count(); n != 1 {
		t.Errorf("target got %d requests, want 1", n)
	}
}

func TestGroupIsDeliveredInCreationOrderDespiteAFailure(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_POOLS": "DISPATCH-POOL:8"})
	var failedOnce sync.Once
	rc := newReceiver(t, func(_ int, _ *http.Request, body []byte) int {
		code := http.StatusOK
		if strings.Contains(string(body), `"seq":9,`) {
			failedOnce.Do(func() { code = http.StatusInternalServerError })
		}
		return code
	})
	const n = 30
	ids := make([]string, n)
	for i := range n {
		ids[i] = in.createJob(jobBody(rc.URL, map[string]any{
			"groupId": "order-42", "payload": fmt.Sprintf(`{"seq":%d,"pad":"x"}`, i),
		})).ID
	}
	for _, id := range ids {
		in.waitStatus(id, 60*time.Second, "COMPLETED", "ERROR")
	}
	var okOrder []int
	for _, r := range rc.snapshot() {
		var p struct{ Seq int }
		_ = json.Unmarshal([]byte(r.body), &p)
		if r.code == http.StatusOK {
			okOrder = append(okOrder, p.Seq)
		}
	}
	if len(okOrder) != n {
		t.Fatalf("%d successful deliveries, want %d: %v", len(okOrder), n, okOrder)
	}
	for i, seq := range okOrder {
		if seq != i {
			t.Fatalf("group delivered out of order: %v", okOrder)
		}
	}
	if rc.count() != n+1 {
		t.Errorf("target got %d requests, want %d (one failure retried once)", rc.count(), n+1)
	}
}

func TestPoolConcurrencyIsABound(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_POOLS": "DISPATCH-POOL:4"})
	rc, ids := in.heldLoad(24, 150*time.Millisecond)
	for _, id := range ids {
		in.waitStatus(id, 60*time.Second, "COMPLETED")
	}
	maxOpen := rc.mostOpen()
	if maxOpen > 4 {
		t.Fatalf("%d requests were open at the target at once; the pool's concurrency is 4", maxOpen)
	}
	if maxOpen < 2 {
		t.Errorf("at most %d request open at once: unrelated jobs did not run in parallel", maxOpen)
	}
}

func jsonBytes(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	return bytes.NewReader(b), err
}

func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// With the production long-poll wait (20 s), `dispatch api` and `dispatch
// router` as separate processes deliver a job as soon as it is queued: the
// router's poll, already waiting, returns on the first message, and retries
// are spaced by the backoff, not by the poll.
func TestSplitProcessesDeliverPromptlyWithDefaultPollWait(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	in := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_LOG_LEVEL": "warn"})
	spawn(t, "router", baseEnv(dbURL, q, map[string]string{
		"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process", "DISPATCH_LOG_LEVEL": "warn"}))
	var mu sync.Mutex
	var at []time.Time
	rc := newReceiver(t, func(n int, _ *http.Request, _ []byte) int {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	// Let the router's first poll start waiting on the empty queue.
	eventually(t, 10*time.Second, func() bool {
		a, err := q.Attributes(context.Background())
		return err == nil && a["ApproximateNumberOfMessages"] == "0"
	}, func() string { return "queue not ready" })
	created := time.Now()
	j := in.createJob(jobBody(rc.URL, nil))
	eventually(t, 30*time.Second, func() bool { return in.job(j.ID).Status == "COMPLETED" }, func() string {
		a, _ := q.Attributes(context.Background())
		return fmt.Sprintf("job %+v; queue %v", in.job(j.ID), a)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 3 {
		t.Fatalf("target got %d requests, want 3 (500, 500, 200)", len(at))
	}
	if first := at[0].Sub(created); first > 3*time.Second {
		t.Errorf("first delivery %v after create; a waiting long poll returns on the first message", first)
	}
	// Backoff with DISPATCH_RETRY_BASE=1s: ~1 s then ~2 s (±10%), not a 20 s poll.
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		gap := at[i+1].Sub(at[i])
		if gap < want*8/10 || gap > want+3*time.Second {
			t.Errorf("retry %d came %v after the previous attempt, want about %v (the backoff)", i+1, gap, want)
		}
	}
}
