package mediator_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
	"github.com/dispatchhq/dispatch/webhook"
)

// received is one request a target got.
type received struct {
	method string
	header http.Header
	body   []byte
}

// target is a webhook receiver on loopback that records what it gets.
type target struct {
	*httptest.Server
	hits     atomic.Int32
	requests chan received
}

// newTarget starts a receiver that records each request, then runs h.
func newTarget(t *testing.T, h http.HandlerFunc) *target {
	t.Helper()
	tg := &target{requests: make(chan received, 64)}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tg.hits.Add(1)
		select {
		case tg.requests <- received{method: r.Method, header: r.Header.Clone(), body: body}:
		default:
		}
		h(w, r)
	}))
	t.Cleanup(tg.Close)
	return tg
}

// statusTarget answers every request with code.
func statusTarget(t *testing.T, code int) *target {
	return newTarget(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) })
}

// next returns the next request the target received.
func (tg *target) next(t *testing.T) received {
	t.Helper()
	select {
	case r := <-tg.requests:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("the target received no request")
		return received{}
	}
}

func newSender(timeout time.Duration, allowPrivate bool) *mediator.Sender {
	return mediator.NewSender(mediator.SenderConfig{
		Timeout: timeout, Guard: mediator.Guard{AllowPrivate: allowPrivate}, UserAgent: "dispatch-test/1",
	})
}

const testJobID = 7311097302432047104

func testJob(url string) *dispatch.Job {
	return &dispatch.Job{
		ID: testJobID, TargetURL: url, Payload: `{"orderId":42}`,
		PayloadContentType: "application/json", AttemptCount: 1, MaxRetries: 5,
		RetryStrategy: dispatch.RetryExponential, Status: dispatch.StatusInProgress,
	}
}

func send(t *testing.T, s *mediator.Sender, j *dispatch.Job, c *dispatch.Credentials) mediator.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := s.Send(ctx, j, c)
	if d.StartedAt.IsZero() || d.CompletedAt.Before(d.StartedAt) {
		t.Errorf("bad times: started %v, completed %v", d.StartedAt, d.CompletedAt)
	}
	return d
}

func TestSendStatusCodes(t *testing.T) {
	tests := []struct {
		code      int
		status    dispatch.AttemptStatus
		retryable bool
	}{
		{200, dispatch.AttemptSuccess, false},
		{201, dispatch.AttemptSuccess, false},
		{204, dispatch.AttemptSuccess, false},
		{400, dispatch.AttemptFailure, false},
		{401, dispatch.AttemptFailure, false},
		{403, dispatch.AttemptFailure, false},
		{404, dispatch.AttemptFailure, false},
		{410, dispatch.AttemptFailure, false},
		{422, dispatch.AttemptFailure, false},
		{408, dispatch.AttemptFailure, true},
		{425, dispatch.AttemptFailure, true},
		{429, dispatch.AttemptFailure, true},
		{500, dispatch.AttemptFailure, true},
		{502, dispatch.AttemptFailure, true},
		{503, dispatch.AttemptFailure, true},
		{504, dispatch.AttemptFailure, true},
	}
	s := newSender(5*time.Second, true)
	for _, tt := range tests {
		tg := statusTarget(t, tt.code)
		d := send(t, s, testJob(tg.URL), nil)
		if d.Status != tt.status || d.Retryable != tt.retryable || d.Code != tt.code {
			t.Errorf("HTTP %d: status %s, retryable %v, code %d; want %s, %v", tt.code, d.Status, d.Retryable, d.Code, tt.status, tt.retryable)
		}
		if (tt.status == dispatch.AttemptSuccess) != (d.Err == "") {
			t.Errorf("HTTP %d: error text %q", tt.code, d.Err)
		}
		if tt.status != dispatch.AttemptSuccess && !strings.Contains(d.Err, strconv.Itoa(tt.code)) {
			t.Errorf("HTTP %d: error %q does not name the code", tt.code, d.Err)
		}
		if got := tg.hits.Load(); got != 1 {
			t.Errorf("HTTP %d: target got %d requests", tt.code, got)
		}
	}
}

