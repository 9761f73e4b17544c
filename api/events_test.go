package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/mediator"
)

type subscriptionOut struct {
	ID                 string            `json:"id"`
	Name               string            `json:"name"`
	URL                string            `json:"url"`
	EventTypes         []string          `json:"eventTypes"`
	Filter             map[string]string `json:"filter"`
	Headers            map[string]string `json:"headers"`
	MaxRetries         int               `json:"maxRetries"`
	RetryStrategy      string            `json:"retryStrategy"`
	OrderingKey        string            `json:"orderingKey"`
	RateLimitPerSecond int               `json:"rateLimitPerSecond"`
	Status             string            `json:"status"`
	DisabledReason     string            `json:"disabledReason"`
	VerifyRequired     bool              `json:"verifyRequired"`
	VerifiedURL        string            `json:"verifiedUrl"`
}

type eventOut struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
	Jobs []struct {
		ID             string `json:"id"`
		SubscriptionID string `json:"subscriptionId"`
		Status         string `json:"status"`
	} `json:"jobs"`
}

// withVerifier gives the API the real verification handshake, allowed to
// reach loopback receivers.
func withVerifier(f func() *mediator.Verifier) option {
	return withConfig(func(c *api.Config) { c.Verifier = lazyVerifier(f) })
}

// lazyVerifier builds the verifier at first use (the store exists only
// once setup has made it).
type lazyVerifier func() *mediator.Verifier

func (l lazyVerifier) Verify(ctx context.Context, id int64) (dispatch.Subscription, error) {
	return l().Verify(ctx, id)
}

func (l lazyVerifier) Enable(ctx context.Context, id int64) (dispatch.Subscription, error) {
	return l().Enable(ctx, id)
}

