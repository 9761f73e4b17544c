package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

func TestMain(m *testing.M) {
	sqstest.SetEnv()
	goleak.VerifyTestMain(m,
		// idle keep-alive connections of the AWS SDK's shared HTTP client
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// fakeMediator is a hand-written Mediator with a function field.
type fakeMediator struct {
	mu    sync.Mutex
	calls []string
	fn    func(ptr dispatch.Pointer, call int) error
}

func (f *fakeMediator) Mediate(ctx context.Context, ptr dispatch.Pointer) error {
	f.mu.Lock()
	f.calls = append(f.calls, ptr.ID)
	n := len(f.calls)
	f.mu.Unlock()
	if f.fn == nil {
		return nil
	}
	return f.fn(ptr, n)
}

func (f *fakeMediator) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

type bundle struct {
	q      sqstest.Queue
	rq     *queue.Queue
	med    *fakeMediator
	router *router.Router
	done   chan error
	cancel context.CancelFunc
}

// setup starts a router with one pool over a fresh queue.
func setup(t *testing.T, concurrency int, fn func(dispatch.Pointer, int) error) *bundle {
	t.Helper()
	q := sqstest.New(t, 30*time.Second)
	return setupOn(t, q, q.Open(t), concurrency, fn)
}

// setupOn starts a router with one pool that reaches queue q through rq
// (which may go through a proxy).
func setupOn(t *testing.T, q sqstest.Queue, rq *queue.Queue, concurrency int, fn func(dispatch.Pointer, int) error) *bundle {
	t.Helper()
	b := &bundle{q: q, rq: rq, med: &fakeMediator{fn: fn}, done: make(chan error, 1)}
	r, err := router.New(b.rq, b.med, router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: concurrency}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	b.router = r
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() { b.done <- r.Run(ctx) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// runOneWorker runs, until the test ends, a router with one pool of one
// worker over rq.
func runOneWorker(t *testing.T, rq *queue.Queue, med router.Mediator) {
	t.Helper()
	r, err := router.New(rq, med, router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 1}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
}

// runUntilCleanup runs r until the test ends, and fails the test should r
// not stop within 20 s of it.
func runUntilCleanup(t *testing.T, r *router.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("router did not stop")
		}
	})
}

func (b *bundle) stop(t *testing.T) {
	b.cancel()
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Error("router did not stop")
	}
}

func (b *bundle) send(t *testing.T, group string, ids ...int) {
	t.Helper()
	var entries []queue.Entry
	for _, id := range ids {
		ptr, _ := json.Marshal(dispatch.Pointer{ID: strconv.Itoa(id), PoolCode: dispatch.DefaultPool, MessageGroupID: group})
		entries = append(entries, queue.Entry{Body: string(ptr), GroupID: group, DeduplicationID: fmt.Sprint(id)})
	}
	if _, err := b.rq.SendBatch(context.Background(), entries); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	if !within(timeout, cond) {
		t.Fatalf("not within %s: %s", timeout, what)
	}
}

// within reports whether cond holds within timeout, checking it every 20 ms.
func within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func TestShutdownReleasesMessagesNotStarted(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	b := setup(t, 1, func(ptr dispatch.Pointer, call int) error {
		if call == 1 {
			close(started)
			<-release // in flight while the router is told to stop
		}
		return nil
	})
	b.send(t, "g", 1, 2, 3)
	<-started
	eventually(t, 10*time.Second, func() bool { return b.router.Stats()[0].Buffered == 2 }, "two messages buffered")
	b.cancel()
	// Phase 1 of the stop gives back what has not started while 1 is in flight.
	eventually(t, 10*time.Second, func() bool { s := b.router.Stats()[0]; return s.Buffered == 0 && s.InFlight == 1 }, "buffered messages released")
	close(release)
	if err := <-b.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	b.done <- nil // for cleanup
	// The two unstarted messages are visible again at once (visibility 0),
	// not after the queue's 30s timeout; the finished one was deleted.
	var got []string
	eventually(t, 5*time.Second, func() bool {
		msgs, err := b.rq.Receive(context.Background(), 10, 0, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			var p dispatch.Pointer
			_ = json.Unmarshal([]byte(m.Body), &p)
			got = append(got, p.ID)
		}
		return len(got) >= 2
	}, "unstarted messages released")
	slices.Sort(got)
	if !slices.Equal(got, []string{"2", "3"}) {
		t.Errorf("after shutdown the queue holds %v, want [2 3]", got)
	}
	if calls := b.med.seen(); !slices.Equal(calls, []string{"1"}) {
		t.Errorf("mediated %v, want only the in-flight 1", calls)
	}
}

