package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// bigNumbers is JSON whose numbers a JavaScript number cannot hold as
// written: JSON.parse reads 12345678901234567000 and 1.5.
const bigNumbers = `{"orderId":12345678901234567891,"amount":1.50}`

// TestConsoleJobAndEventPages opens a job and an event as an operator
// would: the payload and the event's data show every number as written;
// the job page's refreshes leave opened headers open and a refused
// cancel's error on the page.
func TestConsoleJobAndEventPages(t *testing.T) {
	t.Parallel()
	// No circuit breaker: it would open after a few failures and stop the
	// attempts this test waits to see.
	in := start(t, "all", map[string]string{"DISPATCH_BREAKER_FAILURES": "0"})
	rc := newReceiver(t, func(_ int, r *http.Request, _ []byte) int {
		if r.URL.Path == "/fail" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	// Retried about every second (DISPATCH_RETRY_BASE=1s): each refresh
	// of its page (every 5 s) finds new attempts.
	retried := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/fail",
		"payload": bigNumbers, "maxRetries": 30, "retryStrategy": "fixed"})
	// Due in an hour: PENDING, so the page offers to cancel it.
	later := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/ok",
		"payload": `{}`, "scheduledFor": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	ev := in.publish(map[string]any{"source": "shop", "type": "order.created", "data": json.RawMessage(bigNumbers)}, http.StatusCreated)

	b := newBrowser(t, in.apiURL)
	b.signIn()

	// The payload, indented, its numbers as written.
	b.visit("#/jobs/" + retried.ID)
	b.waitFor("the job's first attempt", `document.querySelector('#job-id') && document.querySelector('#job-id').textContent === `+quoteJS(retried.ID)+
		` && !!document.querySelector('#attempts .attempt-headers')`)
	if got, want := b.text("#payload"), "{\n  \"orderId\": 12345678901234567891,\n  \"amount\": 1.50\n}"; got != want {
		t.Errorf("the payload reads\n%s\nwant\n%s", got, want)
	}

	// Open the first attempt's headers; a refresh that brings new attempts
	// leaves them open.
	attemptsShown := `Number(/\((\d+)\)/.exec([...document.querySelectorAll('#main h3')].find((e) => e.textContent.startsWith('Attempts')).textContent)[1])`
	firstHeaders := `[...document.querySelectorAll('#attempts li')].find((li) => li.querySelector('strong').textContent === '#1').querySelector('.attempt-headers')`
	before := eval[int](b, attemptsShown)
	b.do("open the first attempt's headers", chromedp.Evaluate[chromedp.Void](firstHeaders+`.querySelector('summary').click()`))
	if !eval[bool](b, firstHeaders+`.open`) {
		t.Fatal("a click on the first attempt's headers did not open them")
	}
	b.waitFor("a refresh with more attempts", attemptsShown+` > `+strconv.Itoa(before))
	if !eval[bool](b, firstHeaders+`.open`) {
		t.Errorf("after a refresh (%d attempts, then %d) the first attempt's headers folded up", before, eval[int](b, attemptsShown))
	}
	b.shot("23-job-payload-as-written")

	// A cancel refused (another operator cancelled the job first): the
	// error stays through the refresh that shows the job cancelled.
	b.visit("#/jobs/" + later.ID)
	b.waitFor("the cancel button", `document.querySelector('#job-id') && document.querySelector('#job-id').textContent === `+quoteJS(later.ID)+
		` && !!document.querySelector('#cancel')`)
	// Right after a refresh, so that the next is 5 s away.
	refreshes := "GET /api/dispatch/jobs/" + later.ID + "/attempts"
	n := b.requested(refreshes)
	eventually(t, 20*time.Second, func() bool { return b.requested(refreshes) > n }, func() string { return "the job page did not refresh" })
	b.do("settle after the refresh")
	if code := in.do("POST", "/api/dispatch/jobs/"+later.ID+"/cancel", apiToken, nil, nil); code != http.StatusOK {
		t.Fatalf("cancel through the API: %d", code)
	}
	b.do("cancel in the page", chromedp.Evaluate[chromedp.Void](`document.getElementById('cancel').click()`))
	b.waitFor("the refusal", `!!document.querySelector('#main .alert-error') && document.querySelector('#main .alert-error').textContent.includes('409')`)
	b.waitFor("the job shown cancelled", `document.querySelector('#main h1 .chip').textContent === 'CANCELLED'`)
	if got := eval[string](b, `(() => { const e = document.querySelector('#main .alert-error'); return e ? e.textContent : '(gone)' })()`); !strings.Contains(got, "cannot be cancelled") {
		t.Errorf("after the refresh the refusal reads %q, want it still shown", got)
	}
	b.shot("24-job-cancel-refused")

	// The event's data, in the list and on its page, as written.
	b.visit("#/events")
	b.waitFor("the event", `document.querySelectorAll('#events-table tbody tr').length === 1`)
	if got := b.text("#events-table tbody tr td:nth-child(4)"); !strings.Contains(got, `"orderId":12345678901234567891`) || !strings.Contains(got, `"amount":1.50`) {
		t.Errorf("the events list shows the data as %q, want its numbers as written", got)
	}
	b.visit("#/events/" + ev.ID)
	b.waitFor("the event's data", `document.querySelector('#event-id') && document.querySelector('#event-id').textContent === `+quoteJS(ev.ID))
	if got := b.text("#event-data"); !strings.Contains(got, `"orderId": 12345678901234567891`) || !strings.Contains(got, `"amount": 1.50`) {
		t.Errorf("the event's data reads\n%s\nwant its numbers as written", got)
	}

	b.noUncaughtErrors()
}