func TestSendRetryAfter(t *testing.T) {
	s := newSender(5*time.Second, true)
	tests := []struct {
		name     string
		code     int
		header   string
		min, max time.Duration
	}{
		{"429 seconds", 429, "7", 7 * time.Second, 7 * time.Second},
		{"503 seconds", 503, "120", 120 * time.Second, 120 * time.Second},
		{"503 HTTP date", 503, time.Now().Add(time.Minute).UTC().Format(http.TimeFormat), 55 * time.Second, 61 * time.Second},
		{"429 date in the past", 429, time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat), 0, 0},
		{"429 garbage", 429, "soon", 0, 0},
		{"429 negative", 429, "-5", 0, 0},
		// Past what a Duration holds: as long as the sender reads, not
		// wrapped round to a negative (ignored: a retry within seconds).
		{"503 huge", 503, "10000000000", mediator.MaxRetryAfter, mediator.MaxRetryAfter},
		{"500 ignores Retry-After", 500, "7", 0, 0},
	}
	for _, tt := range tests {
		tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", tt.header)
			w.WriteHeader(tt.code)
		})
		d := send(t, s, testJob(tg.URL), nil)
		if !d.Retryable || d.Status != dispatch.AttemptFailure {
			t.Errorf("%s: status %s, retryable %v", tt.name, d.Status, d.Retryable)
		}
		if d.RetryAfter < tt.min || d.RetryAfter > tt.max {
			t.Errorf("%s: RetryAfter %s, want %s..%s", tt.name, d.RetryAfter, tt.min, tt.max)
		}
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	elsewhere := statusTarget(t, 200)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/hook", http.StatusFound)
	})
	d := send(t, newSender(5*time.Second, true), testJob(tg.URL), nil)
	if d.Status != dispatch.AttemptFailure || d.Retryable || d.Code != 302 {
		t.Errorf("delivery %+v; want a non-retryable FAILURE with code 302", d)
	}
	if !strings.Contains(d.Err, "redirect") || !strings.Contains(d.Err, elsewhere.URL) {
		t.Errorf("error %q does not explain the redirect", d.Err)
	}
	if n := elsewhere.hits.Load(); n != 0 {
		t.Errorf("the redirect target received %d requests", n)
	}
}

func TestSendRedirectLocationIsCleaned(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "https://example.com/\xff\xfe")
		w.WriteHeader(http.StatusMovedPermanently)
	})
	d := send(t, newSender(5*time.Second, true), testJob(tg.URL), nil)
	if d.Code != 301 || !utf8.ValidString(d.Err) {
		t.Errorf("error %q: not valid UTF-8 (PostgreSQL would refuse it)", d.Err)
	}
}

func TestSendTimeout(t *testing.T) {
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server closes
	start := time.Now()
	d := send(t, newSender(200*time.Millisecond, true), testJob(tg.URL), nil)
	if d.Status != dispatch.AttemptTimeout || !d.Retryable || d.Code != 0 {
		t.Errorf("delivery %+v; want a retryable TIMEOUT", d)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("took %s with a 200ms timeout", elapsed)
	}
}

func TestSendContextDeadline(t *testing.T) {
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	d := newSender(time.Minute, true).Send(ctx, testJob(tg.URL), nil)
	if d.Status != dispatch.AttemptTimeout || !d.Retryable {
		t.Errorf("delivery %+v; want a retryable TIMEOUT", d)
	}
}

func TestSendConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := send(t, newSender(5*time.Second, true), testJob("http://"+addr+"/hook?token=s3cr3t-in-query"), nil)
	if d.Status != dispatch.AttemptNetworkError || !d.Retryable || d.Code != 0 {
		t.Errorf("delivery %+v; want a retryable NETWORK_ERROR", d)
	}
	if strings.Contains(d.Err, "s3cr3t") {
		t.Errorf("error %q copies the target's query string", d.Err)
	}
}

// Whatever fails the exchange (a certificate the sender does not trust, a
// connection closed without an answer), the error recorded does not copy
// the target's URL: its query string may hold a token, and a Slack
// destination's URL is its secret.
func TestSendErrorsDoNotCopyTheTargetURL(t *testing.T) {
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tlsTarget.Close)
	hangUp := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // no answer at all
		}
	})
	for name, target := range map[string]string{"untrusted certificate": tlsTarget.URL, "no answer": hangUp.URL} {
		d := send(t, newSender(5*time.Second, true), testJob(target+"/hook?token=s3cr3t-in-query"), nil)
		if d.Status != dispatch.AttemptNetworkError || d.Err == "" {
			t.Errorf("%s: delivery %+v; want a NETWORK_ERROR saying why", name, d)
		}
		if strings.Contains(d.Err, "s3cr3t") || strings.Contains(d.Err, "/hook") {
			t.Errorf("%s: error %q copies the target's URL", name, d.Err)
		}
	}
}