// echoReceiver answers the verification handshake when echo is true, and
// 200 {} otherwise.
func echoReceiver(t *testing.T, echo bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]string
		_ = json.Unmarshal(b, &m)
		w.Header().Set("Content-Type", "application/json")
		if echo {
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": m["challenge"]})
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestEventsAndSubscriptionsRoutes exercises every events and subscriptions
// route through f.do, so each real answer (success and error) is also
// validated against the OpenAPI document.
func TestEventsAndSubscriptionsRoutes(t *testing.T) {
	var f *fixture
	f = setup(t, withVerifier(func() *mediator.Verifier {
		sender := mediator.NewSender(mediator.SenderConfig{Timeout: 5 * time.Second, Guard: mediator.Guard{AllowPrivate: true}})
		return mediator.NewVerifier(f.store, sender, slog.New(slog.DiscardHandler))
	}))
	echo, silent := echoReceiver(t, true), echoReceiver(t, false)

	// Create: exact and prefix patterns, every optional field on one.
	var exact, prefix, invoice subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"orders exact","url":"`+echo+`/a","eventTypes":["order.created"]}`).
		want(t, http.StatusCreated).decode(t, &exact)
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"all orders","url":"`+echo+`/b","eventTypes":["order.*"],
		"filter":{"region":"eu"},"headers":{"X-Team":"billing"},"maxRetries":3,"retryStrategy":"linear",
		"orderingKey":"/customerId","rateLimitPerSecond":5}`).want(t, http.StatusCreated).decode(t, &prefix)
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"invoices","url":"`+echo+`/c","eventTypes":["invoice.*"]}`).
		want(t, http.StatusCreated).decode(t, &invoice)
	if exact.Status != "ACTIVE" || prefix.OrderingKey != "/customerId" || prefix.RateLimitPerSecond != 5 || prefix.Filter["region"] != "eu" {
		t.Fatalf("created %+v and %+v", exact, prefix)
	}
	fields := f.do(t, "POST", "/api/dispatch/subscriptions", `{"url":"ftp://x","eventTypes":["a.*.b"],"rateLimitPerSecond":0,"colour":"red"}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	for _, want := range []string{"name", "url", "eventTypes[0]", "rateLimitPerSecond", "colour"} {
		if !slices.Contains(fields, want) {
			t.Errorf("bad subscription: fields %v, want %s among them", fields, want)
		}
	}

	// The handshake: the echoing endpoint becomes ACTIVE, the other waits
	// with the reason; enable does not skip the handshake.
	var verified, pending subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"echoes","url":"`+echo+`/v","eventTypes":["*"],"verify":true}`).
		want(t, http.StatusCreated).decode(t, &verified)
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"silent","url":"`+silent+`/v","eventTypes":["order.created"],"verify":true}`).
		want(t, http.StatusCreated).decode(t, &pending)
	if verified.Status != "ACTIVE" || pending.Status != "PENDING_VERIFICATION" || pending.DisabledReason == "" {
		t.Fatalf("after the handshake: %+v and %+v", verified, pending)
	}
	f.do(t, "POST", "/api/dispatch/subscriptions/"+pending.ID+"/enable", "").errorCode(t, http.StatusConflict, dispatch.EConflict)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+pending.ID+"/verify", "").want(t, http.StatusOK).decode(t, &pending)
	if pending.Status != "PENDING_VERIFICATION" {
		t.Fatalf("verify again against a silent endpoint: %s", pending.Status)
	}
	f.do(t, "DELETE", "/api/dispatch/subscriptions/"+verified.ID, "").want(t, http.StatusNoContent)
	f.do(t, "GET", "/api/dispatch/subscriptions/"+verified.ID, "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)
	f.do(t, "DELETE", "/api/dispatch/subscriptions/"+verified.ID, "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)

	// Read and list.
	var got subscriptionOut
	f.do(t, "GET", "/api/dispatch/subscriptions/"+prefix.ID, "").want(t, http.StatusOK).decode(t, &got)
	if got.Name != "all orders" || got.Headers["X-Team"] != "billing" {
		t.Fatalf("read back %+v", got)
	}
	var list struct {
		Items      []subscriptionOut `json:"items"`
		TotalItems int               `json:"totalItems"`
	}
	f.do(t, "GET", "/api/dispatch/subscriptions?eventType=order.created&status=ACTIVE&size=10", "").want(t, http.StatusOK).decode(t, &list)
	if list.TotalItems != 2 {
		t.Fatalf("ACTIVE subscriptions for order.created: %+v, want exact and prefix", list.Items)
	}
	f.do(t, "GET", "/api/dispatch/subscriptions?status=SLEEPY&size=0", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	// eventType is an event's type: a pattern would list only the
	// subscriptions spelt the same, not those an order.x event reaches.
	if fields := f.do(t, "GET", "/api/dispatch/subscriptions?eventType=order.*", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid); !slices.Equal(fields, []string{"eventType"}) {
		t.Errorf("eventType=order.*: fields %v, want [eventType]", fields)
	}
	f.do(t, "GET", "/api/dispatch/subscriptions/abc", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)

	// Patch: null clears an optional field; a bad patch changes nothing.
	got = subscriptionOut{}
	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+prefix.ID, `{"name":"orders (eu)","rateLimitPerSecond":null,"filter":null}`).
		want(t, http.StatusOK).decode(t, &got)
	if got.Name != "orders (eu)" || got.RateLimitPerSecond != 0 || len(got.Filter) != 0 || got.OrderingKey != "/customerId" {
		t.Fatalf("patched %+v", got)
	}
	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+prefix.ID, `{"name":null,"maxRetries":99}`).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+prefix.ID, `{"name":"x"}`, contentType("text/plain")).
		errorCode(t, http.StatusUnsupportedMediaType, dispatch.EMediaType)
	after := subscriptionOut{}
	f.do(t, "GET", "/api/dispatch/subscriptions/"+prefix.ID, "").want(t, http.StatusOK).decode(t, &after)
	if after.Name != "orders (eu)" || after.MaxRetries != 3 {
		t.Fatalf("a refused patch changed the subscription: %+v", after)
	}

	// Disable and enable.
	f.do(t, "POST", "/api/dispatch/subscriptions/"+invoice.ID+"/disable", "").want(t, http.StatusOK).decode(t, &got)
	if got.Status != "DISABLED" || got.DisabledReason == "" {
		t.Fatalf("disabled: %+v", got)
	}
	f.do(t, "POST", "/api/dispatch/subscriptions/"+invoice.ID+"/enable", "").want(t, http.StatusOK).decode(t, &got)
	if got.Status != "ACTIVE" {
		t.Fatalf("enabled: %+v", got)
	}

	// Publish: two of the subscriptions match; none match → jobs: [];
	// the same key again → 200 with the same event.
	var e, again, none eventOut
	r := f.do(t, "POST", "/api/dispatch/events", `{"source":"shop","type":"order.created","data":{"customerId":"c-1","total":12},"idempotencyKey":"k-1"}`).
		want(t, http.StatusCreated)
	r.decode(t, &e)
	if len(e.Jobs) != 2 {
		t.Fatalf("order.created made %d jobs, want 2: %s", len(e.Jobs), r.body)
	}
	f.do(t, "POST", "/api/dispatch/events", `{"source":"shop","type":"order.created","data":{"customerId":"c-1","total":12},"idempotencyKey":"k-1"}`).
		want(t, http.StatusOK).decode(t, &again)
	if again.ID != e.ID || len(again.Jobs) != 2 {
		t.Fatalf("the same key again: %+v, want event %s", again, e.ID)
	}
	r = f.do(t, "POST", "/api/dispatch/events", `{"source":"shop","type":"refund.issued","data":"refund r-9"}`).want(t, http.StatusCreated)
	r.decode(t, &none)
	if none.Jobs == nil || len(none.Jobs) != 0 || string(none.Data) != `"refund r-9"` {
		t.Fatalf("an event nobody subscribes to answers %s, want jobs: [] and the data as given", r.body)
	}
	fields = f.do(t, "POST", "/api/dispatch/events", `{"type":"order.*","metadata":{"eventId":"1"}}`).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	for _, want := range []string{"source", "type", "data", "metadata.eventId"} {
		if !slices.Contains(fields, want) {
			t.Errorf("bad event: fields %v, want %s among them", fields, want)
		}
	}

	// Read and search events.
	var read eventOut
	f.do(t, "GET", "/api/dispatch/events/"+e.ID, "").want(t, http.StatusOK).decode(t, &read)
	if len(read.Jobs) != 2 || read.Jobs[0].Status == "" {
		t.Fatalf("read back %+v", read)
	}
	var job struct {
		EventID        string `json:"eventId"`
		SubscriptionID string `json:"subscriptionId"`
	}
	f.do(t, "GET", "/api/dispatch/jobs/"+read.Jobs[0].ID, "").want(t, http.StatusOK).decode(t, &job)
	if job.EventID != e.ID || job.SubscriptionID != read.Jobs[0].SubscriptionID {
		t.Fatalf("the event's job says event %q subscription %q", job.EventID, job.SubscriptionID)
	}
	f.do(t, "GET", "/api/dispatch/events/1", "").errorCode(t, http.StatusNotFound, dispatch.ENotFound)
	var events struct {
		Items []eventOut `json:"items"`
	}
	since := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	f.do(t, "GET", "/api/dispatch/events?type=order.created&source=shop&createdAfter="+since, "").want(t, http.StatusOK).decode(t, &events)
	if len(events.Items) != 1 || events.Items[0].ID != e.ID {
		t.Fatalf("search order.created from shop: %+v", events.Items)
	}
	fields = f.do(t, "GET", "/api/dispatch/events?createdBefore=yesterday&colour=red", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	if !slices.Contains(fields, "createdBefore") || !slices.Contains(fields, "colour") {
		t.Errorf("bad search: fields %v", fields)
	}
	f.do(t, "GET", "/api/dispatch/events", "", bearer("")).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)
}

