package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium; `make browser` installs it.
const chromiumPath = "/usr/bin/chromium"

// hostile is markup that would run script if the console ever parsed
// outside data as HTML: each sets window.__xss.
const hostile = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`

// browser is one headless Chromium tab on the console of a running
// dispatch, with the requests it made and the exceptions it threw.
type browser struct {
	t        *testing.T
	ctx      context.Context
	base     string
	shots    string
	wg       sync.WaitGroup // the goroutines that read the tab's events
	mu       sync.Mutex
	hosts    map[string]int
	requests map[string]int // "GET /api/…?…": how many times the page sent it
	errs     []string
	stopped  chan struct{}
}

// noUncaughtErrors fails the test for each exception the page did not
// catch.
func (b *browser) noUncaughtErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		b.t.Errorf("uncaught exception in the page: %s", e)
	}
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the browser tests need Debian's chromium at %s: run `make browser` (apt-get install -y chromium)", chromiumPath)
	}
	// As root in a closed network Chromium needs these flags: no sandbox,
	// and no background connections to Google's hosts.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("no-first-run", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	b := &browser{t: t, ctx: ctx, base: base, hosts: map[string]int{}, requests: map[string]int{}, stopped: make(chan struct{})}
	b.shots = filepath.Join("..", "..", "..", ".dev", "screenshots")
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	requests := chromedp.Events(ctx, network.RequestWillBeSent)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		for ev, err := range requests {
			if err != nil {
				return
			}
			if u, perr := url.Parse(ev.Request.URL); perr == nil && u.Host != "" {
				b.mu.Lock()
				b.hosts[u.Host]++
				b.requests[ev.Request.Method+" "+u.RequestURI()]++
				b.mu.Unlock()
			}
		}
	}()
	go func() {
		defer b.wg.Done()
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.errs = append(b.errs, ev.ExceptionDetails.Text+" "+fmt.Sprint(ev.ExceptionDetails.Exception))
			b.mu.Unlock()
		}
	}()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: countRequests}); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
		b.wg.Wait()
	})
	return b
}

// requested is how many times the page has sent a request, named by its
// method and its path with the query: "POST /api/dispatch/jobs/replay?status=ERROR".
func (b *browser) requested(request string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests[request]
}

// answer has the browser answer the page's requests whose URL matches
// pattern (DevTools' wildcards: * any run, ? one character, a backslash escapes)
// with what fn returns in place of the server, or send them on when fn's
// ok is false. fn runs outside the test's goroutine: it must not call
// t.Fatal.
func (b *browser) answer(pattern string, fn func(u *url.URL) (code int, body []byte, ok bool)) {
	b.t.Helper()
	paused := chromedp.Events(b.ctx, fetch.RequestPaused)
	if _, err := chromedp.Call(b.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern}}}); err != nil {
		b.t.Fatalf("intercept %s: %v", pattern, err)
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for ev, err := range paused {
			if err != nil {
				return
			}
			u, perr := url.Parse(ev.Request.URL)
			var code int
			var body []byte
			ok := false
			if perr == nil {
				code, body, ok = fn(u)
			}
			if ok {
				_, err = chromedp.Call(b.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: ev.RequestID, ResponseCode: int64(code),
					ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json; charset=utf-8"}}, Body: body})
			} else {
				_, err = chromedp.Call(b.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			}
			if err != nil {
				return // the tab is closing
			}
		}
	}()
}

// countRequests runs in the page before the console's own scripts: it
// counts the requests the page makes with fetch (the console's API calls
// all go through one, and read each answer with text()) as open from the
// call until a task after the answer is read, when what the answer
// changed is on the page (the caller's awaits resume and render in
// microtasks before it). The test's own requests from the page read their
// answers too, or they would stay open.
const countRequests = `(() => {
	const fetch = window.fetch;
	window.__requestsOpen = 0;
	const settle = () => setTimeout(() => { window.__requestsOpen--; }, 0);
	window.fetch = (...args) => {
		window.__requestsOpen++;
		return fetch(...args).then((resp) => {
			const text = resp.text.bind(resp);
			resp.text = () => text().finally(settle);
			return resp;
		}, (err) => { settle(); throw err; });
	};
})()`

// do waits until the page has no request open (a list the last action
// reloads is redrawn), as a person waits for the page to settle before
// the next click, then runs the actions. A click on an element that is
// replaced between the mouse's press and its release is no click at all.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	settled := chromedp.Poll[bool](`!window.__requestsOpen`, chromedp.WithPollingTimeout(20*time.Second))
	if _, err := chromedp.Run(b.ctx, settled); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: the page did not settle (requests still open): %v", what, err)
	}
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls a JavaScript condition in the page, as a person waits for
// a row or a status to appear.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 2000)`))
		b.t.Fatalf("waiting until %s: %v\npage text:\n%s", what, err, text)
	}
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (b *browser) shot(name string) {
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), buf, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
	}
}