func TestSendResponseBody(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		check func(string) bool
	}{
		{"kept as is", `{"ok":true}`, func(s string) bool { return s == `{"ok":true}` }},
		{"truncated to 4 KiB", strings.Repeat("a", 10<<10), func(s string) bool { return s == strings.Repeat("a", 4096) }},
		{"NUL removed", "x\x00y\x00z", func(s string) bool { return s == "xyz" }},
		{"invalid UTF-8 replaced", "ok\xff\xfeend", func(s string) bool { return s == "ok\uFFFDend" }},
		{"multi-byte runes cut at a rune boundary", strings.Repeat("€", 5000), func(s string) bool {
			return len(s) <= 4096 && len(s) > 4090 && strings.Trim(s, "€") == ""
		}},
		{"replacements do not grow it past 4 KiB", strings.Repeat("a\xff", 5000), func(s string) bool {
			return len(s) <= 4096 && len(s) > 4000
		}},
		{"replacements at the cut", strings.Repeat("\xffa", 5000), func(s string) bool { return len(s) <= 4096 }},
	}
	s := newSender(5*time.Second, true)
	for _, tt := range tests {
		tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(500)
			io.WriteString(w, tt.body)
		})
		d := send(t, s, testJob(tg.URL), nil)
		if !utf8.ValidString(d.Body) || strings.ContainsRune(d.Body, 0) {
			t.Errorf("%s: body is not storable text: %.64q", tt.name, d.Body)
		}
		if !tt.check(d.Body) {
			t.Errorf("%s: body (%d bytes) %.64q", tt.name, len(d.Body), d.Body)
		}
	}
}

func TestSendRequest(t *testing.T) {
	tg := statusTarget(t, 200)
	j := testJob(tg.URL + "/hooks/orders?tenant=t1")
	j.AttemptCount = 3
	j.PayloadContentType = "application/cloudevents+json"
	j.Headers = map[string]string{"X-Tenant": "t1", "Accept-Language": "de"}
	creds := &dispatch.Credentials{BearerToken: "bearer-tok", SigningSecret: "s3cret", SignatureScheme: "FLOWCATALYST", AllowedTargets: []string{tg.URL}}
	before := time.Now().UTC().Truncate(time.Millisecond)
	if d := send(t, newSender(5*time.Second, true), j, creds); d.Status != dispatch.AttemptSuccess {
		t.Fatalf("delivery %+v", d)
	}
	after := time.Now().UTC()
	r := tg.next(t)
	if r.method != http.MethodPost || string(r.body) != j.Payload {
		t.Errorf("request %s with body %q", r.method, r.body)
	}
	for name, want := range map[string]string{
		"Content-Type":       "application/cloudevents+json",
		"X-Tenant":           "t1",
		"Accept-Language":    "de",
		"X-Dispatch-Job-Id":  "7311097302432047104",
		"X-Dispatch-Attempt": "3",
		"Authorization":      "Bearer bearer-tok",
		"User-Agent":         "dispatch-test/1",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	// The signature, recomputed here from the spec (§7.1).
	stamp := r.header.Get("X-FLOWCATALYST-TIMESTAMP")
	ts, err := time.Parse("2006-01-02T15:04:05.000Z", stamp)
	if err != nil {
		t.Fatalf("timestamp %q is not 2006-01-02T15:04:05.000Z: %v", stamp, err)
	}
	if ts.Before(before) || ts.After(after) {
		t.Errorf("timestamp %s outside the send window %s..%s", ts, before, after)
	}
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(stamp + j.Payload))
	if got, want := r.header.Get("X-FLOWCATALYST-SIGNATURE"), hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("X-FLOWCATALYST-SIGNATURE = %q, want %q", got, want)
	}
	if v := r.header.Get("X-FLOWCATALYST-SIGNATURE-PREVIOUS"); v != "" {
		t.Errorf("previous signature %q sent without a rotation", v)
	}
	if err := (webhook.Verifier{Secrets: []string{"s3cret"}}).Verify(r.header, r.body); err != nil {
		t.Errorf("webhook.Verifier refuses the request: %v", err)
	}
}

