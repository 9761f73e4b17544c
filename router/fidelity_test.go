package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// sendEach sends one ungrouped-style message per id (each its own group) for
// pool.
func sendEach(t *testing.T, rq *queue.Queue, pool string, ids ...int) {
	t.Helper()
	for chunk := range slices.Chunk(ids, 10) {
		var entries []queue.Entry
		for _, id := range chunk {
			ptr, _ := json.Marshal(dispatch.Pointer{ID: strconv.Itoa(id), PoolCode: pool})
			entries = append(entries, queue.Entry{Body: string(ptr), GroupID: strconv.Itoa(id), DeduplicationID: fmt.Sprint(id)})
		}
		if _, err := rq.SendBatch(context.Background(), entries); err != nil {
			t.Fatal(err)
		}
	}
}

// slowAndFast is a router over rq with two pools, SLOW (one at a time)
// and FAST (four, the default), and a buffer of two.
func slowAndFast(t *testing.T, rq *queue.Queue, med router.Mediator) *router.Router {
	t.Helper()
	r, err := router.New(rq, med, router.Config{
		Pools:       []router.PoolConfig{{Code: "SLOW", Concurrency: 1}, {Code: "FAST", Concurrency: 4}},
		DefaultPool: "FAST", Buffer: 2,
		ReceiveWait: time.Second, MediationTimeout: time.Minute, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A pool whose target is slow (but answers) does not stop the router from
// receiving the other pools' messages: each pool holds at most its
// concurrency and its share of the buffer.
func TestASlowPoolDoesNotHoldUpTheOthers(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	unblock := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(unblock) }) })
	var mu sync.Mutex
	fast := map[string]bool{}
	med := &fakeMediator{fn: func(ptr dispatch.Pointer, _ int) error {
		if ptr.PoolCode == "SLOW" {
			<-unblock
			return nil
		}
		mu.Lock()
		fast[ptr.ID] = true
		mu.Unlock()
		return nil
	}}
	r := slowAndFast(t, rq, med)
	runUntilCleanup(t, r)
	slow := make([]int, 20)
	for i := range slow {
		slow[i] = 1000 + i
	}
	sendEach(t, rq, "SLOW", slow...)
	eventually(t, 10*time.Second, func() bool { return r.Stats()[0].InFlight == 1 }, "the slow pool busy")
	sendEach(t, rq, "FAST", 1, 2, 3, 4, 5)
	eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fast) == 5
	}, "the fast pool's five messages mediated while the slow pool is busy")
	if s := r.Stats()[0]; s.PoolFull == 0 {
		t.Errorf("the slow pool's stats count no message given back for room: %+v", s)
	}
	once.Do(func() { close(unblock) })
}

// A full pool's backlog, larger than the router can give back between two
// of its returns, does not keep the other pools' messages from being
// received: each return waits longer than the last, and a receive's
// messages go back in one call, not one each. Every SQS call here takes
// 10 ms longer, as a real queue's do. Before, the backlog came back every
// second or two and filled every receive.
func TestAFullPoolsBacklogDoesNotStarveTheOthers(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	var (
		mu               sync.Mutex
		changes, entries int // ChangeMessageVisibilityBatch calls and their entries
	)
	rq := proxiedQueue(t, q, func(_ http.ResponseWriter, r *http.Request, body []byte, _ func()) bool {
		time.Sleep(10 * time.Millisecond)
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ChangeMessageVisibilityBatch" {
			var in struct{ Entries []json.RawMessage }
			_ = json.Unmarshal(body, &in)
			mu.Lock()
			changes++
			entries += len(in.Entries)
			mu.Unlock()
		}
		return false
	})
	unblock := make(chan struct{})
	var once sync.Once
	var fast atomic.Int32
	med := &fakeMediator{fn: func(ptr dispatch.Pointer, _ int) error {
		if ptr.PoolCode == "SLOW" {
			<-unblock
			return nil
		}
		fast.Add(1)
		return nil
	}}
	r := slowAndFast(t, rq, med)
	slow := make([]int, 500)
	for i := range slow {
		slow[i] = 1000 + i
	}
	sendEach(t, q.Open(t), "SLOW", slow...)
	sendEach(t, q.Open(t), "FAST", 1, 2, 3, 4, 5)
	runUntilCleanup(t, r)
	// Registered after the router's stop, so run before it: the slow
	// mediations end, and the router can stop, whatever the test's end.
	t.Cleanup(func() { once.Do(func() { close(unblock) }) })
	// About 3 s alone; the bound is for a box shared with the whole suite
	// under the race detector, where a receive cycle takes many times
	// longer (56 s seen).
	eventually(t, 90*time.Second, func() bool { return fast.Load() == 5 },
		"the fast pool's five messages mediated behind 500 for the full slow pool")
	mu.Lock()
	defer mu.Unlock()
	if changes == 0 || entries < 4*changes {
		t.Errorf("%d visibility changes in %d calls: want a receive's messages given back together", entries, changes)
	}
	once.Do(func() { close(unblock) })
}

