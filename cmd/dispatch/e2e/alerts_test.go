package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/webhook"
)

type alertBody struct {
	Type    string `json:"type"`
	Summary string `json:"summary"`
	Count   int    `json:"count"`
	Events  []struct {
		Subject string `json:"subject"`
		Detail  string `json:"detail"`
	} `json:"events"`
}

type alertJobs struct {
	TotalItems int `json:"totalItems"`
	Items      []struct {
		ID     string `json:"id"`
		Type   string `json:"type"`
		Status string `json:"status"`
	} `json:"items"`
}

// alertDestination adds an alert destination and returns its id.
func (in *instance) alertDestination(body map[string]any) string {
	in.t.Helper()
	var d struct {
		ID string `json:"id"`
	}
	if code := in.do("POST", "/api/admin/dispatch/alerts/destinations", adminToken, body, &d); code != http.StatusCreated {
		in.t.Fatalf("create alert destination %v: status %d", body, code)
	}
	return d.ID
}

// alertJobs lists the alert jobs (source dispatch.alerts) of type typ.
func (in *instance) alertJobs(typ string) alertJobs {
	in.t.Helper()
	var page alertJobs
	if code := in.do("GET", "/api/dispatch/jobs?source=dispatch.alerts&type="+typ, apiToken, nil, &page); code != http.StatusOK {
		in.t.Fatalf("list alert jobs: status %d", code)
	}
	return page
}

// bodiesOfType decodes the webhook alerts rc received of type typ.
func bodiesOfType(t *testing.T, rc *receiver, typ string) []alertBody {
	t.Helper()
	var out []alertBody
	for _, r := range rc.snapshot() {
		var b alertBody
		if err := json.Unmarshal([]byte(r.body), &b); err != nil {
			t.Fatalf("alert body %q: %v", r.body, err)
		}
		if b.Type == typ {
			out = append(out, b)
		}
	}
	return out
}

// slackTexts returns the texts of the Slack messages rc received.
func slackTexts(t *testing.T, rc *receiver) []string {
	t.Helper()
	var out []string
	for _, r := range rc.snapshot() {
		var b map[string]any
		if err := json.Unmarshal([]byte(r.body), &b); err != nil {
			t.Fatalf("slack body %q: %v", r.body, err)
		}
		text, ok := b["text"].(string)
		if len(b) != 1 || !ok {
			t.Fatalf("slack body %q is not {\"text\": ...}", r.body)
		}
		out = append(out, text)
	}
	return out
}

