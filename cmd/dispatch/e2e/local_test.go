package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// In `all` a job created while a worker is idle is delivered in process,
// with no SQS request: the queue holds it only should it wait 500 ms for a
// worker (a loaded machine), and then instead of the pool.
func TestAllDeliversNewJobsInProcess(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, nil)
	// A job created before the router runs goes through the queue.
	var ready struct{ Status string }
	eventually(t, 20*time.Second, func() bool { return in.routerJSON("/health/ready", &ready) == http.StatusOK },
		func() string { return "the router never became ready" })
	var ids []string
	for range 5 {
		ids = append(ids, in.createJob(jobBody(rc.URL, nil)).ID)
	}
	for _, id := range ids {
		in.waitStatus(id, 20*time.Second, "COMPLETED")
	}
	fams := scrape(t, in.apiURL)
	if n, ok := sample(fams, "dispatch_router_messages_local_total"); !ok || n != 5 {
		t.Errorf("dispatch_router_messages_local_total = %v (found %v), want 5", n, ok)
	}
	backstopped, _ := sample(fams, "dispatch_router_local_requeued_total", "reason", "backstop")
	eventually(t, 20*time.Second, in.queueEmpty, func() string { return "a copy left on the queue" })
	var queues []struct{ MessagesReceived int }
	in.routerJSON("/monitoring/queues", &queues)
	if len(queues) != 1 || float64(queues[0].MessagesReceived) != backstopped {
		t.Errorf("/monitoring/queues = %+v with %v jobs moved there by the backstop: want only those received", queues, backstopped)
	}
	if backstopped > 0 {
		t.Logf("%v of 5 jobs waited 500 ms for a worker and went through the queue (a loaded machine)", backstopped)
	}
	if n := rc.count(); n != 5 {
		t.Errorf("target got %d requests for 5 jobs, want 5", n)
	}
}

// A replica of `all` killed while it delivers a job in process leaves the
// job to the others, as a killed router would: the claim a delivery
// running long writes keeps the job owed a pointer, the sweep of the other
// replica sends it once the claim has gone stale, and that replica records
// the lost attempt and delivers again.
func TestAllKilledMidLocalDeliveryJobIsTakenOverAndCompletes(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 5*time.Second)
	// The first request is slow; its sender dies meanwhile.
	rc, arrived := slowFirstReceiver(t, 3*time.Second)
	env := baseEnv(dbURL, q, map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "2s"}) // claim lease 2×2s+15s
	a := spawn(t, "all", env)
	b := spawn(t, "all", env)
	in := &instance{t: t, apiURL: a.apiURL, routerURL: a.routerURL, queue: q, dbURL: dbURL}
	// Once a's router runs, the job a creates is a's to deliver in process.
	var ready struct{ Status string }
	eventually(t, 20*time.Second, func() bool { return in.routerJSON("/health/ready", &ready) == http.StatusOK },
		func() string { return "a's router never became ready" })
	j := in.createJob(jobBody(rc.URL, nil))
	waitClosed(t, arrived, 20*time.Second, "delivery never started")
	in.waitStatus(j.ID, 20*time.Second, "IN_PROGRESS") // the claim is written after a second
	a.kill()
	in.apiURL, in.routerURL = b.apiURL, b.routerURL
	done := in.waitStatus(j.ID, 60*time.Second, "COMPLETED", "ERROR")
	at := in.attempts(j.ID)
	if done.Status != "COMPLETED" || len(at) != 2 || at[0].Status != "TIMEOUT" || at[1].Status != "SUCCESS" {
		t.Fatalf("job %s with attempts %+v; want COMPLETED after a TIMEOUT (outcome unknown) and a SUCCESS", done.Status, at)
	}
}