// TestVerifyWithoutVerifier: a process that cannot deliver answers 503.
func TestVerifyWithoutVerifier(t *testing.T) {
	f := setup(t)
	var s subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"http://127.0.0.1:1/x","eventTypes":["*"]}`).
		want(t, http.StatusCreated).decode(t, &s)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+s.ID+"/verify", "").errorCode(t, http.StatusServiceUnavailable, dispatch.EUnavailable)
}

// An event type is sent as a header of its jobs' requests: one holding a
// control character could never be delivered, so it is refused with the
// event, as a subscription pattern holding one (it could match no event)
// or a leading or trailing dot.
// Nothing is stored.
func TestAControlCharacterInAnEventTypeIsRefused(t *testing.T) {
	f := setup(t)
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"all","url":"http://127.0.0.1:1/x","eventTypes":["*"]}`).
		want(t, http.StatusCreated)
	for _, typ := range []string{`order.created\u0001`, `order\u007fcreated`, `order.created\r\nX-Evil: 1`} {
		fields := f.do(t, "POST", "/api/dispatch/events", `{"source":"s","type":"`+typ+`","data":{}}`).
			errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
		if !slices.Equal(fields, []string{"type"}) {
			t.Errorf("type %s: fields %v, want [type]", typ, fields)
		}
	}
	fields := f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"http://127.0.0.1:1/x","eventTypes":["order\u0001.*","ok.*"]}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	if !slices.Equal(fields, []string{"eventTypes[0]"}) {
		t.Errorf("pattern: fields %v, want [eventTypes[0]]", fields)
	}
	// Nor a pattern with a leading or trailing dot: no type has one.
	fields = f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"http://127.0.0.1:1/x","eventTypes":["order.","ok.*",".order.*"]}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	if !slices.Equal(fields, []string{"eventTypes[0]", "eventTypes[2]"}) {
		t.Errorf("dotted patterns: fields %v, want [eventTypes[0] eventTypes[2]]", fields)
	}
	var subs struct {
		TotalItems int `json:"totalItems"`
	}
	f.do(t, "GET", "/api/dispatch/subscriptions", "").want(t, http.StatusOK).decode(t, &subs)
	if subs.TotalItems != 1 {
		t.Errorf("%d subscriptions stored, want only the first test's", subs.TotalItems)
	}
	var events struct {
		Items []json.RawMessage `json:"items"`
	}
	f.do(t, "GET", "/api/dispatch/events", "").want(t, http.StatusOK).decode(t, &events)
	if len(events.Items) != 0 {
		t.Errorf("%d events stored, want none", len(events.Items))
	}
}

