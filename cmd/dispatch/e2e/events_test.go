package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/app"
	"github.com/dispatchhq/dispatch/webhook"
)

type eventJSON struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Jobs []struct {
		ID             string `json:"id"`
		SubscriptionID string `json:"subscriptionId"`
		Status         string `json:"status"`
	} `json:"jobs"`
}

type subscriptionJSON struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	DisabledReason string `json:"disabledReason"`
}

type listJSON struct {
	TotalItems int `json:"totalItems"`
}

// credentials creates credentials with secret that may be sent to targets.
func (in *instance) credentials(secret string, targets ...string) string {
	in.t.Helper()
	var cred struct {
		ID string `json:"id"`
	}
	body := map[string]any{"signingSecret": secret, "allowedTargets": targets}
	if code := in.do("POST", "/api/admin/dispatch/credentials", adminToken, body, &cred); code != http.StatusCreated {
		in.t.Fatalf("create credentials: %d", code)
	}
	return cred.ID
}

func (in *instance) subscribe(body map[string]any) subscriptionJSON {
	in.t.Helper()
	var s subscriptionJSON
	if code := in.do("POST", "/api/dispatch/subscriptions", apiToken, body, &s); code != http.StatusCreated {
		in.t.Fatalf("create subscription %v: status %d", body, code)
	}
	return s
}

func (in *instance) publish(body map[string]any, wantCode int) eventJSON {
	in.t.Helper()
	var e eventJSON
	if code := in.do("POST", "/api/dispatch/events", apiToken, body, &e); code != wantCode {
		in.t.Fatalf("publish %v: status %d, want %d", body, code, wantCode)
	}
	return e
}

// waitEventDone waits until every job of the event is finished.
func (in *instance) waitEventDone(id string, timeout time.Duration) eventJSON {
	in.t.Helper()
	var e eventJSON
	eventually(in.t, timeout, func() bool {
		e = eventJSON{}
		in.do("GET", "/api/dispatch/events/"+id, apiToken, nil, &e)
		for _, j := range e.Jobs {
			if j.Status != "COMPLETED" && j.Status != "ERROR" {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("event %s jobs %+v; pools %s", id, e.Jobs, in.pools()) })
	return e
}

func TestEventReachesEachMatchingSubscriptionSignedWithItsOwnCredentials(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	exact, prefix, other := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	secrets := map[*receiver]string{exact: "whsec_exact_subscriber_secret", prefix: "whsec_prefix_subscriber_secret"}
	subs := map[*receiver]subscriptionJSON{
		exact: in.subscribe(map[string]any{"name": "exact", "url": exact.URL, "eventTypes": []string{"order.created"},
			"credentialsId": in.credentials(secrets[exact], exact.URL)}),
		prefix: in.subscribe(map[string]any{"name": "prefix", "url": prefix.URL + "/hooks", "eventTypes": []string{"order.*"},
			"credentialsId": in.credentials(secrets[prefix], prefix.URL+"/hooks"), "headers": map[string]string{"X-Team": "billing"}}),
		other: in.subscribe(map[string]any{"name": "invoices", "url": other.URL, "eventTypes": []string{"invoice.*"}}),
	}
	const data = `{"orderId":"o-1","amount":42}`
	ev := map[string]any{"source": "shop", "type": "order.created", "data": json.RawMessage(data),
		"metadata": map[string]string{"tenant": "acme"}, "idempotencyKey": "order-o-1-created"}
	e := in.publish(ev, http.StatusCreated)
	if len(e.Jobs) != 2 {
		t.Fatalf("event made %d jobs, want 2: %+v", len(e.Jobs), e.Jobs)
	}
	done := in.waitEventDone(e.ID, 30*time.Second)
	for _, j := range done.Jobs {
		if j.Status != "COMPLETED" {
			t.Errorf("job %s for subscription %s is %s", j.ID, j.SubscriptionID, j.Status)
		}
	}
	for rc, secret := range secrets {
		reqs := rc.snapshot()
		if len(reqs) != 1 {
			t.Fatalf("subscriber got %d deliveries, want 1", len(reqs))
		}
		r := reqs[0]
		if err := (webhook.Verifier{Secrets: []string{secret}}).Verify(r.header, []byte(r.body)); err != nil {
			t.Errorf("delivery not signed with its subscription's secret: %v", err)
		}
		for _, otherSecret := range secrets {
			if otherSecret != secret && (webhook.Verifier{Secrets: []string{otherSecret}}).Verify(r.header, []byte(r.body)) == nil {
				t.Errorf("delivery verifies with another subscription's secret")
			}
		}
		for k, want := range map[string]string{"X-Dispatch-Event-Id": e.ID, "X-Dispatch-Event-Type": "order.created",
			"Content-Type": "application/json"} {
			if got := r.header.Get(k); got != want {
				t.Errorf("header %s = %q, want %q", k, got, want)
			}
		}
		if r.body != data {
			t.Errorf("body %q, want the event's data %q", r.body, data)
		}
	}
	if got := prefix.snapshot()[0].header.Get("X-Team"); got != "billing" {
		t.Errorf("subscription header X-Team = %q", got)
	}
	if other.count() != 0 {
		t.Errorf("the invoice.* subscriber got %d deliveries", other.count())
	}
	// A job of an event is a job: searchable by the event id.
	var found listJSON
	in.do("GET", "/api/dispatch/jobs?metadata.eventId="+e.ID+"&metadata.tenant=acme", apiToken, nil, &found)
	if found.TotalItems != 2 {
		t.Errorf("job search by eventId found %d, want 2", found.TotalItems)
	}
	j := in.job(done.Jobs[0].ID)
	if j.Metadata["subscriptionId"] != done.Jobs[0].SubscriptionID {
		t.Errorf("job metadata %v", j.Metadata)
	}

	// The same idempotency key: 200, the same event and jobs, nothing new.
	again := in.publish(ev, http.StatusOK)
	if again.ID != e.ID || len(again.Jobs) != 2 || again.Jobs[0].ID != done.Jobs[0].ID || again.Jobs[1].ID != done.Jobs[1].ID {
		t.Errorf("republish answered %+v, want event %s with jobs %+v", again, e.ID, done.Jobs)
	}
	in.do("GET", "/api/dispatch/jobs?metadata.eventId="+e.ID, apiToken, nil, &found)
	var events listJSON
	in.do("GET", "/api/dispatch/events?type=order.created", apiToken, nil, &events)
	if found.TotalItems != 2 || events.TotalItems != 1 {
		t.Errorf("after republish: %d jobs, %d events; want 2 and 1", found.TotalItems, events.TotalItems)
	}
	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "messages left on the queue" })
	if exact.count() != 1 || prefix.count() != 1 {
		t.Errorf("after republish the subscribers got %d and %d deliveries, want 1 each", exact.count(), prefix.count())
	}
	_ = subs
}