// A message given back because its pool is full comes back after a
// second or two the first time, however often the queue has handed it out
// before (retries, a grouped job's rechecks): the delay doubles with the
// times its pool was full, not with its receive count.
func TestAFullPoolsFirstReturnIsSoonWhateverTheReceiveCount(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	slow := []int{2000, 2001, 2002, 2003, 2004, 2005, 2006, 2007, 2008, 2009}
	sendEach(t, rq, "SLOW", slow...)
	for range 6 { // each handed out six times before the router sees it
		msgs, err := rq.Receive(t.Context(), 10, 0, 0, "")
		if err != nil || len(msgs) != len(slow) {
			t.Fatalf("receive: %d messages, %v; want %d", len(msgs), err, len(slow))
		}
		back := make([]queue.Visibility, len(msgs))
		for i, m := range msgs {
			back[i] = queue.Visibility{Receipt: m.Receipt}
		}
		if err := rq.ChangeVisibilityBatch(t.Context(), back); err != nil {
			t.Fatal(err)
		}
	}
	unblock := make(chan struct{})
	var once sync.Once
	r := slowAndFast(t, rq, &fakeMediator{fn: func(dispatch.Pointer, int) error { <-unblock; return nil }})
	runUntilCleanup(t, r)
	t.Cleanup(func() { once.Do(func() { close(unblock) }) }) // before the router's stop
	var first int64
	eventually(t, 10*time.Second, func() bool { first = r.Stats()[0].PoolFull; return first >= 5 },
		"the slow pool's messages beyond its room given back")
	eventually(t, 8*time.Second, func() bool { return r.Stats()[0].PoolFull >= first+5 },
		"the messages given back received again, within seconds, and given back again")
	once.Do(func() { close(unblock) })
}