// A subscription's filter is checked as what it is: its problems are named
// under filter, and a filter no event could satisfy (more pairs than an
// event may carry, a key an event may not carry) is refused rather than
// leaving its subscription ACTIVE and silent, on create and on a patch.
func TestAFilterThatCouldMatchNoEventIsRefused(t *testing.T) {
	f := setup(t)
	pairs := make([]string, dispatch.MaxEventMetadata+1)
	for i := range pairs {
		pairs[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	long := strings.Repeat("x", dispatch.MaxMetadataValLen+1)
	for body, want := range map[string][]string{
		`{"k":"` + long + `"}`:                 {"filter.k"},
		`{"eventId":"1","subscriptionId":"2"}`: {"filter.eventId", "filter.subscriptionId"},
		`{` + strings.Join(pairs, ",") + `}`:   {"filter"},
		// too many pairs, and a bad one among them: both named at once
		`{` + strings.Join(pairs, ",") + `,"eventId":"1","k":"` + long + `"}`: {"filter", "filter.eventId", "filter.k"},
		`{"region":"eu","eventId":"1","n":"\u0000"}`:                          {"filter.eventId", "filter.n"},
	} {
		fields := f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"http://127.0.0.1:1/x","eventTypes":["*"],"filter":`+body+`}`).
			errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
		slices.Sort(fields)
		if !slices.Equal(fields, want) {
			t.Errorf("filter %.60s: fields %v, want %v", body, fields, want)
		}
	}
	var sub subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"http://127.0.0.1:1/x","eventTypes":["*"],"filter":{"region":"eu"}}`).
		want(t, http.StatusCreated).decode(t, &sub)
	fields := f.do(t, "PATCH", "/api/dispatch/subscriptions/"+sub.ID, `{"filter":{"subscriptionId":"7"}}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	if !slices.Equal(fields, []string{"filter.subscriptionId"}) {
		t.Errorf("patch: fields %v, want [filter.subscriptionId]", fields)
	}
	var got subscriptionOut
	f.do(t, "GET", "/api/dispatch/subscriptions/"+sub.ID, "").want(t, http.StatusOK).decode(t, &got)
	if !maps.Equal(got.Filter, map[string]string{"region": "eu"}) {
		t.Errorf("after a refused patch the filter is %v, want it unchanged", got.Filter)
	}
}

// A job an event made has the idempotency key <eventId>:<subscriptionId>,
// held as a create's key is: a create naming it is answered with that job
// (200) and makes no second delivery.
func TestAFanOutJobsKeyIsHeldAsACreatesIs(t *testing.T) {
	f := setup(t)
	var sub subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"all","url":"http://127.0.0.1:1/x","eventTypes":["*"]}`).
		want(t, http.StatusCreated).decode(t, &sub)
	var e eventOut
	f.do(t, "POST", "/api/dispatch/events", `{"source":"s","type":"order.created","data":{}}`).want(t, http.StatusCreated).decode(t, &e)
	if len(e.Jobs) != 1 {
		t.Fatalf("the event made %d jobs, want 1", len(e.Jobs))
	}
	key := e.ID + ":" + sub.ID
	var job struct {
		ID             string `json:"id"`
		IdempotencyKey string `json:"idempotencyKey"`
	}
	f.do(t, "POST", "/api/dispatch/jobs", `{"source":"s","type":"t","targetUrl":"http://127.0.0.1:1/x","payload":"{}","idempotencyKey":"`+key+`"}`).
		want(t, http.StatusOK).decode(t, &job)
	if job.ID != e.Jobs[0].ID || job.IdempotencyKey != key {
		t.Errorf("a create with the key %s answered job %s (key %q), want the event's job %s", key, job.ID, job.IdempotencyKey, e.Jobs[0].ID)
	}
}

// setupVerifying serves the API with the real verification handshake.
func setupVerifying(t *testing.T) *fixture {
	t.Helper()
	var f *fixture
	f = setup(t, withVerifier(func() *mediator.Verifier {
		sender := mediator.NewSender(mediator.SenderConfig{Timeout: 10 * time.Second, Guard: mediator.Guard{AllowPrivate: true}})
		return mediator.NewVerifier(f.store, sender, slog.New(slog.DiscardHandler))
	}))
	return f
}

// handshakeReceiver is an endpoint whose answer to the handshake the test
// switches: it echoes the challenge while echo is set, and when hold is
// set it first reports the request on arrived and waits for release.
type handshakeReceiver struct {
	URL        string
	echo, hold atomic.Bool
	handshakes atomic.Int32
	arrived    chan struct{}
	release    chan struct{}
}

func newHandshakeReceiver(t *testing.T) *handshakeReceiver {
	t.Helper()
	rc := &handshakeReceiver{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		_ = json.NewDecoder(r.Body).Decode(&m)
		if m["type"] == dispatch.VerificationType {
			rc.handshakes.Add(1)
			if rc.hold.Load() {
				rc.arrived <- struct{}{}
				<-rc.release
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if rc.echo.Load() {
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": m["challenge"]})
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-rc.release:
		default:
			close(rc.release)
		}
	})
	rc.URL = srv.URL
	return rc
}

// reaches publishes an order.created event and reports whether it made a
// job for the subscription.
func (f *fixture) reaches(t *testing.T, subID string) bool {
	t.Helper()
	var e eventOut
	f.do(t, "POST", "/api/dispatch/events", `{"source":"shop","type":"order.created","data":{}}`).want(t, http.StatusCreated).decode(t, &e)
	for _, j := range e.Jobs {
		if j.SubscriptionID == subID {
			return true
		}
	}
	return false
}

// TestEnableDoesNotSkipTheHandshake: a subscription created to be verified
// that failed its handshake does not become ACTIVE by disable and enable:
// enable runs the handshake, and only a passing one makes it ACTIVE.
func TestEnableDoesNotSkipTheHandshake(t *testing.T) {
	f := setupVerifying(t)
	rc := newHandshakeReceiver(t)
	var sub subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"`+rc.URL+`/hook","eventTypes":["order.*"],"verify":true}`).
		want(t, http.StatusCreated).decode(t, &sub)
	if sub.Status != "PENDING_VERIFICATION" || !sub.VerifyRequired || sub.VerifiedURL != "" {
		t.Fatalf("created against a silent endpoint: %+v", sub)
	}
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/enable", "").errorCode(t, http.StatusConflict, dispatch.EConflict)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/disable", "").want(t, http.StatusOK).decode(t, &sub)
	if sub.Status != "DISABLED" {
		t.Fatalf("disabled: %+v", sub)
	}
	// Enable runs the handshake; the endpoint still does not echo.
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/enable", "").want(t, http.StatusOK).decode(t, &sub)
	if sub.Status != "PENDING_VERIFICATION" || !strings.Contains(sub.DisabledReason, "challenge") {
		t.Fatalf("enable of an unverified subscription: %s (%q), want PENDING_VERIFICATION with the handshake's reason", sub.Status, sub.DisabledReason)
	}
	if f.reaches(t, sub.ID) {
		t.Fatalf("an event reached a subscription whose url never passed the handshake")
	}
	if n := rc.handshakes.Load(); n != 2 {
		t.Errorf("%d handshakes, want 2 (create and enable)", n)
	}
	// The endpoint learns to answer: disable and enable make it ACTIVE.
	rc.echo.Store(true)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/disable", "").want(t, http.StatusOK)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/enable", "").want(t, http.StatusOK).decode(t, &sub)
	if sub.Status != "ACTIVE" || sub.VerifiedURL != rc.URL+"/hook" {
		t.Fatalf("enable after the endpoint echoes: %+v", sub)
	}
	if !f.reaches(t, sub.ID) {
		t.Fatalf("no job for the verified subscription")
	}
	// Its url passed: disable and enable need no handshake now.
	rc.echo.Store(false)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/disable", "").want(t, http.StatusOK)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/enable", "").want(t, http.StatusOK).decode(t, &sub)
	if sub.Status != "ACTIVE" || rc.handshakes.Load() != 3 {
		t.Errorf("enable of a verified url: %s after %d handshakes, want ACTIVE after 3", sub.Status, rc.handshakes.Load())
	}
}

// TestVerifyLeavesADisabledSubscriptionDisabled: /verify of a DISABLED
// subscription is refused (409) without a handshake, whether its endpoint
// would pass or fail: it neither makes it ACTIVE nor turns the operator's
// disable into "waiting for verification". Its /enable still runs the
// handshake when its url has not passed one.
func TestVerifyLeavesADisabledSubscriptionDisabled(t *testing.T) {
	f := setupVerifying(t)
	rc := newHandshakeReceiver(t)
	rc.echo.Store(true)
	var verified, plain subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"v","url":"`+rc.URL+`/v","eventTypes":["order.*"],"verify":true}`).
		want(t, http.StatusCreated).decode(t, &verified)
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"p","url":"`+rc.URL+`/p","eventTypes":["order.*"]}`).
		want(t, http.StatusCreated).decode(t, &plain)
	if verified.Status != "ACTIVE" || plain.Status != "ACTIVE" {
		t.Fatalf("created %+v and %+v", verified, plain)
	}
	before := rc.handshakes.Load()
	for _, sub := range []subscriptionOut{verified, plain} {
		f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/disable", "").want(t, http.StatusOK)
		for _, echo := range []bool{true, false} { // an endpoint that would pass, then one that would fail
			rc.echo.Store(echo)
			f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/verify", "").errorCode(t, http.StatusConflict, dispatch.EConflict)
			var got subscriptionOut
			f.do(t, "GET", "/api/dispatch/subscriptions/"+sub.ID, "").want(t, http.StatusOK).decode(t, &got)
			if got.Status != "DISABLED" || got.DisabledReason != "disabled by request" || got.VerifiedURL != sub.VerifiedURL {
				t.Errorf("%s after /verify (endpoint echoes: %v): %s (%q), verified %q; want DISABLED (%q) as the operator left it",
					sub.Name, echo, got.Status, got.DisabledReason, got.VerifiedURL, "disabled by request")
			}
			if f.reaches(t, sub.ID) {
				t.Errorf("%s: an event reached a DISABLED subscription after /verify", sub.Name)
			}
		}
	}
	if n := rc.handshakes.Load() - before; n != 0 {
		t.Errorf("/verify of DISABLED subscriptions sent %d handshakes, want none", n)
	}
	// The url changes while it is disabled: /enable runs the handshake.
	rc.echo.Store(true)
	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+verified.ID, `{"url":"`+rc.URL+`/v2"}`).want(t, http.StatusOK)
	f.do(t, "POST", "/api/dispatch/subscriptions/"+verified.ID+"/enable", "").want(t, http.StatusOK).decode(t, &verified)
	if verified.Status != "ACTIVE" || verified.VerifiedURL != rc.URL+"/v2" || rc.handshakes.Load()-before != 1 {
		t.Errorf("enable after a url change: %+v after %d handshakes, want ACTIVE on the new url after 1", verified, rc.handshakes.Load()-before)
	}
}

// TestURLChangeDuringHandshakeDoesNotActivateTheNewURL: a handshake that
// passed on the old url while a PATCH moved the subscription to a new one
// does not make the new url ACTIVE.
func TestURLChangeDuringHandshakeDoesNotActivateTheNewURL(t *testing.T) {
	f := setupVerifying(t)
	old, other := newHandshakeReceiver(t), newHandshakeReceiver(t)
	other.echo.Store(true) // would pass, had it been asked
	var sub subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"`+old.URL+`/hook","eventTypes":["order.*"],"verify":true}`).
		want(t, http.StatusCreated).decode(t, &sub)
	if sub.Status != "PENDING_VERIFICATION" {
		t.Fatalf("created against a silent endpoint: %+v", sub)
	}

	// /verify: the old endpoint holds the handshake until the PATCH is done,
	// then passes it.
	old.echo.Store(true)
	old.hold.Store(true)
	type answer struct {
		status int
		body   subscriptionOut
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		req, _ := http.NewRequestWithContext(context.Background(), "POST", f.url+"/api/dispatch/subscriptions/"+sub.ID+"/verify", nil)
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		a.status, a.err = resp.StatusCode, json.NewDecoder(resp.Body).Decode(&a.body)
		done <- a
	}()
	select {
	case <-old.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the handshake never reached the old endpoint")
	}
	var patched subscriptionOut
	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+sub.ID, `{"url":"`+other.URL+`/new"}`).want(t, http.StatusOK).decode(t, &patched)
	if patched.Status != "PENDING_VERIFICATION" || patched.DisabledReason != dispatch.ReasonURLChanged {
		t.Errorf("the PATCH answered %s (%q), want PENDING_VERIFICATION (%q)", patched.Status, patched.DisabledReason, dispatch.ReasonURLChanged)
	}
	close(old.release)
	var a answer
	select {
	case a = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("/verify did not answer")
	}
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("/verify: %d %v", a.status, a.err)
	}
	if a.body.Status == "ACTIVE" {
		t.Errorf("/verify answered ACTIVE for %s, a url no handshake reached", a.body.URL)
	}
	var got subscriptionOut
	f.do(t, "GET", "/api/dispatch/subscriptions/"+sub.ID, "").want(t, http.StatusOK).decode(t, &got)
	if got.URL != other.URL+"/new" || got.Status != "PENDING_VERIFICATION" || got.VerifiedURL == got.URL {
		t.Fatalf("after the handshake of the old url: %+v, want the new url PENDING_VERIFICATION", got)
	}
	if f.reaches(t, sub.ID) {
		t.Errorf("an event reached the new url, which no handshake verified")
	}
	if n := other.handshakes.Load(); n != 0 {
		t.Errorf("the new endpoint got %d handshakes, want none yet", n)
	}
	// The new url's own handshake makes it ACTIVE.
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/verify", "").want(t, http.StatusOK).decode(t, &got)
	if got.Status != "ACTIVE" || got.VerifiedURL != other.URL+"/new" {
		t.Fatalf("verify of the new url: %+v", got)
	}
}