// The Overview of `dispatch all` names a delivery it holds in process as
// such: it came from no queue.
func TestConsoleShowsADeliveryTakenInProcess(t *testing.T) {
	t.Parallel()
	slow := map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "2m", "DISPATCH_SHUTDOWN_TIMEOUT": "2m10s"} // the held delivery stays IN_PROGRESS
	in := start(t, "all", slow)
	rc := hangingReceiver(t)
	var ready struct{ Status string }
	eventually(t, 20*time.Second, func() bool { return in.routerJSON("/health/ready", &ready) == http.StatusOK },
		func() string { return "the router never became ready" })
	held := in.createJob(map[string]any{"source": "shop", "type": "order.paid", "targetUrl": rc.URL + "/hang", "payload": `{"n":1}`})
	in.waitStatus(held.ID, 30*time.Second, "IN_PROGRESS")

	b := newBrowser(t, in.apiURL)
	b.signIn()
	b.waitFor("the held delivery, taken in process", `[...document.querySelectorAll('#pools .router-in-flight')].some((e) =>
		e.querySelector('a') && e.querySelector('a').textContent === `+quoteJS(held.ID)+` && e.textContent.includes('mediating') &&
		e.textContent.includes('mediating, pool DISPATCH-POOL, handed over at creation, no queue'))`)
	b.shot("23-overview-in-process")
}

// apiSample reads one sample of the API's /metrics.
func apiSample(t *testing.T, apiURL, name string, labels ...string) float64 {
	t.Helper()
	v, _ := sample(scrape(t, apiURL), name, labels...)
	return v
}

// waitForOfferRequest waits until a router's request for new jobs waits in
// the API: a job created now is offered to it.
func waitForOfferRequest(t *testing.T, apiURL string) {
	t.Helper()
	eventually(t, 20*time.Second, func() bool { return apiSample(t, apiURL, "dispatch_api_offer_requests_waiting") >= 1 },
		func() string { return "no router asked the API for new jobs" })
}