// TestConsoleJobsPaging pages through the jobs list: the auto-refresh
// choice stays through a status chip and a page; past the API's count of
// 10,000 the list says "10,000+" and pages on by keyset.
func TestConsoleJobsPaging(t *testing.T) {
	t.Parallel()
	in := start(t, "api", nil) // no router: the jobs stay PENDING
	rc := newReceiver(t, nil)
	var jobs []string // oldest first
	for i := range 26 {
		jobs = append(jobs, in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL,
			"payload": fmt.Sprintf(`{"n":%d}`, i)}).ID)
	}

	// Creating 10,001 jobs takes too long: while capped is set, the list
	// answers as the API does with more than 10,000 matches (its count
	// stops at 10,000: totalExact false, 400 pages of 25). Page p shows the
	// server's first page; a page read by keyset (before=) goes through.
	var capped atomic.Bool
	capped.Store(true)
	b := newBrowser(t, in.apiURL)
	b.answer(`*/api/dispatch/jobs\?*`, func(u *url.URL) (int, []byte, bool) {
		q := u.Query()
		if !capped.Load() || u.Path != "/api/dispatch/jobs" || q.Has("before") {
			return 0, nil, false
		}
		page, _ := strconv.Atoi(q.Get("page"))
		q.Del("page")
		body, err := overCap(in.apiURL+u.Path+"?"+q.Encode(), page)
		if err != nil {
			return http.StatusBadGateway, []byte(`{"error":{"message":` + strconv.Quote(err.Error()) + `}}`), true
		}
		return http.StatusOK, body, true
	})
	b.signIn()
	b.waitFor("the dead-letter count", `!!document.querySelector('#card-dead .stat-value')`)
	if got := b.text("#card-dead .stat-value"); got != "10,000+" {
		t.Errorf("with more than 10,000 jobs in ERROR the Overview's dead-letter card reads %q, want 10,000+", got)
	}
	capped.Store(false)

	// Auto-refresh off: a status chip and the next page keep it off.
	b.visit("#/jobs")
	b.waitFor("the first page", `document.querySelectorAll('#jobs-table tbody tr').length === 25`)
	b.do("turn auto-refresh off", chromedp.Click(chromedp.ID("auto-refresh")))
	b.do("pick PENDING", chromedp.Click(chromedp.CSS(`.chip-toggle[data-status="PENDING"]`)))
	b.waitFor("the PENDING jobs", `location.hash.includes('status=PENDING') && document.querySelector('.chip-toggle[data-status="PENDING"]').classList.contains('on') &&
		document.querySelectorAll('#jobs-table tbody tr').length === 25`)
	if eval[bool](b, `document.getElementById('auto-refresh').checked`) {
		t.Error("after a status chip auto-refresh is on again")
	}
	b.do("older", chromedp.Click(chromedp.CSS("#jobs-results .pager button:last-child")))
	b.waitFor("the second page", `(() => { const rows = document.querySelectorAll('#jobs-table tbody tr');
		return rows.length === 1 && rows[0].dataset.id === `+quoteJS(jobs[0])+` })()`)
	if eval[bool](b, `document.getElementById('auto-refresh').checked`) {
		t.Error("on the next page auto-refresh is on again")
	}

	// Past the cap: the count says so, and the last page by number goes on
	// to the older jobs by keyset.
	capped.Store(true)
	b.visit("#/jobs?page=399")
	b.waitFor("page 400", `document.querySelectorAll('#jobs-table tbody tr').length === 25 && document.querySelector('#jobs-count').textContent.includes('400')`)
	if got := b.text("#jobs-count"); got != "10,000+ jobs · page 400 of 400+" {
		t.Errorf("past the cap the list reads %q, want 10,000+ jobs · page 400 of 400+", got)
	}
	b.shot("25-jobs-past-the-count")
	if eval[bool](b, `document.querySelector('#jobs-results .pager button:last-child').disabled`) {
		t.Fatal("on page 400 of more than 10,000 jobs Older is disabled")
	}
	b.do("older than page 400", chromedp.Click(chromedp.CSS("#jobs-results .pager button:last-child")))
	b.waitFor("the jobs older than page 400", `(() => { const rows = document.querySelectorAll('#jobs-table tbody tr');
		return rows.length === 1 && rows[0].dataset.id === `+quoteJS(jobs[0])+` })()`)
	if n := b.requested("GET /api/dispatch/jobs?before=" + jobs[1] + "&size=25"); n == 0 {
		t.Errorf("the page after page 400 was not read with before=%s (the last job shown)", jobs[1])
	}
	if got := b.text("#jobs-count"); got != "1 job older than job "+jobs[1]+" · page 1 of 1" {
		t.Errorf("the page read by keyset reads %q", got)
	}
	b.do("back to the newest", chromedp.Click(chromedp.ID("jobs-newer")))
	b.waitFor("the newest jobs", `document.querySelectorAll('#jobs-table tbody tr').length === 25 &&
		document.querySelector('#jobs-count').textContent === '10,000+ jobs · page 1 of 400+'`)

	b.noUncaughtErrors()
}