func (b *browser) visit(hash string) {
	b.t.Helper()
	b.do("open "+hash, chromedp.Evaluate[chromedp.Void](`location.hash = `+quoteJS(hash)))
}

func quoteJS(s string) string { return fmt.Sprintf("%q", s) }

// consoleReceiver answers by path: /ok 200, /hostile 400 with a body of
// markup, /gone 410. 4xx are not retried, so those jobs end in ERROR at once.
func consoleReceiver(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"received":true}`))
		case "/hostile":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("X-Hostile", hostile)
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("rejected: " + hostile))
		default:
			w.WriteHeader(http.StatusGone)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestConsoleInABrowser drives the operator console in headless Chromium as
// an operator would, against `dispatch all` with real deliveries: sign in,
// find a job by metadata, see its attempts, replay it, redrive dead letters
// after a dry run, rotate a credential; hostile payloads and response
// bodies stay text; no request leaves for another host. It saves a
// screenshot of every page under .dev/screenshots.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := consoleReceiver(t)

	job := func(path, order, payload string) string {
		return in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + path,
			"payload": payload, "maxRetries": 3, "metadata": map[string]string{"orderId": order, "tenant": "acme"}}).ID
	}
	target := job("/ok", "A-1001", `{"note":"`+strings.ReplaceAll(hostile, `"`, `\"`)+`","amount":42}`)
	bad := job("/hostile", "B-2002", `{"amount":7}`)
	var dead []string
	for i := range 3 {
		dead = append(dead, job("/gone", fmt.Sprintf("G-%d", i), `{"n":1}`))
	}
	for i := range 4 {
		job("/ok", fmt.Sprintf("OK-%d", i), `{"n":2}`)
	}
	in.waitStatus(target, 30*time.Second, "COMPLETED")
	in.waitStatus(bad, 30*time.Second, "ERROR")
	for _, id := range dead {
		in.waitStatus(id, 30*time.Second, "ERROR")
	}

	b := newBrowser(t, in.apiURL)
	b.do("open console", chromedp.Navigate(in.apiURL+"/console/"))
	b.waitFor("the sign-in form", `!!document.querySelector('#login-form')`)
	b.shot("01-login")

	// A wrong token: refused, and the API stays closed to the page.
	b.do("wrong token", chromedp.SendKeys(chromedp.ID("token"), "not-the-admin-token"), chromedp.Click(chromedp.ID("login")))
	b.waitFor("the refusal", `document.querySelector('.login-status').innerText.includes('not accepted')`)
	if code := eval[int](b, `fetch('/api/dispatch/jobs').then(r => r.text().then(() => r.status))`); code != http.StatusUnauthorized {
		t.Errorf("after a wrong token, GET /api/dispatch/jobs from the page = %d, want 401", code)
	}
	b.do("right token", chromedp.Evaluate[chromedp.Void](`document.getElementById('token').value = ''`), chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.ID("login")))

	// Overview: the deliveries of the last hour.
	b.waitFor("the overview's charts", `document.querySelectorAll('.uplot').length === 2`)
	b.waitFor("the pools of the in-process router", `document.querySelector('#pools table') !== null`)
	if n := eval[string](b, `document.querySelector('#card-attempts .stat-value').textContent`); n != "9" {
		t.Errorf("overview shows %s deliveries, want 9", n)
	}
	if n := eval[string](b, `document.querySelector('#card-dead .stat-value').textContent`); n != "4" {
		t.Errorf("overview shows %s dead letters, want 4", n)
	}
	b.waitFor("the storage card", `document.querySelector('#storage') !== null`)
	if txt := eval[string](b, `document.querySelector('#storage').textContent`); !strings.Contains(txt, "dispatch_job") || !strings.Contains(txt, "Oldest job kept") {
		t.Errorf("the storage card reads %q, want the tables and the oldest job kept", txt)
	}
	b.shot("02-overview")

	// The session cookie is HttpOnly and SameSite=Strict; the page cannot read it.
	cookies, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{in.apiURL + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	var sessionID string
	for _, c := range cookies.Cookies {
		if c.Name == "dispatch_session" {
			sessionID = c.Value
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("session cookie: HttpOnly %v SameSite %q, want HttpOnly Strict", c.HTTPOnly, c.SameSite)
			}
		}
	}
	if sessionID == "" {
		t.Fatal("no session cookie after sign-in")
	}
	if dc := eval[string](b, `document.cookie`); dc != "" {
		t.Errorf("document.cookie = %q, want nothing readable by script", dc)
	}

	// Jobs: find one by metadata.
	b.visit("#/jobs")
	b.waitFor("the jobs table", `document.querySelectorAll('#jobs-table tbody tr').length === 9`)
	b.shot("03-jobs")
	b.do("filter by metadata", chromedp.SendKeys(chromedp.ID("f-metadata"), "orderId=A-1001"), chromedp.Click(chromedp.ID("search")))
	b.waitFor("one matching job", `(() => { const rows = document.querySelectorAll('#jobs-table tbody tr');
		return rows.length === 1 && rows[0].dataset.id === `+quoteJS(target)+` })()`)
	b.shot("04-jobs-by-metadata")

	// Job: fields, the payload as text, the attempts.
	b.do("open the job", chromedp.Click(chromedp.CSS(".job-link")))
	b.waitFor("the job's attempts", `document.querySelectorAll('#attempts li').length === 1 && document.querySelector('#attempts').innerText.includes('SUCCESS')`)
	if p := eval[string](b, `document.querySelector('#payload').textContent`); !strings.Contains(p, `<script>window.__xss=1</script>`) {
		t.Errorf("payload shown as %q, want the markup as text", p)
	}
	b.shot("05-job")

	// A job whose receiver answered with markup: shown as text too.
	b.visit("#/jobs/" + bad)
	b.waitFor("the hostile attempt", `!!document.querySelector('.attempt-body') && document.querySelector('#job-id').textContent === `+quoteJS(bad))
	if body := eval[string](b, `document.querySelector('.attempt-body').textContent`); !strings.Contains(body, `<img src=x onerror="window.__xss=2">`) {
		t.Errorf("response body shown as %q, want the markup as text", body)
	}
	b.shot("06-job-hostile-response")
	b.do("open the attempt's headers", chromedp.Click(chromedp.CSS(".attempt-headers summary")))
	if got := b.text(".response-headers"); !strings.Contains(got, `X-Hostile<script>window.__xss=1</script>`) {
		t.Errorf("the response headers read %q, want the receiver's markup as text", got)
	}
	if n := eval[int](b, `document.querySelectorAll('#main img, #main script').length`); n != 0 {
		t.Errorf("%d img/script elements in the page: outside data was parsed as markup", n)
	}
	if x := eval[string](b, `String(window.__xss)`); x != "undefined" {
		t.Errorf("window.__xss = %s: hostile markup ran", x)
	}

	// Replay it: a new job that replays this one. A double click is one
	// replay: the button waits for the first.
	jobsBefore := in.countAll()
	b.do("settle before the replay")
	eval[bool](b, `(() => { const r = document.getElementById('replay'); r.click(); r.click(); return r.disabled; })()`)
	b.waitFor("the replay's page", `location.hash.startsWith('#/jobs/') && location.hash !== `+quoteJS("#/jobs/"+bad)+
		` && document.querySelector('#job-id') && document.querySelector('#job-id').textContent !== `+quoteJS(bad))
	replayID := strings.TrimPrefix(eval[string](b, `location.hash`), "#/jobs/")
	b.do("settle after the replay")
	if n := in.countAll() - jobsBefore; n != 1 {
		t.Errorf("a double click on Replay made %d jobs, want 1", n)
	}
	var replay struct {
		ReplayOf string `json:"replayOf"`
	}
	in.do("GET", "/api/dispatch/jobs/"+replayID, apiToken, nil, &replay)
	if replay.ReplayOf != bad {
		t.Errorf("job %s replays %q, want %s", replayID, replay.ReplayOf, bad)
	}

	// The replay fails as its original did: a dead letter of its own.
	in.waitStatus(replayID, 30*time.Second, "ERROR")

	// Dead letters: the dry run counts, changes nothing; then the redrive.
	b.visit("#/dead-letters")
	b.waitFor("the dead letters", `document.querySelectorAll('#jobs-table tbody tr').length >= 4`)
	before := in.countAll()
	b.do("dry run", chromedp.Click(chromedp.ID("bulk-replay")))
	b.waitFor("the dry-run count", `!!document.querySelector('#dry-run-count')`)
	// The three gone ones and the failed replay; the job replayed above is
	// not replayed twice.
	if got := eval[string](b, `document.querySelector('#dry-run-count').textContent`); got != "4 dead letters will be replayed" {
		t.Errorf("dry run says %q, want 4 dead letters", got)
	}
	if after := in.countAll(); after != before {
		t.Errorf("the dry run created jobs: %d before, %d after", before, after)
	}
	b.shot("07-dead-letters-dry-run")
	// A double click is one redrive: the button waits for the answer.
	b.do("redrive with a double click", chromedp.Evaluate[chromedp.Void](`(() => { const r = document.getElementById('confirm-replay'); r.click(); r.click(); })()`))
	b.waitFor("the redrive's result", `!!document.querySelector('#replayed')`)
	b.do("settle after the redrive")
	if n := b.requested("POST /api/dispatch/jobs/replay?status=ERROR"); n != 1 {
		t.Errorf("a double click on the redrive's Replay sent %d redrives, want 1", n)
	}
	if got := eval[string](b, `document.querySelector('#replayed').textContent`); !strings.Contains(got, "Replayed 4 dead letters") {
		t.Errorf("redrive says %q", got)
	}
	if after := in.countAll(); after != before+4 {
		t.Errorf("%d jobs after the redrive, want %d", after, before+4)
	}

	// Credentials: create bound to a target (the secret shown once), then
	// rotate, then change where they may be sent.
	b.visit("#/credentials")
	b.waitFor("the credentials page", `!!document.querySelector('#create-credentials') && !document.querySelector('#credentials-list .loading')`)
	b.shot("08-credentials-empty")
	b.do("create credentials", chromedp.SendKeys(chromedp.ID("c-name"), "Partner hooks"),
		chromedp.SendKeys(chromedp.ID("c-targets"), "HTTPS://Partner.Example:443/hooks/"), chromedp.Click(chromedp.ID("create")))
	b.waitFor("the new secret", `!!document.querySelector('#new-secret') && document.querySelectorAll('#credentials-table tbody tr[data-id]').length === 1`)
	first := eval[string](b, `document.querySelector('#new-secret').textContent`)
	credID := eval[string](b, `document.querySelector('#credentials-table tbody tr[data-id]').dataset.id`)
	if got := eval[string](b, `[...document.querySelectorAll('tr[data-targets-of="`+credID+`"] .target')].map(e => e.textContent).join(' ')`); got != "https://partner.example/hooks/" {
		t.Errorf("the new credentials' row shows allowed targets %q, want the one entry normalised", got)
	}
	if got := b.text(`tr[data-id="` + credID + `"] .cred-name`); got != "Partner hooks"+credID {
		t.Errorf("the new credentials' row reads %q, want their name over their id", got)
	}
	if got := b.text(`tr[data-id="` + credID + `"] .cred-usage`); got != "unused" {
		t.Errorf("the new credentials are used by %q, want unused", got)
	}
	b.shot("09-credentials-created")
	b.do("rotate", chromedp.Click(chromedp.CSS(`[data-rotate="`+credID+`"]`)))
	b.waitFor("the rotated secret", `document.querySelector('#new-secret') && document.querySelector('#new-secret').textContent !== `+quoteJS(first)+
		` && document.querySelector('.prev-until').textContent !== '—'`)
	var cred struct {
		PreviousSecretExpiresAt string `json:"previousSecretExpiresAt"`
		SigningSecret           string `json:"signingSecret"`
	}
	in.do("GET", "/api/admin/dispatch/credentials/"+credID, adminToken, nil, &cred)
	if cred.PreviousSecretExpiresAt == "" || cred.SigningSecret != "" {
		t.Errorf("after rotation: %+v, want a previous-secret grace period and no secret shown", cred)
	}
	b.shot("10-credentials-rotated")
	// The row's buttons fit in the list's card, not cut off at its edge.
	if over := eval[float64](b, `(() => { const d = document.querySelector('[data-delete="`+credID+`"]');
		return d.getBoundingClientRect().right - d.closest('.card').getBoundingClientRect().right; })()`); over > 0 {
		t.Errorf("the Delete button of a credentials row sticks out of its card by %.0f px", over)
	}

	// Allowed targets: a bad entry is refused with the entry named and
	// nothing changed; then the subscriptions' receiver is added.
	hs, delivered := handshakeReceiver(t)
	b.do("edit the targets", chromedp.Click(chromedp.CSS(`[data-edit-targets="`+credID+`"]`)))
	b.waitFor("the targets form", `!!document.querySelector('#targets-form') && document.querySelector('#targets-edit').value === 'https://partner.example/hooks/'`)
	b.do("add a bad target", chromedp.SendKeys(chromedp.ID("targets-edit"), "\nftp://"+strings.TrimPrefix(hs.URL, "http://")), chromedp.Click(chromedp.ID("save-targets")))
	b.waitFor("the refusal", `!!document.querySelector('#targets-status .alert-error') && document.querySelector('#targets-status').innerText.includes('allowedTargets[1]')`)
	b.shot("10a-credentials-targets-refused")
	b.do("fix it", chromedp.SetValue(chromedp.ID("targets-edit"), "https://partner.example/hooks/\n"+hs.URL), chromedp.Click(chromedp.ID("save-targets")))
	b.waitFor("the saved targets in the row", `!document.querySelector('#targets-form') &&
		document.querySelectorAll('tr[data-targets-of="`+credID+`"] .target').length === 2`)
	var bound struct {
		AllowedTargets []string `json:"allowedTargets"`
	}
	in.do("GET", "/api/admin/dispatch/credentials/"+credID, adminToken, nil, &bound)
	if strings.Join(bound.AllowedTargets, " ") != "https://partner.example/hooks/ "+hs.URL {
		t.Errorf("allowedTargets after the edit = %q", bound.AllowedTargets)
	}
	b.waitFor("the last toast gone", `(() => { const t = document.getElementById('toast'); return !t || getComputedStyle(t).opacity === '0' })()`)
	b.shot("10b-credentials-targets")
	if over := eval[float64](b, `(() => { const d = document.querySelector('[data-delete="`+credID+`"]');
		return d.getBoundingClientRect().right - d.closest('.card').getBoundingClientRect().right; })()`); over > 0 {
		t.Errorf("with two targets the Delete button of a credentials row sticks out of its card by %.0f px", over)
	}

	// Renamed: the row says the new name.
	b.do("rename", chromedp.Click(chromedp.CSS(`[data-rename="`+credID+`"]`)))
	b.waitFor("the name form", `!!document.querySelector('#name-form') && document.querySelector('#name-edit').value === 'Partner hooks'`)
	b.do("the new name", chromedp.SetValue(chromedp.ID("name-edit"), "Partner hooks (EU)"), chromedp.Click(chromedp.ID("save-name")))
	b.waitFor("the renamed row", `!document.querySelector('#name-form') &&
		document.querySelector('tr[data-id="`+credID+`"] .cred-name').textContent.startsWith('Partner hooks (EU)')`)

	// Events and subscriptions with the credentials above.
	consoleEventsAndSubscriptions(t, in, b, credID, hs, delivered)

	// The credentials now sign the subscription's jobs: the page says so.
	b.visit("#/credentials")
	b.waitFor("the credentials' use", `document.querySelector('tr[data-id="`+credID+`"] .cred-usage') &&
		document.querySelector('tr[data-id="`+credID+`"] .cred-usage').textContent === '1 subscription'`)
	b.waitFor("the last toast gone", `(() => { const t = document.getElementById('toast'); return !t || getComputedStyle(t).opacity === '0' })()`)
	b.shot("10c-credentials-in-use")

	// A state change without the CSRF token is refused, from the page and
	// from anywhere else holding the cookie.
	if code := eval[int](b, `fetch('/api/dispatch/jobs/`+target+`/replay', {method: 'POST'}).then(r => r.text().then(() => r.status))`); code != http.StatusForbidden {
		t.Errorf("replay from the page without the CSRF token = %d, want 403", code)
	}
	req, _ := http.NewRequest("POST", in.apiURL+"/api/admin/dispatch/credentials/"+credID+"/rotate", nil)
	req.AddCookie(&http.Cookie{Name: "dispatch_session", Value: sessionID})
	req.Header.Set("X-CSRF-Token", "guessed")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("rotate with the cookie and a wrong CSRF token = %d, want 403", resp.StatusCode)
	}

	// Sign out: the session is gone on the server too.
	b.do("sign out", chromedp.Click(chromedp.ID("logout")))
	b.waitFor("the sign-in form again", `!!document.querySelector('#login-form')`)
	req, _ = http.NewRequest("GET", in.apiURL+"/api/dispatch/jobs", nil)
	req.AddCookie(&http.Cookie{Name: "dispatch_session", Value: sessionID})
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old session after sign-out = %d, want 401", resp.StatusCode)
	}

	b.mu.Lock()
	self := strings.TrimPrefix(in.apiURL, "http://")
	for host, n := range b.hosts {
		if host != self {
			t.Errorf("the console made %d requests to another host, %s", n, host)
		}
	}
	b.mu.Unlock()
	b.noUncaughtErrors()
}

// countAll is the number of jobs.
func (in *instance) countAll() int {
	in.t.Helper()
	var page struct {
		TotalItems int `json:"totalItems"`
	}
	in.do("GET", "/api/dispatch/jobs?size=1", apiToken, nil, &page)
	return page.TotalItems
}