// TestURLChangeOfVerifiedSubscriptionWaitsForItsHandshake: a PATCH of the
// url of an ACTIVE subscription created to be verified makes it
// PENDING_VERIFICATION; events stop reaching it until the new url passes.
// A subscription created without verification keeps its status.
func TestURLChangeOfVerifiedSubscriptionWaitsForItsHandshake(t *testing.T) {
	f := setupVerifying(t)
	rc := newHandshakeReceiver(t)
	rc.echo.Store(true)
	var sub, plain subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"`+rc.URL+`/a","eventTypes":["order.*"],"verify":true}`).
		want(t, http.StatusCreated).decode(t, &sub)
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"plain","url":"`+rc.URL+`/p","eventTypes":["order.*"]}`).
		want(t, http.StatusCreated).decode(t, &plain)
	if sub.Status != "ACTIVE" || !sub.VerifyRequired || sub.VerifiedURL != rc.URL+"/a" || plain.VerifyRequired {
		t.Fatalf("created %+v and %+v", sub, plain)
	}
	if !f.reaches(t, sub.ID) {
		t.Fatalf("no job for the verified subscription")
	}
	// A change that keeps the url keeps it ACTIVE.
	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+sub.ID, `{"name":"renamed","url":"`+rc.URL+`/a"}`).want(t, http.StatusOK).decode(t, &sub)
	if sub.Status != "ACTIVE" {
		t.Fatalf("a rename made it %s", sub.Status)
	}

	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+sub.ID, `{"url":"`+rc.URL+`/b"}`).want(t, http.StatusOK).decode(t, &sub)
	if sub.Status != "PENDING_VERIFICATION" || sub.DisabledReason != dispatch.ReasonURLChanged || sub.VerifiedURL != rc.URL+"/a" {
		t.Fatalf("after a url change: %+v, want PENDING_VERIFICATION (%q)", sub, dispatch.ReasonURLChanged)
	}
	f.do(t, "PATCH", "/api/dispatch/subscriptions/"+plain.ID, `{"url":"`+rc.URL+`/q"}`).want(t, http.StatusOK).decode(t, &plain)
	if plain.Status != "ACTIVE" {
		t.Errorf("a url change of a subscription created without verification made it %s", plain.Status)
	}
	if f.reaches(t, sub.ID) {
		t.Fatalf("an event reached the new url before its handshake")
	}
	f.do(t, "POST", "/api/dispatch/subscriptions/"+sub.ID+"/verify", "").want(t, http.StatusOK).decode(t, &sub)
	if sub.Status != "ACTIVE" || sub.VerifiedURL != rc.URL+"/b" {
		t.Fatalf("verify of the new url: %+v", sub)
	}
	if !f.reaches(t, sub.ID) {
		t.Errorf("no job for the subscription once its new url passed")
	}
}