// overCap reads a page of jobs from the API and answers it as page page of
// more than 10,000 matches.
func overCap(u string, page int) ([]byte, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s %v", u, resp.StatusCode, raw, err)
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	var size int
	if err := json.Unmarshal(v["size"], &size); err != nil {
		return nil, err
	}
	v["page"] = json.RawMessage(strconv.Itoa(page))
	v["totalItems"] = json.RawMessage("10000")
	v["totalPages"] = json.RawMessage(strconv.Itoa((10000 + size - 1) / size))
	v["totalExact"] = json.RawMessage("false")
	return json.Marshal(v)
}

// TestConsoleMetadataWithCommas searches jobs by a metadata value with a
// comma in it, from a shared address and from the form, pages on, and
// edits a subscription whose filter has such a value: the comma is kept
// everywhere, never taken for the end of a pair.
func TestConsoleMetadataWithCommas(t *testing.T) {
	t.Parallel()
	in := start(t, "api", nil) // no router: the jobs stay PENDING
	rc := newReceiver(t, nil)
	job := func(tenant string) string {
		return in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL, "payload": `{}`,
			"metadata": map[string]string{"tenant": tenant}}).ID
	}
	var comma []string // tenant "acme,inc", oldest first: a page of 25 and one more
	for range 26 {
		comma = append(comma, job("acme,inc"))
	}
	other := job("acme")
	type sub struct {
		ID     string            `json:"id"`
		URL    string            `json:"url"`
		Filter map[string]string `json:"filter"`
	}
	var s sub
	if code := in.do("POST", "/api/dispatch/subscriptions", apiToken, map[string]any{"name": "Acme, Inc. orders", "url": rc.URL + "/old",
		"eventTypes": []string{"order.*"}, "filter": map[string]string{"tenant": "acme,inc", "region": "eu"}}, &s); code != http.StatusCreated {
		t.Fatalf("create the subscription: %d", code)
	}

	b := newBrowser(t, in.apiURL)
	b.signIn()

	// A shared address: tenant "acme,inc" only, on the first page and the next.
	rows := `document.querySelectorAll('#jobs-table tbody tr')`
	b.visit("#/jobs?metadata.tenant=acme%2Cinc")
	b.waitFor("the first page of tenant acme,inc", rows+`.length === 25 && document.querySelector('#jobs-count').textContent.startsWith('26 jobs')`)
	if got := eval[string](b, `document.getElementById('f-metadata').value`); got != "tenant=acme,inc" {
		t.Errorf("the metadata filter reads %q, want tenant=acme,inc", got)
	}
	b.do("older", chromedp.Click(chromedp.ID("jobs-older")))
	b.waitFor("the second page, the oldest job of tenant acme,inc", `(() => { const rows = `+rows+`;
		return rows.length === 1 && rows[0].dataset.id === `+quoteJS(comma[0])+` })()`)
	if n := b.requested("GET /api/dispatch/jobs?metadata.tenant=acme%2Cinc&page=1&size=25"); n == 0 {
		t.Error("the second page was not read with metadata.tenant=acme%2Cinc")
	}
	if got := eval[string](b, `location.hash`); got != "#/jobs?metadata.tenant=acme%2Cinc&page=1" {
		t.Errorf("the second page's address is %s", got)
	}

	// Typed in the form, Enter to search: the comma stays in the value.
	b.visit("#/jobs")
	b.waitFor("every job", `document.querySelector('#jobs-count') && document.querySelector('#jobs-count').textContent.startsWith('27 jobs')`)
	b.do("search tenant=acme,inc", chromedp.SendKeys(chromedp.ID("f-metadata"), "tenant=acme,inc"+kb.Enter))
	b.waitFor("the jobs of tenant acme,inc", `location.hash === '#/jobs?metadata.tenant=acme%2Cinc' && !!document.querySelector('#jobs-count') &&
		document.querySelector('#jobs-count').textContent.startsWith('26 jobs') && `+rows+`.length === 25`)
	if eval[bool](b, `!!document.querySelector('#jobs-table tr[data-id="`+other+`"]')`) {
		t.Errorf("the search for tenant acme,inc shows job %s of tenant acme", other)
	}
	b.shot("40-jobs-metadata-with-a-comma")
	// A line that is not key=value is said, not dropped (the search would
	// be wider than asked).
	b.do("search with a bad line", chromedp.SetValue(chromedp.ID("f-metadata"), "tenant=acme,inc\nregion"), chromedp.Click(chromedp.ID("search")))
	b.waitFor("the refusal", `!!document.querySelector('#job-filters-status .alert-error') &&
		document.querySelector('#job-filters-status').textContent.includes('"region" is not key=value')`)
	b.shot("40b-jobs-metadata-refused")
	if got := eval[string](b, `location.hash`); got != "#/jobs?metadata.tenant=acme%2Cinc" {
		t.Errorf("after a filter that could not be read the address is %s, want the last search's", got)
	}

	// A subscription whose filter has a comma in a value: its edit form
	// shows each pair on a line, and a change of its URL alone saves.
	b.visit("#/subscriptions/" + s.ID)
	b.waitFor("the edit form", `!!document.querySelector('#subscription-form') && document.getElementById('sub-name').value === 'Acme, Inc. orders'`)
	if got := eval[string](b, `document.getElementById('sub-filter').value.split('\n').sort().join(' | ')`); got != "region=eu | tenant=acme,inc" {
		t.Errorf("the filter field reads %q, want region=eu and tenant=acme,inc on lines of their own", got)
	}
	b.do("change the URL", chromedp.SetValue(chromedp.ID("sub-url"), rc.URL+"/new"))
	b.shot("41-subscription-filter-with-a-comma")
	b.do("save", chromedp.Click(chromedp.ID("save-subscription")))
	b.waitFor("saved", `location.hash === '#/subscriptions' && !!document.querySelector('#saved')`)
	var saved sub
	in.do("GET", "/api/dispatch/subscriptions/"+s.ID, apiToken, nil, &saved)
	if saved.URL != rc.URL+"/new" || len(saved.Filter) != 2 || saved.Filter["tenant"] != "acme,inc" || saved.Filter["region"] != "eu" {
		t.Errorf("after the edit the subscription is %+v, want the new URL and the filter as it was", saved)
	}
	b.waitFor("the subscription listed with its filter", `!!document.querySelector('tr[data-id="`+s.ID+`"]')`)
	if got := b.text(`tr[data-id="` + s.ID + `"] .filter-note`); got != "where region=eu and tenant=acme,inc" {
		t.Errorf("the subscriptions list says %q of its filter", got)
	}

	b.noUncaughtErrors()
}