func TestDisabledSubscriptionAlertsEachDestinationOnce(t *testing.T) {
	t.Parallel()
	otlp := newOTLPReceiver(t) // a Slack URL is a secret: no span may carry it
	in := start(t, "all", map[string]string{"DISPATCH_SUBSCRIPTION_DISABLE_AFTER": "1s", "DISPATCH_REQUEUE_AFTER": "4s",
		"DISPATCH_ALERT_WINDOW": "2s", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL})
	hook, slack := newReceiver(t, nil), newReceiver(t, nil)
	const secret = "alert-signing-secret-0123456789"
	in.alertDestination(map[string]any{"name": "ops webhook", "kind": "webhook", "url": hook.URL,
		"credentialsId": in.credentials(secret, hook.URL)})
	in.alertDestination(map[string]any{"name": "ops slack", "kind": "slack", "url": slack.URL + "/services/T0/B0/x"})

	gone := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusGone })
	sub := in.subscribe(map[string]any{"name": "gone-away", "url": gone.URL + "/hook?token=secret-in-query", "eventTypes": []string{"*"}})
	e := in.publish(map[string]any{"source": "s", "type": "ping", "data": 1}, http.StatusCreated)
	in.waitEventDone(e.ID, 20*time.Second)

	eventually(t, 30*time.Second, func() bool {
		return len(bodiesOfType(t, hook, "subscription.disabled")) > 0 && slack.count() > 0
	}, func() string {
		return fmt.Sprintf("webhook got %d, slack %d alerts; alert jobs %+v", hook.count(), slack.count(), in.alertJobs("subscription.disabled"))
	})
	// The Slack delivery's span names its host, not its secret path.
	eventually(t, 30*time.Second, func() bool { return len(otlp.withAttr("url.full", slack.URL+"/…")) > 0 },
		func() string { return "no span of the Slack alert's delivery" })
	if leaks := otlp.withAttrContaining("/services/T0/B0/x"); len(leaks) > 0 {
		t.Errorf("%d spans carry the Slack URL's secret path", len(leaks))
	}
	// Signed with the destination's credentials, and saying which.
	got := hook.snapshot()[0]
	if err := (webhook.Verifier{Secrets: []string{secret}}).Verify(got.header, []byte(got.body)); err != nil {
		t.Errorf("the webhook alert is not signed with its credentials: %v", err)
	}
	b := bodiesOfType(t, hook, "subscription.disabled")[0]
	if b.Count != 1 || len(b.Events) != 1 || !strings.Contains(b.Events[0].Subject, "gone-away") ||
		!strings.Contains(b.Events[0].Detail, "failed") || !strings.Contains(b.Summary, "subscription disabled") {
		t.Errorf("webhook alert %+v", b)
	}
	if texts := slackTexts(t, slack); !strings.Contains(texts[0], "1 subscription disabled") || !strings.Contains(texts[0], "gone-away") ||
		!strings.Contains(texts[0], gone.URL+"/hook") || strings.Contains(texts[0], "secret-in-query") {
		t.Errorf("slack text %q: want the subscription named, its url without the query", texts[0])
	}

	// Enabled again: that alert comes after, and by then the disable was
	// still sent once to each destination.
	var s subscriptionJSON
	if code := in.do("POST", "/api/dispatch/subscriptions/"+sub.ID+"/enable", apiToken, nil, &s); code != http.StatusOK {
		t.Fatalf("enable: %d", code)
	}
	eventually(t, 30*time.Second, func() bool {
		return len(bodiesOfType(t, hook, "subscription.enabled")) == 1 && slack.count() == 2
	}, func() string { return fmt.Sprintf("webhook got %d, slack %d alerts", hook.count(), slack.count()) })
	if n := len(bodiesOfType(t, hook, "subscription.disabled")); n != 1 {
		t.Errorf("the webhook got %d subscription.disabled alerts, want 1", n)
	}
	if hook.count() != 2 {
		t.Errorf("the webhook got %d alerts, want 2", hook.count())
	}
	// Each alert is an ordinary job, recorded like any.
	jobs := in.alertJobs("subscription.disabled")
	if jobs.TotalItems != 2 {
		t.Errorf("%d subscription.disabled alert jobs, want one per destination: %+v", jobs.TotalItems, jobs)
	}
	for _, j := range jobs.Items {
		in.waitStatus(j.ID, 10*time.Second, "COMPLETED")
	}
}

func TestAStormOfDisablesIsOneAlertAndOneSummary(t *testing.T) {
	t.Parallel()
	// The window outlasts the 49 disables below.
	in := start(t, "all", map[string]string{"DISPATCH_ALERT_WINDOW": "10s"})
	hook := newReceiver(t, nil)
	in.alertDestination(map[string]any{"name": "ops", "kind": "webhook", "url": hook.URL,
		"credentialsId": in.credentials("storm-signing-secret-0123456789", hook.URL)})
	target := newReceiver(t, nil)
	subs := make([]string, 50)
	for i := range subs {
		subs[i] = in.subscribe(map[string]any{"name": fmt.Sprintf("sub-%02d", i), "url": target.URL, "eventTypes": []string{"*"}}).ID
	}
	disable := func(id string) {
		t.Helper()
		if code := in.do("POST", "/api/dispatch/subscriptions/"+id+"/disable", apiToken, nil, nil); code != http.StatusOK {
			t.Fatalf("disable %s: %d", id, code)
		}
	}
	disable(subs[0])
	eventually(t, 20*time.Second, func() bool { return hook.count() == 1 },
		func() string { return fmt.Sprintf("webhook got %d alerts", hook.count()) })
	// The storm lasts a few of the alerts' 1s ticks (a disable every 50ms),
	// all inside the window: only the window holds the alerts back.
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	for _, id := range subs[1:] {
		<-pace.C
		disable(id)
	}
	eventually(t, 30*time.Second, func() bool { return hook.count() >= 2 },
		func() string { return fmt.Sprintf("webhook got %d alerts", hook.count()) })
	got := bodiesOfType(t, hook, "subscription.disabled")
	if len(got) != 2 || got[0].Count != 1 || got[1].Count != 49 {
		t.Fatalf("alerts %+v, want one of 1 and a summary of 49", got)
	}
	if !strings.Contains(got[1].Summary, "49 subscriptions disabled since") || len(got[1].Events) != 10 {
		t.Errorf("summary %q with %d events listed", got[1].Summary, len(got[1].Events))
	}
	// All 50 are covered by the two: no further alert job exists.
	if jobs := in.alertJobs("subscription.disabled"); jobs.TotalItems != 2 {
		t.Errorf("%d alert jobs, want 2", jobs.TotalItems)
	}
}