func TestSendUnsigned(t *testing.T) {
	tg := statusTarget(t, 200)
	send(t, newSender(5*time.Second, true), testJob(tg.URL), nil)
	r := tg.next(t)
	for _, name := range []string{"Authorization", "X-FLOWCATALYST-SIGNATURE", "X-FLOWCATALYST-TIMESTAMP", "webhook-signature"} {
		if v := r.header.Get(name); v != "" {
			t.Errorf("unsigned request carries %s: %q", name, v)
		}
	}
}

func TestSendNoBearerToken(t *testing.T) {
	tg := statusTarget(t, 200)
	send(t, newSender(5*time.Second, true), testJob(tg.URL), &dispatch.Credentials{SigningSecret: "s", AllowedTargets: []string{tg.URL}})
	r := tg.next(t)
	if v := r.header.Get("Authorization"); v != "" {
		t.Errorf("Authorization %q without a bearer token", v)
	}
	if r.header.Get("X-FLOWCATALYST-SIGNATURE") == "" {
		t.Errorf("no signature")
	}
}

func TestSendStandardWebhooks(t *testing.T) {
	secret, err := webhook.NewSecret(webhook.SchemeStandardWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	tg := statusTarget(t, 200)
	creds := &dispatch.Credentials{BearerToken: "tok", SigningSecret: secret, SignatureScheme: "STANDARD_WEBHOOKS", AllowedTargets: []string{tg.URL}}
	if d := send(t, newSender(5*time.Second, true), testJob(tg.URL), creds); d.Status != dispatch.AttemptSuccess {
		t.Fatalf("delivery %+v", d)
	}
	r := tg.next(t)
	if got := r.header.Get("webhook-id"); got != "7311097302432047104" {
		t.Errorf("webhook-id = %q, want the job id", got)
	}
	if r.header.Get("webhook-timestamp") == "" || !strings.HasPrefix(r.header.Get("webhook-signature"), "v1,") {
		t.Errorf("headers %v", r.header)
	}
	if r.header.Get("X-FLOWCATALYST-SIGNATURE") != "" {
		t.Errorf("FLOWCATALYST signature sent with STANDARD_WEBHOOKS")
	}
	v := webhook.Verifier{Scheme: webhook.SchemeStandardWebhooks, Secrets: []string{secret}}
	if err := v.Verify(r.header, r.body); err != nil {
		t.Errorf("verifier refuses: %v", err)
	}
	other, _ := webhook.NewSecret(webhook.SchemeStandardWebhooks)
	if err := (webhook.Verifier{Secrets: []string{other}}).Verify(r.header, r.body); err == nil {
		t.Errorf("a verifier with another secret accepts")
	}
}

func TestSendDuringRotation(t *testing.T) {
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		t.Run(string(scheme), func(t *testing.T) {
			oldSecret, _ := webhook.NewSecret(scheme)
			newSecret, _ := webhook.NewSecret(scheme)
			stranger, _ := webhook.NewSecret(scheme)
			inGrace := time.Now().Add(time.Hour)
			graceOver := time.Now().Add(-time.Second)
			s := newSender(5*time.Second, true)
			tg := statusTarget(t, 200)
			creds := &dispatch.Credentials{SigningSecret: newSecret, SignatureScheme: string(scheme), AllowedTargets: []string{tg.URL},
				Previous: []dispatch.PreviousSecret{{Secret: oldSecret, ExpiresAt: inGrace}}}

			send(t, s, testJob(tg.URL), creds)
			r := tg.next(t)
			for name, secrets := range map[string][]string{"old only": {oldSecret}, "new only": {newSecret}} {
				if err := (webhook.Verifier{Scheme: scheme, Secrets: secrets}).Verify(r.header, r.body); err != nil {
					t.Errorf("during the grace period, the %s verifier refuses: %v", name, err)
				}
			}
			if err := (webhook.Verifier{Scheme: scheme, Secrets: []string{stranger}}).Verify(r.header, r.body); err == nil {
				t.Errorf("a verifier with an unrelated secret accepts")
			}

			creds.Previous[0].ExpiresAt = graceOver
			send(t, s, testJob(tg.URL), creds)
			r = tg.next(t)
			if err := (webhook.Verifier{Scheme: scheme, Secrets: []string{oldSecret}}).Verify(r.header, r.body); err == nil {
				t.Errorf("after the grace period, the old secret still verifies")
			}
			if err := (webhook.Verifier{Scheme: scheme, Secrets: []string{newSecret}}).Verify(r.header, r.body); err != nil {
				t.Errorf("after the grace period, the new secret does not verify: %v", err)
			}
		})
	}
}

