package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// signIn opens the console and signs in with the admin token.
func (b *browser) signIn() {
	b.t.Helper()
	b.do("open console", chromedp.Navigate(b.base+"/console/"))
	b.waitFor("the sign-in form", `!!document.querySelector('#login-form')`)
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), adminToken), chromedp.Click(chromedp.ID("login")))
	b.waitFor("the overview", `!!document.querySelector('#overview .cards')`)
}

// text is the textContent of the first element matching selector ("" when none).
func (b *browser) text(selector string) string {
	b.t.Helper()
	return eval[string](b, `(() => { const e = document.querySelector(`+quoteJS(selector)+`); return e ? e.textContent : '' })()`)
}

// hangingReceiver answers /ok at once, /gone with 410 (not retried: the
// job ends in ERROR), /flaky with 503 the first time and 200 after, and
// holds /hang until the test ends.
func hangingReceiver(t *testing.T) *httptest.Server {
	release := make(chan struct{})
	var flaky atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flaky":
			if flaky.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/gone":
			http.Error(w, "this endpoint was removed", http.StatusGone)
			return
		}
		w.Header().Set("X-Receipt", "warehouse-7")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before the instances stop: their deliveries end
	return srv
}

// TestConsoleOverviewInSplitMode looks at the Overview as an operator on
// call would, with the API and two routers in separate processes and
// delivery falling behind: a job whose receiver does not answer holds its
// group, so the next job of the group waits behind it (not behind
// dispatch: it does not age the backlog), and a job sent to a queue no
// router reads waits, due, and the backlog says so; both routers' pools
// show, and a router that stops says so.
func TestConsoleOverviewInSplitMode(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	// A queue the API may send to and no router reads.
	unread := sqstest.New(t, 30*time.Second)
	slow := map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "2m", "DISPATCH_SHUTDOWN_TIMEOUT": "2m10s"} // the held delivery stays IN_PROGRESS
	in := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "2m", "DISPATCH_SHUTDOWN_TIMEOUT": "2m10s",
		"DISPATCH_QUEUE_URL": "", "DISPATCH_QUEUES": q.URL + "," + unread.URL})
	slow["DISPATCH_PROCESS_URL"] = in.apiURL + "/api/dispatch/process"
	startWith(t, "router", dbURL, q, slow)
	rc := hangingReceiver(t)

	held := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/hang",
		"payload": `{"n":1}`, "groupId": "customer-1"})
	in.waitStatus(held.ID, 30*time.Second, "IN_PROGRESS")
	// A second router, started once the first holds the hanging delivery:
	// stopping it below waits for nothing.
	second := startWith(t, "router", dbURL, q, slow)
	waiting := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/ok",
		"payload": `{"n":2}`, "groupId": "customer-1"})
	stranded := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/ok",
		"payload": `{"n":5}`, "queueUrl": unread.URL})
	done := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/ok", "payload": `{"n":3}`})
	retried := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/flaky", "payload": `{"n":4}`})
	in.waitStatus(done.ID, 30*time.Second, "COMPLETED")
	in.waitStatus(retried.ID, 30*time.Second, "COMPLETED")
	// A stray pointer naming a pool no router has (sent by a router of an
	// older configuration, say): a router routes it to the default pool
	// with a warning, and reports the warning to the database.
	stray, _ := json.Marshal(dispatch.Pointer{ID: done.ID, PoolCode: "RETIRED-POOL", MediationType: "HTTP", MessageGroupID: done.ID})
	if _, err := q.Open(t).SendBatch(t.Context(), []queue.Entry{{Body: string(stray), GroupID: done.ID, DeduplicationID: "stray-" + done.ID}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() bool {
		var mon struct {
			Routers []struct {
				Warnings []struct{ Type, Pool string }
			}
		}
		in.do("GET", "/api/dispatch/monitoring", apiToken, nil, &mon)
		for _, r := range mon.Routers {
			for _, w := range r.Warnings {
				if w.Type == "UNKNOWN_POOL" && w.Pool == "RETIRED-POOL" {
					return true
				}
			}
		}
		return false
	}, func() string { return "no router reported the stray pointer's unknown pool" })

	b := newBrowser(t, in.apiURL)
	b.signIn()
	b.waitFor("the backlog", `!!document.querySelector('#backlog')`)
	// The stranded job has waited since it was created: the oldest wait
	// counts up from there (the held job's successor, older, waits on its
	// group, not on dispatch).
	b.waitFor("a wait of at least 2 s", `/^([2-9]|\d\d+) s$|min|h$/.test(document.querySelector('#backlog-oldest .mini-value').textContent)`)
	if got, want := b.text("#backlog-oldest .mini-sub"), "due since"; !strings.Contains(got, want) {
		t.Errorf("under the oldest wait: %q, want %q", got, want)
	}
	for sel, want := range map[string]string{"#backlog-pending .mini-value": "2", "#backlog-in-progress .mini-value": "1",
		"#backlog-failed .mini-value": "0"} {
		if got := b.text(sel); got != want {
			t.Errorf("%s reads %q, want %q (job %s holds its group, %s waits behind it, %s on a queue no router reads)",
				sel, got, want, held.ID, waiting.ID, stranded.ID)
		}
	}
	if got := b.text("#backlog-queue .mini-sub"); !strings.Contains(got, "in flight") || !strings.Contains(got, q.Name) {
		t.Errorf("the queue's depth reads %q, want its counts and its name %s", got, q.Name)
	}
	if !regexp.MustCompile(`^\d+$`).MatchString(b.text("#backlog-queue .mini-value")) {
		t.Errorf("the queue's depth reads %q, want a count", b.text("#backlog-queue .mini-value"))
	}
	// Both finished jobs were delivered, one on its second attempt: the
	// success rate is per job (2 of 2), the attempts' (2 of 3) beside it.
	if got := b.text("#card-success .stat-value"); got != "100.0%" {
		t.Errorf("the success rate reads %q, want 100.0%% (both finished jobs delivered)", got)
	}
	if got := b.text("#card-success .stat-sub"); got != "2 of 2 finished jobs delivered · 66.6% of attempts" {
		t.Errorf("under the success rate: %q", got)
	}
	// Loopback deliveries take well under a millisecond: never "0 ms".
	for _, sel := range []string{"#card-p50 .stat-value", "#card-p99 .stat-value"} {
		if got := b.text(sel); !regexp.MustCompile(`^(<1 ms|\d+(\.\d)? ms)$`).MatchString(got) || got == "0 ms" {
			t.Errorf("%s reads %q, want a latency such as <1 ms or 1.5 ms", sel, got)
		}
	}
	// Both routers' pools, as each reported them to the database: neither
	// process is reachable from the API.
	b.waitFor("two routers with their pools", `document.querySelectorAll('#pools .router [data-pool="DISPATCH-POOL"]').length === 2 &&
		[...document.querySelectorAll('#pools .router-head .chip')].filter((c) => c.textContent === 'UP').length === 2`)
	// Each router's queue, by name, as it reported it with SQS's counts.
	queueRows := `[...document.querySelectorAll('#pools .router tr[data-queue=` + quoteJS(q.Name) + `]')]`
	b.waitFor("both routers' queue", queueRows+`.length === 2`)
	for i, row := range eval[[]string](b, queueRows+`.map((tr) => [...tr.cells].map((td) => td.textContent).join(' | '))`) {
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(q.Name) + ` \| UP \| \d+ \| \d+ \| \d+ \| \d+ \| \d+ \(\d+ msgs\) \| 0$`).MatchString(row) {
			t.Errorf("router %d's queue row reads %q, want %s UP with its depth, held messages, receives and no errors", i+1, row, q.Name)
		}
	}
	// The router that holds the hanging delivery says so: the oldest
	// message it holds is that job's, mediating.
	b.waitFor("the held delivery among the messages held", `[...document.querySelectorAll('#pools .router-in-flight')].some((e) =>
		e.querySelector('a') && e.querySelector('a').textContent === `+quoteJS(held.ID)+` && e.textContent.includes('mediating, group customer-1'))`)
	// The stray pointer's warning, with its pool and its job.
	b.waitFor("the unknown pool's warning", `[...document.querySelectorAll('#pools .router-warnings tr[data-type="UNKNOWN_POOL"]')].some((tr) =>
		tr.textContent.includes('"RETIRED-POOL" is not configured') && tr.textContent.includes(`+quoteJS(done.ID)+`))`)
	b.shot("20-overview-split-backlog")
	// A router that stops says so in its last report.
	if err := second.stop(); err != nil {
		t.Fatalf("the second router: %v", err)
	}
	b.visit("#/jobs")
	b.visit("#/overview")
	b.waitFor("one router up, one stopped", `document.querySelectorAll('#pools .router [data-pool]').length === 1 &&
		document.querySelector('#pools .router-down') && document.querySelector('#pools .router-down').textContent.includes('STOPPED')`)
	// The Overview refreshes by itself (every 15 s): the router that holds
	// the hanging delivery has reported it in flight since.
	b.waitFor("the held delivery in flight", `document.querySelector('#pools .router [data-pool]').textContent.includes('1 / 20')`)
	b.shot("20b-overview-router-stopped")
	// A router of a version from before queues, held messages and warnings
	// were reported writes its pools only, as its statement did: it still
	// shows, its pools with it, and says where the rest is.
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `INSERT INTO dispatch_router (id, host, version, pools, started_at, reported_at)
		VALUES ('old-host:1:abcdef', 'old-host', '0.9.0', $1, now() - interval '1 hour', now())`,
		`[{"code":"DISPATCH-POOL","concurrency":5,"inFlight":0,"buffered":0,"succeeded":3,"retried":0,"failed":0,"rateLimited":0,"avgMediationMillis":1.5}]`); err != nil {
		t.Fatal(err)
	}
	b.visit("#/jobs")
	b.visit("#/overview")
	b.waitFor("the older router with its pools", `(() => { const r = document.querySelector('#pools .router[data-router="old-host:1:abcdef"]');
		return !!r && !!r.querySelector('[data-pool="DISPATCH-POOL"]') && !!r.querySelector('.router-old') && !r.querySelector('[data-queue]') })()`)
	b.shot("20c-overview-older-router")
	b.do("follow the pending count", chromedp.Click(chromedp.ID("backlog-pending")))
	b.waitFor("the pending jobs", `location.hash === '#/jobs?status=PENDING' && (() => { const ids = [...document.querySelectorAll('#jobs-table tbody tr')].map((r) => r.dataset.id).sort();
		return ids.length === 2 && ids.includes(`+quoteJS(waiting.ID)+`) && ids.includes(`+quoteJS(stranded.ID)+`) })()`)

	// Subscriptions: one endpoint answers, the other is gone; each row
	// says how its deliveries went, the failing one with its error.
	subs := map[string]string{}
	for name, path := range map[string]string{"Warehouse": "/ok", "Old partner": "/gone"} {
		var sub struct{ ID string }
		if code := in.do("POST", "/api/dispatch/subscriptions", apiToken, map[string]any{"name": name, "url": rc.URL + path,
			"eventTypes": []string{"order.*"}}, &sub); code != http.StatusCreated {
			t.Fatalf("create subscription %s: %d", name, code)
		}
		subs[name] = sub.ID
	}
	for range 2 {
		var ev struct{ Jobs []struct{ ID string } }
		if code := in.do("POST", "/api/dispatch/events", apiToken, map[string]any{"source": "shop", "type": "order.created", "data": map[string]any{}}, &ev); code != http.StatusCreated || len(ev.Jobs) != 2 {
			t.Fatalf("publish: %d, %d jobs; want 201 and 2", code, len(ev.Jobs))
		}
		for _, j := range ev.Jobs {
			in.waitStatus(j.ID, 30*time.Second, "COMPLETED", "ERROR")
		}
	}
	b.visit("#/subscriptions")
	b.waitFor("both subscriptions' health", `document.querySelectorAll('#subscriptions-table .health .rate').length === 2`)
	row := func(name string) string { return `tr[data-id="` + subs[name] + `"] .sub-health` }
	if got := b.text(row("Warehouse") + " .rate"); got != "100%" {
		t.Errorf("Warehouse's success rate reads %q, want 100%%", got)
	}
	if got := b.text(row("Warehouse")); !strings.Contains(got, "of the last 2 jobs delivered") || !strings.Contains(got, "Last success") || strings.Contains(got, "Last failure") {
		t.Errorf("Warehouse's health reads %q, want 2 jobs delivered and no failure", got)
	}
	if got := b.text(row("Old partner") + " .rate"); got != "0%" {
		t.Errorf("the failing subscription's success rate reads %q, want 0%%", got)
	}
	if got := b.text(row("Old partner") + " .failure-reason"); got != "HTTP 410: not retryable" {
		t.Errorf("the failing subscription's last failure reads %q, want its error", got)
	}
	if got := b.text(row("Old partner") + " .last-success"); got != "Last success never" {
		t.Errorf("the failing subscription's last success reads %q, want never", got)
	}
	b.shot("21-subscriptions-health")

	// A signed job with a bearer token: its attempt shows the headers as
	// sent and received, and neither the token nor the signature.
	var cred struct{ ID, SigningSecret string }
	if code := in.do("POST", "/api/admin/dispatch/credentials", adminToken, map[string]any{"bearerToken": "partner-bearer-9f2c",
		"allowedTargets": []string{rc.URL}}, &cred); code != http.StatusCreated || cred.SigningSecret == "" {
		t.Fatalf("create credentials: %d", code)
	}
	signed := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/ok", "payload": `{"n":5}`,
		"credentialsId": cred.ID, "headers": map[string]string{"X-Tenant": "acme"}})
	in.waitStatus(signed.ID, 30*time.Second, "COMPLETED")
	b.visit("#/jobs/" + signed.ID)
	b.waitFor("the signed job's attempt", `!!document.querySelector('.attempt-headers summary') && document.querySelector('#job-id').textContent === `+quoteJS(signed.ID))
	b.do("open the attempt's headers", chromedp.Click(chromedp.CSS(".attempt-headers summary")))
	header := func(side, name string) string {
		return eval[string](b, `(() => { const r = [...document.querySelectorAll('.`+side+`-headers tr')].find((tr) => tr.querySelector('th').textContent === `+quoteJS(name)+`);
			return r ? r.querySelector('td').textContent : '(absent)' })()`)
	}
	for name, want := range map[string]string{"Authorization": "[redacted]", "X-Flowcatalyst-Signature": "[redacted]", "X-Tenant": "acme",
		"X-Dispatch-Job-Id": signed.ID, "X-Dispatch-Attempt": "1", "Content-Type": "application/json"} {
		if got := header("request", name); got != want {
			t.Errorf("request header %s reads %q, want %q", name, got, want)
		}
	}
	if got := header("request", "X-Flowcatalyst-Timestamp"); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT`).MatchString(got) {
		t.Errorf("request header X-Flowcatalyst-Timestamp reads %q", got)
	}
	if got := header("response", "X-Receipt"); got != "warehouse-7" {
		t.Errorf("response header X-Receipt reads %q", got)
	}
	if page := eval[string](b, `document.body.innerText + document.body.textContent`); strings.Contains(page, "partner-bearer-9f2c") || strings.Contains(page, cred.SigningSecret) {
		t.Error("the job's page shows the bearer token or the signing secret")
	}
	b.shot("22-job-attempt-headers")

	b.noUncaughtErrors()
}