// A delete the queue refuses (the router's role lacks sqs:DeleteMessage)
// is a warning on /monitoring/warnings and a metric, not a log line
// alone: each finished message comes back and, grouped, holds its group.
func TestAFailedDeleteIsAWarningAndAMetric(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := proxiedQueue(t, q, func(w http.ResponseWriter, r *http.Request, _ []byte, _ func()) bool {
		if r.Header.Get("X-Amz-Target") != "AmazonSQS.DeleteMessageBatch" {
			return false
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#AccessDenied","message":"not authorized to perform sqs:DeleteMessage"}`))
		return true
	})
	var mediated atomic.Int32
	reg := prometheus.NewRegistry()
	r, err := router.New(rq, &fakeMediator{fn: func(dispatch.Pointer, int) error { mediated.Add(1); return nil }}, router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 1}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	sendEach(t, q.Open(t), dispatch.DefaultPool, 1)
	eventually(t, 10*time.Second, func() bool {
		for _, w := range r.Warnings() {
			if w.Type == router.WarnDeleteFailed && strings.Contains(w.Message, "sqs:DeleteMessage") {
				return true
			}
		}
		return false
	}, "a DELETE_FAILED warning naming the queue's refusal")
	if mediated.Load() != 1 {
		t.Errorf("%d mediations, want 1", mediated.Load())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	failures := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "dispatch_router_delete_failures_total" {
			failures = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if failures < 1 {
		t.Errorf("dispatch_router_delete_failures_total = %v, want at least 1", failures)
	}
}

// A message waiting for its pool's rate limit is not reported as in
// flight: a pool at its rate, not at its concurrency, would look saturated
// and its target slow, the wait counted as mediation time.
func TestAMessageWaitingForItsRateIsNotMediating(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	var mediated atomic.Int32
	r, err := router.New(rq, &fakeMediator{fn: func(dispatch.Pointer, int) error { mediated.Add(1); return nil }}, router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 2, RatePerMinute: 1}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	sendEach(t, rq, dispatch.DefaultPool, 1, 2)
	eventually(t, 10*time.Second, func() bool {
		held := r.InFlight()
		return mediated.Load() == 1 && len(held) == 1
	}, "one message mediated, the other held for its turn (a minute away)")
	if s := r.Stats()[0]; s.InFlight != 0 || s.Buffered != 1 {
		t.Errorf("pool stats in flight %d, buffered %d; want 0 and 1 (the message waits for its turn)", s.InFlight, s.Buffered)
	}
	if m := r.InFlight()[0]; m.State != router.Buffered || m.MediatingMillis != 0 {
		t.Errorf("the message waiting for its turn is %s for %d ms; want %s", m.State, m.MediatingMillis, router.Buffered)
	}
}

// A stop gives back, unmediated, the messages whose pool's rate limit had
// them wait for their turn: nothing new starts once the stop has begun.
func TestAStopStartsNoMediationWaitingForItsRate(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	first := make(chan struct{})
	var once sync.Once
	med := &fakeMediator{fn: func(dispatch.Pointer, int) error {
		once.Do(func() { close(first) })
		return nil
	}}
	r, err := router.New(rq, med, router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 3, RatePerMinute: 6}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 30 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	sendEach(t, rq, dispatch.DefaultPool, 1, 2, 3)
	<-first
	// The other two wait for their turn (one each 10 s) in their workers.
	eventually(t, 10*time.Second, func() bool { s := r.Stats()[0]; return s.Buffered == 2 && s.InFlight == 0 },
		"two messages waiting for their turn (buffered, not mediating)")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stop waited for the rate limit")
	}
	if calls := med.seen(); len(calls) != 1 {
		t.Errorf("mediated %v, want only the first: the others had not started when the stop began", calls)
	}
	// They are back on the queue at once.
	var back []queue.Message
	eventually(t, 5*time.Second, func() bool {
		msgs, err := rq.Receive(context.Background(), 10, 0, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		back = append(back, msgs...)
		return len(back) >= 2
	}, "the two waiting messages given back")
}

// A retry due later than SQS lets a message stay invisible (12 hours from
// its receive, of which some has passed) is released for what is left:
// SQS refuses a change asking for more, and the message would come back
// at its queue's visibility timeout, over and over.
func TestAReleaseAsksNoMoreThanSQSAllows(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, func(dispatch.Pointer, int) error {
		// (Some of the 12 hours has passed by the answer, if only
		// milliseconds: SQS refuses the whole 12 hours then.)
		return &dispatch.RetryAfter{Delay: 13 * time.Hour, Reason: "due in 13 h"}
	})
	b.send(t, "g", 1)
	eventually(t, 10*time.Second, func() bool { return len(b.med.seen()) == 1 }, "mediated")
	eventually(t, 10*time.Second, func() bool {
		attrs, err := b.q.Attributes(context.Background())
		return err == nil && attrs["ApproximateNumberOfMessagesNotVisible"] == "1" && b.router.Stats()[0].InFlight == 0
	}, "released")
	for _, w := range b.router.Warnings() {
		if w.Type == router.WarnVisibilityChange {
			t.Errorf("the release was refused: %s", w.Message)
		}
	}
}

// gatedProxy forwards SQS calls to the stand-in; while shut, it answers
// ReceiveMessage with no messages (after a short wait, as a poll would),
// without asking the stand-in: the router behind it receives nothing.
func gatedProxy(t *testing.T, upstream string) (*httptest.Server, *atomic.Bool) {
	t.Helper()
	var shut atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if shut.Load() && r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
			select {
			case <-r.Context().Done():
			case <-time.After(200 * time.Millisecond):
			}
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			_, _ = io.WriteString(w, `{}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		forwardTo(w, r, http.DefaultClient, upstream, body)
	}))
	t.Cleanup(ts.Close)
	return ts, &shut
}

// With several routers, the message a group waits for may come back to
// another router and be finished there; the group's next message, when it
// then reaches this router, is mediated, not bounced until the hold this
// router kept expires.
func TestAGroupsHoldEndsWhenItsFailedMessageIsDue(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	direct := q.Open(t)
	proxy, shut := gatedProxy(t, q.Endpoint)
	cfg := q.Config()
	cfg.Endpoint = proxy.URL
	rq, err := queue.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, q, rq, 1, func(ptr dispatch.Pointer, call int) error {
		if ptr.ID == "1" && call == 1 {
			shut.Store(true) // from here on, the other router gets it back
			return &dispatch.RetryAfter{Delay: 2 * time.Second, Reason: "target failed"}
		}
		return nil
	})
	b.send(t, "g", 1)
	b.send(t, "g", 2)
	// The other router: it receives the failed message once it is due,
	// delivers it, and deletes it.
	var first []queue.Message
	eventually(t, 15*time.Second, func() bool {
		msgs, err := direct.Receive(context.Background(), 1, 1, 30*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, msgs...)
		return len(first) > 0
	}, "the failed message back, at the other router")
	var ptr dispatch.Pointer
	if err := json.Unmarshal([]byte(first[0].Body), &ptr); err != nil || ptr.ID != "1" {
		t.Fatalf("the other router received %s, want job 1", first[0].Body)
	}
	if err := direct.DeleteBatch(context.Background(), []string{first[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	shut.Store(false)
	eventually(t, 8*time.Second, func() bool { return slices.Contains(b.med.seen(), "2") }, "job 2 mediated here")
}

// forwardTo passes an SQS request whose body has been read on to the
// stand-in at upstream, through client, and its answer back.
func forwardTo(w http.ResponseWriter, r *http.Request, client *http.Client, upstream string, body []byte) {
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