func TestSendUnsignableCredentials(t *testing.T) {
	tg := statusTarget(t, 200)
	creds := &dispatch.Credentials{SigningSecret: "not base64 !!", SignatureScheme: "STANDARD_WEBHOOKS", AllowedTargets: []string{tg.URL}}
	d := send(t, newSender(5*time.Second, true), testJob(tg.URL), creds)
	if d.Status != dispatch.AttemptFailure || d.Retryable || !strings.Contains(d.Err, "sign") {
		t.Errorf("delivery %+v; want a non-retryable signing failure", d)
	}
	if strings.Contains(d.Err, "not base64 !!") {
		t.Errorf("error %q contains the secret", d.Err)
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("an unsigned request went out (%d)", n)
	}
}

// The only dial test of the guard: loopback targets, so that even a broken
// guard sends nothing off the machine.
func TestSendGuardBlocksLoopback(t *testing.T) {
	tg := statusTarget(t, 200)
	s := newSender(5*time.Second, false)
	port := tg.Listener.Addr().(*net.TCPAddr).Port
	for _, url := range []string{
		tg.URL + "/hook",
		"http://localhost:" + strconv.Itoa(port) + "/hook", // a name that resolves to loopback
	} {
		d := send(t, s, testJob(url), &dispatch.Credentials{SigningSecret: "s", AllowedTargets: []string{url}})
		if d.Status != dispatch.AttemptBlocked || d.Retryable || d.Code != 0 {
			t.Errorf("%s: delivery %+v; want a non-retryable BLOCKED", url, d)
		}
		if !strings.Contains(d.Err, "blocked") || !strings.Contains(d.Err, "127.0.0.1") {
			t.Errorf("%s: error %q does not say what was blocked", url, d.Err)
		}
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("the guarded sender reached the target %d times", n)
	}
}

// Credentials go only where their allowedTargets let them: to any other
// target the request is not sent at all (not even unsigned), and the
// delivery says why and what to do.
func TestSendRefusesTargetsTheCredentialsDoNotAllow(t *testing.T) {
	tg := statusTarget(t, 200)
	s := newSender(5*time.Second, true)
	for name, allowed := range map[string][]string{
		"none":            nil,
		"another port":    {"http://127.0.0.1:1"},
		"another path":    {tg.URL + "/partner/"},
		"https, not http": {strings.Replace(tg.URL, "http://", "https://", 1)},
	} {
		creds := &dispatch.Credentials{ID: 77, BearerToken: "partner-bearer", SigningSecret: "s", SignatureScheme: "FLOWCATALYST", AllowedTargets: allowed}
		d := send(t, s, testJob(tg.URL+"/attacker"), creds)
		if d.Status != dispatch.AttemptBlocked || d.Retryable || d.Code != 0 {
			t.Errorf("%s: delivery %+v; want a non-retryable BLOCKED", name, d)
		}
		if !strings.Contains(d.Err, "credentials 77") || !strings.Contains(d.Err, "allowedTargets") {
			t.Errorf("%s: error %q does not say why", name, d.Err)
		}
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("the target received %d requests", n)
	}
	creds := &dispatch.Credentials{BearerToken: "partner-bearer", SigningSecret: "s", SignatureScheme: "FLOWCATALYST", AllowedTargets: []string{tg.URL + "/partner/"}}
	if d := send(t, s, testJob(tg.URL+"/partner/in"), creds); d.Status != dispatch.AttemptSuccess {
		t.Errorf("allowed target: delivery %+v", d)
	}
}