func TestAlertDestinationsAreAdminsAndValidated(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, nil)
	const path = "/api/admin/dispatch/alerts/destinations"
	if code := in.do("GET", path, apiToken, nil, nil); code != http.StatusForbidden && code != http.StatusUnauthorized {
		t.Errorf("list with the API token: %d", code)
	}
	for _, body := range []map[string]any{
		{"name": "x", "kind": "webhook", "url": rc.URL},                           // unsigned webhook
		{"name": "x", "kind": "slack", "url": rc.URL, "credentialsId": "1"},       // slack with credentials
		{"name": "x", "kind": "email", "url": rc.URL},                             // unknown kind
		{"name": "x", "kind": "slack", "url": "ftp://example.com/"},               // not http(s)
		{"name": "x", "kind": "webhook", "url": rc.URL, "credentialsId": "12345"}, // no such credentials
	} {
		if code := in.do("POST", path, adminToken, body, nil); code != http.StatusBadRequest {
			t.Errorf("create %v: %d, want 400", body, code)
		}
	}
	// Credentials that may not be sent to the url: refused as for a job.
	elsewhere := in.credentials("other-signing-secret-0123456789", "https://elsewhere.example/")
	if code := in.do("POST", path, adminToken, map[string]any{"name": "x", "kind": "webhook", "url": rc.URL, "credentialsId": elsewhere}, nil); code != http.StatusUnprocessableEntity {
		t.Errorf("create with credentials not allowed to the url: %d, want 422", code)
	}
	id := in.alertDestination(map[string]any{"name": "chat", "kind": "slack", "url": rc.URL})
	var list struct {
		Items []struct{ ID, Name, Kind, URL string } `json:"items"`
	}
	if code := in.do("GET", path, adminToken, nil, &list); code != http.StatusOK || len(list.Items) != 1 || list.Items[0].ID != id ||
		list.Items[0].Kind != "slack" || list.Items[0].URL != rc.URL {
		t.Errorf("list: %d %+v", code, list)
	}
	if code := in.do("DELETE", path+"/"+id, adminToken, nil, nil); code != http.StatusNoContent {
		t.Errorf("delete: %d", code)
	}
	if code := in.do("DELETE", path+"/"+id, adminToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("delete again: %d", code)
	}
}

func TestFailingTargetAlertsItsBreakerAndExhaustedRetries(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_BREAKER_FAILURES": "2", "DISPATCH_BREAKER_OPEN": "1m",
		"DISPATCH_ALERT_EXHAUSTED_THRESHOLD": "2", "DISPATCH_ALERT_WINDOW": "1s"})
	slack := newReceiver(t, nil)
	in.alertDestination(map[string]any{"name": "chat", "kind": "slack", "url": slack.URL})
	down := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusServiceUnavailable })
	for range 2 {
		j := in.createJob(jobBody(down.URL, map[string]any{"maxRetries": 1}))
		in.waitStatus(j.ID, 20*time.Second, "ERROR")
	}
	host := strings.TrimPrefix(down.URL, "http://")
	eventually(t, 30*time.Second, func() bool {
		var opened, exhausted bool
		for _, text := range slackTexts(t, slack) {
			opened = opened || strings.Contains(text, "circuit breaker opened") && strings.Contains(text, host)
			exhausted = exhausted || strings.Contains(text, "exhausting retries") && strings.Contains(text, "order-service / order.created")
		}
		return opened && exhausted
	}, func() string { return fmt.Sprintf("slack got %q", slackTexts(t, slack)) })
}