// A subscription created with a handshake that cannot run (here: no
// verifier in the process) is stored, so it is answered 201 as it is
// stored, PENDING_VERIFICATION: an error would make the client's retry a
// second subscription.
func TestSubscriptionWhoseHandshakeCannotRunIsAnsweredAsStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var sub subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"https://hooks.example.com/in","eventTypes":["*"],"verify":true}`).
		want(t, http.StatusCreated).decode(t, &sub)
	if sub.Status != "PENDING_VERIFICATION" {
		t.Errorf("status %s, want PENDING_VERIFICATION", sub.Status)
	}
	if n := f.count(t, "dispatch_subscription"); n != 1 {
		t.Errorf("%d subscriptions stored, want 1", n)
	}
}

// The subscriptions read page by page with nextBefore while one is made
// meanwhile: no subscription comes twice and none is skipped, as it would
// by offset (page 1 would start with page 0's last).
func TestSubscriptionsReadPageByPageWhileOneIsMadeNeitherRepeatNorSkip(t *testing.T) {
	f := setup(t)
	create := func(name string) string {
		var sub subscriptionOut
		f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"`+name+`","url":"http://127.0.0.1:1/x","eventTypes":["*"]}`).
			want(t, http.StatusCreated).decode(t, &sub)
		return sub.ID
	}
	var made []string // oldest first
	for _, n := range []string{"a", "b", "c", "d"} {
		made = append(made, create(n))
	}
	type page struct {
		Items      []subscriptionOut `json:"items"`
		NextBefore string            `json:"nextBefore"`
	}
	var first page
	f.do(t, "GET", "/api/dispatch/subscriptions?size=2", "").want(t, http.StatusOK).decode(t, &first)
	if first.NextBefore == "" {
		t.Fatalf("a full page without nextBefore: %+v", first)
	}
	create("e") // newer than all: it belongs before page 0
	var second page
	f.do(t, "GET", "/api/dispatch/subscriptions?size=2&before="+first.NextBefore, "").want(t, http.StatusOK).decode(t, &second)
	var got []string
	for _, s := range slices.Concat(first.Items, second.Items) {
		got = append(got, s.ID)
	}
	want := []string{made[3], made[2], made[1], made[0]}
	if !slices.Equal(got, want) {
		t.Errorf("two pages read by nextBefore: %v, want %v (newest first, each once)", got, want)
	}
	if fields := f.do(t, "GET", "/api/dispatch/subscriptions?before=x", "").errorCode(t, http.StatusBadRequest, dispatch.EInvalid); !slices.Equal(fields, []string{"before"}) {
		t.Errorf("before=x: fields %v, want [before]", fields)
	}
}