func TestEventsOfOneKeyArriveInPublishOrderOthersNotHeldBack(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_POOLS": "DISPATCH-POOL:8", "DISPATCH_RETRY_BASE": "3s"})
	var (
		mu       sync.Mutex
		failed   bool
		arrivals []string // "<customer>:<seq>:<code>"
	)
	rc := newReceiver(t, func(_ int, _ *http.Request, body []byte) int {
		var d struct {
			CustomerID string `json:"customerId"`
			Seq        int    `json:"seq"`
		}
		_ = json.Unmarshal(body, &d)
		mu.Lock()
		defer mu.Unlock()
		code := http.StatusOK
		if d.CustomerID == "c-1" && d.Seq == 4 && !failed {
			failed, code = true, http.StatusInternalServerError
		}
		arrivals = append(arrivals, fmt.Sprintf("%s:%d:%d", d.CustomerID, d.Seq, code))
		return code
	})
	in.subscribe(map[string]any{"name": "ordered", "url": rc.URL, "eventTypes": []string{"order.*"}, "orderingKey": "/customerId"})
	var last string
	for i := range 20 {
		last = in.publish(map[string]any{"source": "shop", "type": "order.updated",
			"data": map[string]any{"customerId": "c-1", "seq": i}}, http.StatusCreated).ID
	}
	var others []string
	for i := range 5 {
		others = append(others, in.publish(map[string]any{"source": "shop", "type": "order.updated",
			"data": map[string]any{"customerId": "c-2", "seq": i}}, http.StatusCreated).ID)
	}
	in.waitEventDone(last, 60*time.Second)
	for _, id := range others {
		in.waitEventDone(id, 10*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	var c1 []string
	retryAt, lastOther := -1, -1
	for i, a := range arrivals {
		if strings.HasPrefix(a, "c-1:") {
			c1 = append(c1, a)
			if a == "c-1:4:200" {
				retryAt = i
			}
		} else {
			lastOther = i
		}
	}
	want := []string{"c-1:0:200", "c-1:1:200", "c-1:2:200", "c-1:3:200", "c-1:4:500"}
	for i := 4; i < 20; i++ {
		want = append(want, fmt.Sprintf("c-1:%d:200", i))
	}
	if strings.Join(c1, " ") != strings.Join(want, " ") {
		t.Errorf("customer c-1 arrivals:\n got %v\nwant %v", c1, want)
	}
	// c-2's events went on while c-1 waited 3s for its retry.
	if lastOther < 0 || lastOther > retryAt {
		t.Errorf("customer c-2 was held back behind c-1's failure: arrivals %v", arrivals)
	}
}

func TestSubscriptionRateLimitHoldsAcrossTheBurst(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_POOLS": "DISPATCH-POOL:16"})
	rc := newReceiver(t, nil)
	in.subscribe(map[string]any{"name": "paced", "url": rc.URL, "eventTypes": []string{"*"}, "rateLimitPerSecond": 5})
	var ids []string
	for i := range 20 {
		ids = append(ids, in.publish(map[string]any{"source": "shop", "type": "order.created", "data": i}, http.StatusCreated).ID)
	}
	var jobIDs []string
	for _, id := range ids {
		e := in.waitEventDone(id, 60*time.Second)
		for _, j := range e.Jobs {
			if j.Status != "COMPLETED" {
				t.Errorf("job %s is %s", j.ID, j.Status)
			}
			jobIDs = append(jobIDs, j.ID)
		}
	}
	reqs := rc.snapshot()
	if len(reqs) != 20 {
		t.Fatalf("receiver got %d requests, want 20", len(reqs))
	}
	at := make([]time.Time, len(reqs))
	for i, r := range reqs {
		at[i] = r.at
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	// No 6 requests inside any one second (a sliding window).
	for i := 0; i+5 < len(at); i++ {
		if gap := at[i+5].Sub(at[i]); gap < time.Second {
			t.Errorf("requests %d..%d came within %s: more than 5 in one second", i+1, i+6, gap)
		}
	}
	if total := at[len(at)-1].Sub(at[0]); total < 3*time.Second {
		t.Errorf("20 requests at 5/s took %s", total)
	}
	// Held back by the limit, a job spent no attempt.
	for _, id := range jobIDs {
		if j := in.job(id); j.AttemptCount != 1 {
			t.Errorf("job %s: %d attempts, want 1", id, j.AttemptCount)
		}
	}
}

func TestVerificationHandshake(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	const secret = "whsec_handshake_secret"
	var (
		mu       sync.Mutex
		echo     = map[string]bool{"/good": true}
		received []http.Header
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Type      string `json:"type"`
			Challenge string `json:"challenge"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		defer mu.Unlock()
		received = append(received, r.Header.Clone())
		if body.Type == "dispatch.verification" && echo[r.URL.Path] {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": body.Challenge})
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	cred := in.credentials(secret, srv.URL)
	good := in.subscribe(map[string]any{"name": "good", "url": srv.URL + "/good", "eventTypes": []string{"*"}, "verify": true, "credentialsId": cred})
	bad := in.subscribe(map[string]any{"name": "bad", "url": srv.URL + "/bad", "eventTypes": []string{"*"}, "verify": true, "credentialsId": cred})
	if good.Status != "ACTIVE" {
		t.Errorf("the endpoint that echoes the challenge is %s (%s)", good.Status, good.DisabledReason)
	}
	if bad.Status != "PENDING_VERIFICATION" || !strings.Contains(bad.DisabledReason, "challenge") {
		t.Errorf("the endpoint that does not echo is %s (%q)", bad.Status, bad.DisabledReason)
	}
	mu.Lock()
	for _, h := range received {
		if h.Get("X-FLOWCATALYST-SIGNATURE") == "" {
			t.Errorf("handshake request not signed: %v", h)
		}
	}
	mu.Unlock()
	// Events reach only the verified one; enable does not skip the handshake.
	e := in.publish(map[string]any{"source": "s", "type": "ping", "data": true}, http.StatusCreated)
	if len(e.Jobs) != 1 || e.Jobs[0].SubscriptionID != good.ID {
		t.Errorf("event jobs %+v, want one for %s", e.Jobs, good.ID)
	}
	if code := in.do("POST", "/api/dispatch/subscriptions/"+bad.ID+"/enable", apiToken, nil, nil); code != http.StatusConflict {
		t.Errorf("enable of an unverified subscription: %d, want 409", code)
	}
	// The endpoint learns to answer: /verify activates it.
	mu.Lock()
	echo["/bad"] = true
	mu.Unlock()
	var s subscriptionJSON
	if code := in.do("POST", "/api/dispatch/subscriptions/"+bad.ID+"/verify", apiToken, nil, &s); code != http.StatusOK || s.Status != "ACTIVE" {
		t.Errorf("verify after fixing: %d %+v", code, s)
	}
	// Disable and enable are one call each.
	if code := in.do("POST", "/api/dispatch/subscriptions/"+bad.ID+"/disable", apiToken, nil, &s); code != http.StatusOK || s.Status != "DISABLED" {
		t.Errorf("disable: %d %+v", code, s)
	}
	if code := in.do("POST", "/api/dispatch/subscriptions/"+bad.ID+"/enable", apiToken, nil, &s); code != http.StatusOK || s.Status != "ACTIVE" {
		t.Errorf("enable: %d %+v", code, s)
	}
}

func TestFailingSubscriptionIsDisabledAutomatically(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_SUBSCRIPTION_DISABLE_AFTER": "1s", "DISPATCH_REQUEUE_AFTER": "4s"})
	rc := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusGone })
	sub := in.subscribe(map[string]any{"name": "gone", "url": rc.URL, "eventTypes": []string{"*"}})
	e := in.publish(map[string]any{"source": "s", "type": "ping", "data": 1}, http.StatusCreated)
	in.waitEventDone(e.ID, 20*time.Second)
	var s subscriptionJSON
	eventually(t, 20*time.Second, func() bool {
		in.do("GET", "/api/dispatch/subscriptions/"+sub.ID, apiToken, nil, &s)
		return s.Status == "DISABLED"
	}, func() string { return fmt.Sprintf("subscription is %s", s.Status) })
	if !strings.Contains(s.DisabledReason, "failed") {
		t.Errorf("disabledReason %q", s.DisabledReason)
	}
	if e := in.publish(map[string]any{"source": "s", "type": "ping", "data": 2}, http.StatusCreated); len(e.Jobs) != 0 {
		t.Errorf("a disabled subscription got a job")
	}
	if code := in.do("POST", "/api/dispatch/subscriptions/"+sub.ID+"/enable", apiToken, nil, &s); code != http.StatusOK || s.Status != "ACTIVE" {
		t.Errorf("enable: %d %+v", code, s)
	}
}

func TestBadSubscriptionsAndEventsAreRefusedAndStoreNothing(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_ALLOW_PRIVATE_TARGETS": "false"})
	type errJSON struct {
		Error struct {
			Code    string `json:"code"`
			Details []struct {
				Field string `json:"field"`
			} `json:"details"`
		} `json:"error"`
	}
	check := func(path string, body any, fields ...string) {
		t.Helper()
		var e errJSON
		if code := in.do("POST", path, apiToken, body, &e); code != http.StatusBadRequest || e.Error.Code != "invalid_request" {
			t.Fatalf("POST %s: %d %+v, want 400 invalid_request", path, code, e)
		}
		got := map[string]bool{}
		for _, d := range e.Error.Details {
			got[d.Field] = true
		}
		for _, f := range fields {
			if !got[f] {
				t.Errorf("POST %s: field %s not named in %+v", path, f, e.Error.Details)
			}
		}
	}
	check("/api/dispatch/subscriptions", map[string]any{
		"url": "http://plain.example.com/hook", "eventTypes": []any{"order.created", "a*b", 3, ""},
		"maxRetries": 0, "retryStrategy": "sometimes", "orderingKey": "customerId", "rateLimitPerSecond": 0,
		"headers": map[string]string{"Authorization": "x", "X-Dispatch-Event-Id": "1"}, "filter": map[string]any{"tenant": 1},
		"colour": "red",
	}, "name", "url", "eventTypes[1]", "eventTypes[2]", "eventTypes[3]", "maxRetries", "retryStrategy", "orderingKey",
		"rateLimitPerSecond", "headers.Authorization", "headers.X-Dispatch-Event-Id", "filter.tenant", "colour")
	check("/api/dispatch/subscriptions", map[string]any{"name": "n", "url": "https://example.com", "eventTypes": []string{}}, "eventTypes")
	check("/api/dispatch/subscriptions", map[string]any{"name": "n", "url": "https://example.com", "eventTypes": []string{"*"},
		"credentialsId": "987654321"}, "credentialsId")
	check("/api/dispatch/events", map[string]any{"type": "order created", "metadata": map[string]string{"eventId": "x"},
		"idempotencyKey": strings.Repeat("k", 200), "extra": 1}, "source", "type", "data", "metadata.eventId", "idempotencyKey", "extra")

	// A valid subscription, then a PATCH with bad fields changes nothing.
	sub := in.subscribe(map[string]any{"name": "n", "url": "https://example.com/hook", "eventTypes": []string{"order.*"}})
	var e errJSON
	if code := in.do("PATCH", "/api/dispatch/subscriptions/"+sub.ID, apiToken, map[string]any{"name": nil, "url": "ftp://x", "maxRetries": 99}, &e); code != http.StatusBadRequest || len(e.Error.Details) != 3 {
		t.Errorf("bad PATCH: %d %+v", code, e)
	}
	var got struct {
		Name       string `json:"name"`
		URL        string `json:"url"`
		MaxRetries int    `json:"maxRetries"`
	}
	in.do("GET", "/api/dispatch/subscriptions/"+sub.ID, apiToken, nil, &got)
	if got.Name != "n" || got.URL != "https://example.com/hook" || got.MaxRetries != 5 {
		t.Errorf("a refused PATCH changed the subscription: %+v", got)
	}
	var subs, events listJSON
	in.do("GET", "/api/dispatch/subscriptions", apiToken, nil, &subs)
	in.do("GET", "/api/dispatch/events", apiToken, nil, &events)
	if subs.TotalItems != 1 || events.TotalItems != 0 {
		t.Errorf("after refused requests: %d subscriptions, %d events stored; want 1 and 0", subs.TotalItems, events.TotalItems)
	}
	// The same API tokens guard the new routes.
	for _, path := range []string{"/api/dispatch/subscriptions", "/api/dispatch/events"} {
		if code := in.do("POST", path, "", map[string]any{}, nil); code != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: %d", path, code)
		}
	}
}

// The README's events walk-through: two subscriptions with their own
// credentials, verified against `dispatch listen`, one event, two signed
// deliveries printed by the listener.
func TestEventsWalkThroughWithListen(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	var secrets [2]string
	var creds [2]string
	for i := range secrets {
		var c struct {
			ID            string `json:"id"`
			SigningSecret string `json:"signingSecret"`
		}
		if code := in.do("POST", "/api/admin/dispatch/credentials", adminToken, map[string]any{}, &c); code != http.StatusCreated {
			t.Fatalf("credentials: %d", code)
		}
		secrets[i], creds[i] = c.SigningSecret, c.ID
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"listen", "--addr", "127.0.0.1:0"}, []string{"DISPATCH_LISTEN_SECRET=" + secrets[0] + "," + secrets[1]}, out, io.Discard)
	}()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	eventually(t, 10*time.Second, func() bool {
		_, rest, ok := strings.Cut(out.String(), "listening on ")
		addr, _, _ = strings.Cut(rest, " ")
		return ok && addr != ""
	}, func() string { return "dispatch listen did not start: " + out.String() })
	for _, c := range creds {
		allowTargets(t, in, c, addr)
	}
	for i, name := range []string{"billing", "shipping"} {
		s := in.subscribe(map[string]any{"name": name, "url": addr + "/hooks/" + name, "eventTypes": []string{"order.*"},
			"credentialsId": creds[i], "verify": true})
		if s.Status != "ACTIVE" {
			t.Fatalf("subscription %s is %s (%s) after the handshake with dispatch listen", name, s.Status, s.DisabledReason)
		}
	}
	e := in.publish(map[string]any{"source": "shop", "type": "order.created", "data": map[string]any{"orderId": "12345"}}, http.StatusCreated)
	in.waitEventDone(e.ID, 30*time.Second)
	var deliveries []string
	for _, block := range strings.Split(out.String(), "--- #")[1:] {
		if strings.Contains(block, "X-Dispatch-Event-Id: "+e.ID) {
			deliveries = append(deliveries, block)
		}
	}
	if len(deliveries) != 2 {
		t.Fatalf("listen printed %d deliveries of the event, want 2:\n%s", len(deliveries), out.String())
	}
	for _, d := range deliveries {
		if !strings.Contains(d, "signature: valid") || !strings.Contains(d, `{"orderId":"12345"}`) {
			t.Errorf("delivery:\n%s", d)
		}
	}
}
