package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("uncaught exception in the page: %s", e)
	}
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

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("uncaught exception in the page: %s", e)
	}
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
