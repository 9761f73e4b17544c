package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
)

// handshakeReceiver answers the verification handshake on /hook (echoing
// the challenge) but not on /silent, and counts the deliveries to /hook.
func handshakeReceiver(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var delivered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/hook" && m["type"] == "dispatch.verification" {
			_ = json.NewEncoder(w).Encode(map[string]any{"challenge": m["challenge"]})
			return
		}
		if r.URL.Path == "/hook" {
			delivered.Add(1)
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &delivered
}

type consoleSub struct {
	ID                 string            `json:"id"`
	Status             string            `json:"status"`
	DisabledReason     string            `json:"disabledReason"`
	CredentialsID      string            `json:"credentialsId"`
	Filter             map[string]string `json:"filter"`
	Headers            map[string]string `json:"headers"`
	OrderingKey        string            `json:"orderingKey"`
	RateLimitPerSecond int               `json:"rateLimitPerSecond"`
}

// consoleEventsAndSubscriptions drives the Events and Subscriptions pages:
// create two subscriptions from the form (one passes the handshake, one
// does not), publish an event through the API, find it, see its job
// delivered and open the job; disable and enable, edit, verify, delete.
// rc is a handshakeReceiver that credentials credID may be sent to.
func consoleEventsAndSubscriptions(t *testing.T, in *instance, b *browser, credID string, rc *httptest.Server, delivered *atomic.Int64) {
	b.visit("#/subscriptions")
	b.waitFor("the empty subscriptions page", `document.querySelector('#subs-results .empty-title') !== null &&
		document.querySelector('#subs-results').innerText.includes('No subscriptions yet')`)
	// The toast of the last action fades within 4 s; wait so that it does
	// not cover the screenshots.
	b.waitFor("the last toast gone", `(() => { const t = document.getElementById('toast'); return !t || getComputedStyle(t).opacity === '0' })()`)
	b.shot("11-subscriptions-empty")

	// Create from the form, with every field, verifying the endpoint.
	create := func(name, url string) {
		t.Helper()
		b.do("open the form", chromedp.Click(chromedp.ID("new-subscription")))
		b.waitFor("the subscription form", `!!document.querySelector('#subscription-form') && document.querySelector('#sub-credentialsId').options.length === 2`)
		b.do("fill the form "+name,
			chromedp.SendKeys(chromedp.ID("sub-name"), name),
			chromedp.SendKeys(chromedp.ID("sub-url"), url),
			chromedp.SendKeys(chromedp.ID("sub-eventTypes"), "order.*, invoice.paid"),
			chromedp.SendKeys(chromedp.ID("sub-filter"), "region=eu"),
			chromedp.SetValue(chromedp.ID("sub-credentialsId"), credID),
			chromedp.SetValue(chromedp.ID("sub-maxRetries"), "3"),
			chromedp.SetValue(chromedp.ID("sub-retryStrategy"), "linear"),
			chromedp.SendKeys(chromedp.ID("sub-orderingKey"), "/customerId"),
			chromedp.SendKeys(chromedp.ID("sub-rateLimitPerSecond"), "5"),
			chromedp.SendKeys(chromedp.ID("sub-headers"), "X-Team: billing, eu"))
		if name == "Billing orders" {
			b.shot("12-subscription-new")
		}
		b.do("create "+name, chromedp.Click(chromedp.ID("save-subscription")))
		b.waitFor("the handshake result of "+name, `location.hash === '#/subscriptions' && !!document.querySelector('#handshake') &&
			document.querySelector('#handshake').textContent.includes(`+quoteJS(name)+`)`)
	}
	create("Billing orders", rc.URL+"/hook")
	if got := eval[string](b, `document.querySelector('#handshake').textContent`); !strings.Contains(got, "ACTIVE") {
		t.Errorf("the echoing endpoint's handshake says %q, want ACTIVE", got)
	}
	b.waitFor("one subscription listed", `document.querySelectorAll('#subscriptions-table tbody tr').length === 1`)
	subID := eval[string](b, `document.querySelector('#subscriptions-table tbody tr').dataset.id`)
	var sub consoleSub
	in.do("GET", "/api/dispatch/subscriptions/"+subID, apiToken, nil, &sub)
	if sub.Status != "ACTIVE" || sub.CredentialsID != credID || sub.Filter["region"] != "eu" || sub.Headers["X-Team"] != "billing, eu" ||
		sub.OrderingKey != "/customerId" || sub.RateLimitPerSecond != 5 {
		t.Errorf("the subscription made from the form: %+v", sub)
	}
	create("Silent endpoint", rc.URL+"/silent")
	if got := eval[string](b, `document.querySelector('#handshake').textContent`); !strings.Contains(got, "PENDING_VERIFICATION") || !strings.Contains(got, "challenge") {
		t.Errorf("the silent endpoint's handshake says %q, want PENDING_VERIFICATION and why", got)
	}
	b.waitFor("two subscriptions listed", `document.querySelectorAll('#subscriptions-table tbody tr').length === 2`)
	silentID := eval[string](b, `[...document.querySelectorAll('#subscriptions-table tbody tr')].map(r => r.dataset.id).find(id => id !== `+quoteJS(subID)+`)`)
	// Both were created to be verified: the list says whether each url passed.
	for id, want := range map[string]string{subID: "verified endpoint", silentID: "endpoint not verified"} {
		if got := eval[string](b, `document.querySelector('tr[data-id="`+id+`"] .sub-main').innerText`); !strings.Contains(got, want) {
			t.Errorf("subscription %s is listed as %q, want %q in it", id, got, want)
		}
	}
	b.shot("13-subscriptions")
	// A row's buttons never cover one another: "Edit" is a link, and an
	// inline link once sat on top of "Delete" when they stacked.
	overlaps := `[...document.querySelectorAll('#subscriptions-table .sub-actions')].flatMap(cell => {
		const r = [...cell.children].map(e => [e.textContent, e.getBoundingClientRect()]);
		return r.flatMap(([a, p], i) => r.slice(i + 1).filter(([, q]) =>
			p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom).map(([b]) => a + '/' + b));
	}).join(', ')`
	if got := eval[string](b, overlaps); got != "" {
		t.Errorf("at 1280 px these subscription buttons overlap: %s", got)
	}
	// At a small laptop's width the table still fits.
	b.do("narrow the window", chromedp.EmulateViewport(1024, 768))
	if w := eval[int](b, `document.querySelector('#subscriptions-table').getBoundingClientRect().right > document.documentElement.clientWidth ? 1 : 0`); w != 0 {
		t.Errorf("at 1024 px the subscriptions table is wider than the window")
	}
	if got := eval[string](b, overlaps); got != "" {
		t.Errorf("at 1024 px these subscription buttons overlap: %s", got)
	}
	b.shot("13b-subscriptions-1024")
	b.do("widen the window again", chromedp.EmulateViewport(1280, 900))

	// Publish an event through the API (hostile data too); find it in the
	// console and see its job delivered.
	var ev struct {
		ID   string `json:"id"`
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	if code := in.do("POST", "/api/dispatch/events", apiToken, map[string]any{"source": "shop", "type": "order.created",
		"data": map[string]any{"customerId": "c-1", "note": hostile}, "metadata": map[string]string{"region": "eu"}}, &ev); code != http.StatusCreated || len(ev.Jobs) != 1 {
		t.Fatalf("publish: status %d, jobs %+v; want 201 and one job (the pending subscription gets none)", code, ev.Jobs)
	}
	if code := in.do("POST", "/api/dispatch/events", apiToken, map[string]any{"source": "billing", "type": "invoice.voided", "data": 1}, nil); code != http.StatusCreated {
		t.Fatalf("publish a second event: %d", code)
	}
	b.visit("#/events")
	b.waitFor("the events", `document.querySelectorAll('#events-table tbody tr').length === 2`)
	b.do("search by type", chromedp.SendKeys(chromedp.ID("e-type"), "order.created"), chromedp.Click(chromedp.ID("search-events")))
	b.waitFor("the one order.created event", `(() => { const rows = document.querySelectorAll('#events-table tbody tr');
		return rows.length === 1 && rows[0].dataset.id === `+quoteJS(ev.ID)+` })()`)
	b.shot("14-events")
	b.do("search by a source with no events", chromedp.SendKeys(chromedp.ID("e-source"), "nobody"), chromedp.Click(chromedp.ID("search-events")))
	b.waitFor("the empty state", `document.querySelector('#events-results').innerText.includes('No events match')`)
	b.visit("#/events?type=order.created")
	b.waitFor("the event again", `document.querySelectorAll('#events-table tbody tr').length === 1`)
	b.do("open the event", chromedp.Click(chromedp.CSS(".event-link")))
	b.waitFor("the event's job delivered", `(() => { const rows = document.querySelectorAll('#event-jobs tbody tr');
		return rows.length === 1 && rows[0].dataset.id === `+quoteJS(ev.Jobs[0].ID)+` && rows[0].innerText.includes('COMPLETED') &&
			rows[0].innerText.includes('Billing orders') })()`)
	if d := eval[string](b, `document.querySelector('#event-data').textContent`); !strings.Contains(d, `<img src=x onerror=\"window.__xss=2\">`) {
		t.Errorf("event data shown as %q, want the markup as text", d)
	}
	if n := eval[int](b, `document.querySelectorAll('#main img, #main script').length`); n != 0 {
		t.Errorf("%d img/script elements in the event page", n)
	}
	b.shot("15-event")
	if delivered.Load() != 1 {
		t.Errorf("the receiver got %d deliveries, want 1", delivered.Load())
	}
	b.do("open the event's job", chromedp.Click(chromedp.CSS("#event-jobs .job-link")))
	b.waitFor("the job, linked back to its event", `document.querySelector('#job-id') && document.querySelector('#job-id').textContent === `+quoteJS(ev.Jobs[0].ID)+
		` && document.querySelector('#job-event') && document.querySelector('#job-event').textContent === `+quoteJS(ev.ID)+
		` && document.querySelector('#attempts').innerText.includes('SUCCESS')`)
	b.waitFor("the job's credentials by name", `document.querySelector('#job-credentials') && document.querySelector('#job-credentials').textContent === `+quoteJS("Partner hooks (EU) "+credID))

	// Disable: the next event makes no job; enable again.
	b.visit("#/subscriptions")
	b.waitFor("the disable button", `!!document.querySelector('[data-disable="`+subID+`"]')`)
	b.do("disable", chromedp.Click(chromedp.CSS(`[data-disable="`+subID+`"]`)))
	b.waitFor("DISABLED", `!!document.querySelector('[data-enable="`+subID+`"]') &&
		document.querySelector('tr[data-id="`+subID+`"]').innerText.includes('DISABLED')`)
	in.do("GET", "/api/dispatch/subscriptions/"+subID, apiToken, nil, &sub)
	if sub.Status != "DISABLED" {
		t.Errorf("after Disable the API says %s", sub.Status)
	}
	var none struct {
		Jobs []any `json:"jobs"`
	}
	in.do("POST", "/api/dispatch/events", apiToken, map[string]any{"source": "shop", "type": "order.created", "data": map[string]any{"customerId": "c-2"}, "metadata": map[string]string{"region": "eu"}}, &none)
	if none.Jobs == nil || len(none.Jobs) != 0 {
		t.Errorf("an event while the subscription is disabled made jobs %v, want []", none.Jobs)
	}
	if eval[bool](b, `!!document.querySelector('[data-verify="`+subID+`"]')`) {
		t.Error("a disabled subscription offers Verify, which the API refuses (Enable verifies it)")
	}
	b.do("enable", chromedp.Click(chromedp.CSS(`[data-enable="`+subID+`"]`)))
	b.waitFor("ACTIVE again", `!!document.querySelector('[data-disable="`+subID+`"]')`)
	in.do("GET", "/api/dispatch/subscriptions/"+subID, apiToken, nil, &sub)
	if sub.Status != "ACTIVE" {
		t.Errorf("after Enable the API says %s", sub.Status)
	}

	// Verify the silent one again: still pending, the reason shown.
	b.do("verify", chromedp.Click(chromedp.CSS(`[data-verify="`+silentID+`"]`)))
	b.waitFor("the handshake result", `!!document.querySelector('#handshake') && document.querySelector('#handshake').textContent.includes('PENDING_VERIFICATION')`)

	// Edit: a new rate limit, the filter cleared (PATCH with null).
	b.do("edit", chromedp.Click(chromedp.CSS(`[data-edit="`+subID+`"]`)))
	b.waitFor("the edit form", `!!document.querySelector('#subscription-form') && document.querySelector('#sub-name').value === 'Billing orders'`)
	b.shot("16-subscription-edit")
	b.do("change the rate limit and clear the filter",
		chromedp.Evaluate[chromedp.Void](`document.getElementById('sub-rateLimitPerSecond').value = '10'; document.getElementById('sub-filter').value = ''`),
		chromedp.Click(chromedp.ID("save-subscription")))
	b.waitFor("saved", `!!document.querySelector('#saved')`)
	sub = consoleSub{}
	in.do("GET", "/api/dispatch/subscriptions/"+subID, apiToken, nil, &sub)
	if sub.RateLimitPerSecond != 10 || len(sub.Filter) != 0 || sub.OrderingKey != "/customerId" || sub.CredentialsID != credID {
		t.Errorf("after the edit: %+v, want rate 10, no filter, the rest unchanged", sub)
	}

	// Delete the silent one, after the confirmation.
	b.do("delete", chromedp.Click(chromedp.CSS(`[data-delete="`+silentID+`"]`)))
	b.do("confirm delete", chromedp.Click(chromedp.CSS(`[data-confirm-delete="`+silentID+`"]`)))
	b.waitFor("one subscription left", `document.querySelectorAll('#subscriptions-table tbody tr').length === 1`)
	if code := in.do("GET", "/api/dispatch/subscriptions/"+silentID, apiToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("the deleted subscription: %d, want 404", code)
	}
	if delivered.Load() != 1 {
		t.Errorf("the receiver got %d deliveries, want only the first event's", delivered.Load())
	}
}