// TestConsoleSlowPageLeftBehind opens a subscription whose answer is slow
// and, before it comes, opens Jobs: the answer, when it comes, leaves the
// Jobs page as it is.
func TestConsoleSlowPageLeftBehind(t *testing.T) {
	t.Parallel()
	in := start(t, "api", nil)
	rc := newReceiver(t, nil)
	jobID := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL, "payload": `{}`}).ID
	var sub struct {
		ID string `json:"id"`
	}
	if code := in.do("POST", "/api/dispatch/subscriptions", apiToken, map[string]any{"name": "Slow to load", "url": rc.URL,
		"eventTypes": []string{"order.*"}}, &sub); code != http.StatusCreated {
		t.Fatalf("create the subscription: %d", code)
	}

	b := newBrowser(t, in.apiURL)
	// The browser holds the subscription's answer until released.
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	releaseAnswer := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAnswer)
	b.answer(`*/api/dispatch/subscriptions/`+sub.ID, func(*url.URL) (int, []byte, bool) {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-b.ctx.Done():
		}
		return 0, nil, false // sent on to dispatch
	})
	b.signIn()

	b.visit("#/subscriptions/" + sub.ID)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the subscription page did not ask for the subscription")
	}
	b.waitFor("the subscription loading", `location.hash === `+quoteJS("#/subscriptions/"+sub.ID)+` && !!document.querySelector('#main .loading')`)
	// Jobs, while the subscription's answer is held (visit would wait for it).
	if err := chromedp.Do(b.ctx, chromedp.Evaluate[chromedp.Void](`location.hash = '#/jobs'`)); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the jobs table", `(() => { const rows = document.querySelectorAll('#jobs-table tbody tr');
		return rows.length === 1 && rows[0].dataset.id === `+quoteJS(jobID)+` })()`)
	releaseAnswer()
	b.do("settle after the subscription's answer")
	if n := b.requested("GET /api/dispatch/subscriptions/" + sub.ID); n != 1 {
		t.Fatalf("the subscription was asked for %d times, want once", n)
	}
	b.shot("42-jobs-after-a-slow-subscription")
	if got := eval[string](b, `location.hash + ' · ' + document.querySelector('#main h1').textContent`); got != "#/jobs · Jobs" {
		t.Errorf("after the subscription's answer came the page is %q, want the Jobs page", got)
	}
	if eval[bool](b, `!!document.querySelector('#subscription-form')`) || !eval[bool](b, `!!document.querySelector('#jobs-table')`) {
		t.Error("the subscription's late answer replaced the Jobs page with its form")
	}

	b.noUncaughtErrors()
}

// TestConsoleOverviewInUTC looks at the Overview's charts in a browser
// whose time zone is not UTC (Asia/Kolkata, UTC+5:30): their times are
// UTC, as every other time in the console, and they say so.
func TestConsoleOverviewInUTC(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, nil)
	id := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL, "payload": `{}`}).ID
	in.waitStatus(id, 30*time.Second, "COMPLETED")

	b := newBrowser(t, in.apiURL)
	if _, err := chromedp.Call(b.ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Kolkata"}); err != nil {
		t.Fatalf("set the browser's time zone: %v", err)
	}
	b.signIn()
	if off := eval[int](b, `new Date().getTimezoneOffset()`); off != -330 {
		t.Fatalf("the browser's clock is %d minutes behind UTC, want Asia/Kolkata's -330", off)
	}
	b.waitFor("the charts", `document.querySelectorAll('.uplot').length === 2`)
	legend := `document.querySelector('.uplot .u-legend .u-series:first-child `
	if got := eval[string](b, legend+`.u-label').textContent`); got != "Time (UTC)" {
		t.Errorf("the deliveries chart's legend names its time %q, want Time (UTC)", got)
	}

	// Point at the last minute of the deliveries chart: the legend says
	// when it began, in UTC.
	at := eval[[]float64](b, `(() => { const o = document.querySelector('.uplot .u-over'); o.scrollIntoView({ block: 'center' });
		const r = o.getBoundingClientRect(); return [r.right - 2, r.top + r.height / 2]; })()`)
	b.do("point at the last minute", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at[0], at[1]))
	b.waitFor("the legend's time", legend+`.u-value').textContent !== '--'`)
	shown := eval[string](b, legend+`.u-value').textContent`)
	b.shot("43-overview-in-utc")
	now := time.Now().UTC()
	last, err := time.Parse("2006-01-02 3:04pm", shown)
	if err != nil {
		t.Fatalf("the legend's time reads %q: %v", shown, err)
	}
	if last.After(now) || last.Before(now.Add(-5*time.Minute)) {
		t.Errorf("the last minute of the chart reads %q; it is %s UTC (in Kolkata %s)", shown,
			now.Format("2006-01-02 15:04"), now.Add(330*time.Minute).Format("2006-01-02 15:04"))
	}
	// The heading says when the page was updated, in UTC too.
	updated := regexp.MustCompile(`updated (\d\d):\d\d:\d\d UTC$`).FindStringSubmatch(b.text("#overview-updated"))
	if updated == nil || (updated[1] != now.Format("15") && updated[1] != now.Add(-5*time.Minute).Format("15")) {
		t.Errorf("the Overview's heading reads %q, want the time it was updated in UTC (%s)", b.text("#overview-updated"), now.Format("15:04"))
	}

	b.noUncaughtErrors()
}