func TestRetryHoldsBackTheRestOfTheGroup(t *testing.T) {
	t.Parallel()
	b := setup(t, 4, func(ptr dispatch.Pointer, call int) error {
		if ptr.ID == "1" && call == 1 {
			return &dispatch.RetryAfter{Delay: time.Second, Reason: "target failed"}
		}
		return nil
	})
	b.send(t, "g", 1, 2, 3)
	b.send(t, "other", 10)
	if !within(20*time.Second, func() bool { return len(b.med.seen()) >= 5 }) {
		// Say where it stopped: the mediations so far and the queue's counts.
		attrs, err := b.q.Attributes(context.Background())
		t.Fatalf("not all mediated within 20 s: mediated %v; queue %v (%v); pool %+v", b.med.seen(), attrs, err, b.router.Stats())
	}
	calls := b.med.seen()
	var group []string
	for _, c := range calls {
		if c != "10" {
			group = append(group, c)
		}
	}
	// The router's promise: nothing of the group overtakes the failed
	// message. (Between 2 and 3, which the emulator may hand back in either
	// order once 1 is done, the processing endpoint's database check keeps
	// creation order; the e2e group test covers that.)
	if len(group) != 4 || group[0] != "1" || group[1] != "1" {
		t.Errorf("group g mediated as %v, want 1, 1 (its retry) and only then 2 and 3", group)
	}
	if !slices.Contains(calls, "10") {
		t.Errorf("the other group waited for g")
	}
	eventually(t, 10*time.Second, func() bool {
		attrs, err := b.q.Attributes(context.Background())
		return err == nil && attrs["ApproximateNumberOfMessages"] == "0" && attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
	}, "all deleted")
}

func TestUnparseableMessageIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	if _, err := b.rq.SendBatch(context.Background(), []queue.Entry{{Body: "not json", GroupID: "x", DeduplicationID: "x"}}); err != nil {
		t.Fatal(err)
	}
	b.send(t, "y", 7)
	eventually(t, 10*time.Second, func() bool { return len(b.med.seen()) == 1 }, "valid message mediated")
	eventually(t, 10*time.Second, func() bool {
		attrs, err := b.q.Attributes(context.Background())
		return err == nil && attrs["ApproximateNumberOfMessages"] == "0" && attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
	}, "the unparseable message was deleted, not left to cycle")
	if calls := b.med.seen(); !slices.Equal(calls, []string{"7"}) {
		t.Errorf("mediated %v", calls)
	}
}

func TestUnknownPoolCodeUsesTheDefaultPool(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ptr, _ := json.Marshal(dispatch.Pointer{ID: "5", PoolCode: "NO-SUCH-POOL"})
	if _, err := b.rq.SendBatch(context.Background(), []queue.Entry{{Body: string(ptr), GroupID: "5", DeduplicationID: "5"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return len(b.med.seen()) == 1 }, "mediated in the default pool")
	if s := b.router.Stats()[0]; s.Code != dispatch.DefaultPool || s.Succeeded != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// A group's messages are ordered by their jobs' places in the group (the
// pointer's sequence: the order the creates committed), not by job id: an
// id from an API replica whose clock runs behind is smaller, yet its job
// came second. When the first fails, the second is held back behind it.
func TestGroupFollowsTheSequenceNotTheJobID(t *testing.T) {
	t.Parallel()
	b := setup(t, 4, func(ptr dispatch.Pointer, call int) error {
		if ptr.ID == "100" && call == 1 {
			return &dispatch.RetryAfter{Delay: time.Second, Reason: "target failed"}
		}
		return nil
	})
	var entries []queue.Entry
	for _, p := range []dispatch.Pointer{{ID: "100", Sequence: 1}, {ID: "50", Sequence: 2}} {
		p.PoolCode, p.MessageGroupID = dispatch.DefaultPool, "g"
		body, _ := json.Marshal(p)
		entries = append(entries, queue.Entry{Body: string(body), GroupID: "g", DeduplicationID: p.ID})
	}
	if _, err := b.rq.SendBatch(context.Background(), entries); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() bool { return len(b.med.seen()) >= 3 }, "all mediated")
	if calls := b.med.seen(); !slices.Equal(calls, []string{"100", "100", "50"}) {
		t.Errorf("group g mediated as %v, want 100, 100 (its retry), then 50", calls)
	}
}