// In split mode a router with an idle worker asks the API for new jobs,
// and a job created meanwhile is delivered without the queue: no SQS
// request for it at all. A retry goes back to the API, whose outbox sends
// the job when it is due, through the queue.
func TestSplitRouterTakesNewJobsFromTheAPI(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	in := startWith(t, "api", dbURL, q, nil)
	rt := spawn(t, "router", baseEnv(dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process"}))
	rc := newReceiver(t, func(n int, _ *http.Request, _ []byte) int {
		if n == 4 { // the fourth job's first attempt
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	for range 3 {
		waitForOfferRequest(t, in.apiURL)
		j := in.createJob(jobBody(rc.URL, nil))
		in.waitStatus(j.ID, 20*time.Second, "COMPLETED")
	}
	if n := apiSample(t, in.apiURL, "dispatch_api_jobs_offered_total"); n != 3 {
		t.Errorf("dispatch_api_jobs_offered_total = %v, want 3", n)
	}
	fams := scrape(t, rt.routerURL)
	local, _ := sample(fams, "dispatch_router_messages_local_total")
	backstopped, _ := sample(fams, "dispatch_router_local_requeued_total", "reason", "backstop")
	if local != 3 {
		t.Errorf("dispatch_router_messages_local_total = %v, want 3", local)
	}
	received, _ := sample(fams, "dispatch_router_messages_received_total")
	if received != backstopped {
		t.Errorf("the router received %v messages from the queue with %v jobs moved there by the backstop: want only those", received, backstopped)
	}

	// A retry: the router gives the job back, the API's outbox sends it
	// when due, and the router takes it from the queue.
	waitForOfferRequest(t, in.apiURL)
	j := in.createJob(jobBody(rc.URL, nil))
	done := in.waitStatus(j.ID, 30*time.Second, "COMPLETED", "ERROR")
	if at := in.attempts(j.ID); done.Status != "COMPLETED" || len(at) != 2 {
		t.Fatalf("job %s with %d attempts, want COMPLETED after a retry", done.Status, len(at))
	}
	fams = scrape(t, rt.routerURL)
	if n, _ := sample(fams, "dispatch_router_local_requeued_total", "reason", "retry"); n != 1 {
		t.Errorf(`dispatch_router_local_requeued_total{reason="retry"} = %v, want 1`, n)
	}
	if n, _ := sample(fams, "dispatch_router_messages_received_total"); n < 1 {
		t.Errorf("the retry never came through the queue (received %v)", n)
	}
	if n := rc.count(); n != 5 {
		t.Errorf("target got %d requests for 4 jobs and a retry, want 5", n)
	}
	eventually(t, 20*time.Second, in.queueEmpty, func() string { return "a copy left on the queue" })
}

// A router killed while it mediates a job the API offered it loses
// nothing: the API finishes the delivery the router asked for, and a job
// whose outcome the router never heard of is still owed nothing more.
// A job it took and had not started is sent by the API's outbox sweep
// once its send lease ends.
func TestSplitRouterKilledHoldingOfferedJobsLosesNothing(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 5*time.Second)
	in := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "2s"})
	routerEnv := baseEnv(dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process", "DISPATCH_DELIVERY_TIMEOUT": "2s"})
	rc, arrived := slowFirstReceiver(t, 3*time.Second)
	a := spawn(t, "router", routerEnv)
	waitForOfferRequest(t, in.apiURL)
	j := in.createJob(jobBody(rc.URL, nil))
	waitClosed(t, arrived, 20*time.Second, "delivery never started")
	a.kill()
	spawn(t, "router", routerEnv)
	done := in.waitStatus(j.ID, 90*time.Second, "COMPLETED", "ERROR")
	if done.Status != "COMPLETED" {
		t.Fatalf("job %s with attempts %+v, want COMPLETED", done.Status, in.attempts(j.ID))
	}
	if n := apiSample(t, in.apiURL, "dispatch_api_jobs_offered_total"); n < 1 {
		t.Errorf("the job was never offered (dispatch_api_jobs_offered_total = %v)", n)
	}
	eventually(t, 30*time.Second, in.queueEmpty, func() string { return "a copy left on the queue" })
}

// takeOffer asks the API for one new job as a router would, with the
// internal token, and returns the raw offer once a job is created.
func takeOffer(t *testing.T, in *instance, create func() string) (string, json.RawMessage) {
	t.Helper()
	type answer struct {
		Offers []struct {
			Pointer struct{ ID string }
			Handle  json.RawMessage
		}
	}
	got := make(chan answer, 1)
	go func() {
		var a answer
		in.do("POST", "/api/dispatch/process/offers", internalToken, map[string]any{"room": map[string]int{"DISPATCH-POOL": 1}, "queues": []string{in.queue.Name}, "waitSeconds": 15}, &a)
		got <- a
	}()
	waitForOfferRequest(t, in.apiURL)
	id := create()
	a := <-got
	if len(a.Offers) != 1 || a.Offers[0].Pointer.ID != id {
		t.Fatalf("offers %+v, want job %s", a.Offers, id)
	}
	return id, a.Offers[0].Handle
}

// A job a router took from the API reaches the queue when the router gives
// it back, and, when the router vanishes with it instead, once its send
// lease ends: the sweep sends it, and a router delivers it from the queue.
func TestOfferedJobsGivenBackOrAbandonedAreDelivered(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	in := startWith(t, "api", dbURL, q, nil)
	rc := newReceiver(t, nil)
	create := func() string { return in.createJob(jobBody(rc.URL, nil)).ID }

	given, h := takeOffer(t, in, create)
	if !in.queueEmpty() {
		t.Fatal("an offered job's pointer went to the queue as well")
	}
	if code := in.do("POST", "/api/dispatch/process/offers/give-back", internalToken, map[string]any{"handle": h, "afterSeconds": 0}, nil); code != http.StatusNoContent {
		t.Fatalf("give-back: %d, want 204", code)
	}
	abandoned, _ := takeOffer(t, in, create)
	abandonedAt := time.Now()

	// This router takes jobs from the queue only.
	spawn(t, "router", baseEnv(dbURL, q, map[string]string{
		"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process", "DISPATCH_LOCAL_DELIVERY": "false"}))
	in.waitStatus(given, 20*time.Second, "COMPLETED")
	in.waitStatus(abandoned, 90*time.Second, "COMPLETED")
	if waited := time.Since(abandonedAt); waited < 20*time.Second {
		t.Errorf("the abandoned job was delivered %v after it was offered, before its 30 s send lease ended", waited)
	}
	if n := rc.count(); n != 2 {
		t.Errorf("target got %d requests for 2 jobs, want 2", n)
	}
	eventually(t, 20*time.Second, in.queueEmpty, func() string { return "a copy left on the queue" })
}