// TestConsoleEventsPagingKeepsTheSearch searches events by source, edits
// the form without searching, and pages on: the next page is of the
// search shown, not of the edit (which paged through another search, its
// rows under the first one's count).
func TestConsoleEventsPagingKeepsTheSearch(t *testing.T) {
	t.Parallel()
	in := start(t, "api", nil)
	var shop []string // oldest first
	for i := range 26 {
		shop = append(shop, in.publish(map[string]any{"source": "shop", "type": "order.created",
			"data": json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}, http.StatusCreated).ID)
	}
	in.publish(map[string]any{"source": "billing", "type": "invoice.paid", "data": json.RawMessage(`{}`)}, http.StatusCreated)

	b := newBrowser(t, in.apiURL)
	b.signIn()
	b.visit("#/events?source=shop")
	b.waitFor("the shop's first page", `document.querySelectorAll('#events-table tbody tr').length === 25`)
	b.do("edit the source, not searched", chromedp.Evaluate[chromedp.Void](`document.getElementById('e-source').value = 'billing'`))
	b.do("older", chromedp.Click(chromedp.ID("events-older")))
	b.waitFor("the second page", `location.hash.includes('page=1')`)
	b.waitFor("its rows", `document.querySelectorAll('#events-table tbody tr').length === 1`)
	row := eval[[]string](b, `[...document.querySelectorAll('#events-table tbody tr')].map((r) => r.dataset.id + ' ' + r.children[2].textContent)`)
	if want := shop[0] + " shop"; len(row) != 1 || row[0] != want {
		t.Errorf("the second page of the shop's events shows %v, want [%s]", row, want)
	}
	if !strings.Contains(eval[string](b, `location.hash`), "source=shop") {
		t.Errorf("the second page's address %s lost the search", eval[string](b, `location.hash`))
	}
	b.shot("44-events-second-page-of-the-search")
	b.noUncaughtErrors()
}
