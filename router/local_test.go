package router_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// unsent is the job with id as its store hands it over.
func unsent(id string) dispatch.Unsent {
	n, _ := dispatch.ParseID(id)
	return dispatch.Unsent{ID: n, PoolCode: dispatch.DefaultPool, Mark: time.Now()}
}

// offerer counts the requeues of the pointers it offers.
type offerer struct{ requeued atomic.Int32 }

func (o *offerer) offer(r *router.Router, id string) bool {
	return r.Offer(unsent(id), dispatch.Pointer{ID: id, PoolCode: dispatch.DefaultPool, MessageGroupID: id}, func(time.Duration) { o.requeued.Add(1) })
}

// offerWhenRunning offers until the router has started its workers.
func (o *offerer) offerWhenRunning(t *testing.T, r *router.Router, id string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return o.offer(r, id) }, "the router takes an offered pointer")
}

// A pointer offered in process is mediated at once and, done, leaves
// nothing on the queue and is never requeued.
func TestOfferedPointerIsMediatedWithoutTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	var o offerer
	o.offerWhenRunning(t, b.router, "41")
	eventually(t, 10*time.Second, func() bool { return len(b.med.seen()) == 1 }, "the offered pointer mediated")
	eventually(t, 5*time.Second, func() bool { return len(b.router.InFlight()) == 0 }, "nothing held after it")
	attrs, err := b.q.Attributes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if attrs["ApproximateNumberOfMessages"] != "0" || attrs["ApproximateNumberOfMessagesNotVisible"] != "0" || o.requeued.Load() != 0 {
		t.Errorf("queue %v, requeued %d: want an empty queue and no requeue", attrs, o.requeued.Load())
	}
}

// The router declines what it cannot start soon, and what must keep its
// order on the queue: a grouped job, an unknown pool, a pool whose workers
// are busy and whose buffer (the router's Buffer, 10 by default) is full,
// a pool with a rate limit, and anything once it stops.
func TestOfferIsDeclinedUnlessAWorkerIsIdle(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := setup(t, 1, func(ptr dispatch.Pointer, _ int) error {
		<-release
		return nil
	})
	var o offerer
	if b.router.Offer(unsent("50"), dispatch.Pointer{ID: "50", PoolCode: dispatch.DefaultPool, MessageGroupID: "g"}, func(time.Duration) {}) {
		t.Error("a grouped pointer was taken in process")
	}
	if b.router.Offer(unsent("51"), dispatch.Pointer{ID: "51", PoolCode: "NO-SUCH-POOL", MessageGroupID: "51"}, func(time.Duration) {}) {
		t.Error("a pointer of an unknown pool was taken in process")
	}
	o.offerWhenRunning(t, b.router, "52")
	eventually(t, 5*time.Second, func() bool { return len(b.med.seen()) == 1 }, "52 in flight")
	for id := 100; id < 110; id++ {
		if !o.offer(b.router, strconv.Itoa(id)) {
			t.Fatalf("pointer %d declined with %d of the buffer's 10 places taken", id, id-100)
		}
	}
	if o.offer(b.router, "53") {
		t.Error("a pointer was taken while the pool's only worker is busy and its buffer full")
	}
	close(release)
	// Each waiting one is mediated in turn or, had it waited LocalBackstop
	// (a loaded machine), moved to the queue.
	eventually(t, 10*time.Second, func() bool { return len(b.med.seen())+int(o.requeued.Load()) == 11 }, "the buffered pointers mediated in turn")
	eventually(t, 5*time.Second, func() bool { return o.offer(b.router, "54") }, "an offer taken once the worker is idle again")

	limited, err := router.New(sqstest.New(t, 30*time.Second).Open(t), &fakeMediator{}, router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 4, RatePerMinute: 60}},
		ReceiveWait: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, limited)
	eventually(t, 10*time.Second, func() bool { return len(limited.Stats()) == 1 && limited.Ready() }, "the rate-limited router running")
	if o.offer(limited, "55") {
		t.Error("a pointer was taken in process by a rate-limited pool")
	}

	b.cancel()
	err = <-b.done
	b.done <- err // for the cleanup's stop
	if o.offer(b.router, "56") {
		t.Error("a stopped router took a pointer")
	}
}

// A pointer offered in process whose mediation asks for a retry goes onto
// the queue (whose visibility timeout brings it back when due), once.
func TestOfferedPointerToRetryIsRequeued(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, func(dispatch.Pointer, int) error {
		return &dispatch.RetryAfter{Delay: time.Minute, Reason: "target failed"}
	})
	var o offerer
	o.offerWhenRunning(t, b.router, "61")
	eventually(t, 10*time.Second, func() bool { return o.requeued.Load() == 1 }, "the retried pointer requeued")
	eventually(t, 5*time.Second, func() bool { return len(b.router.InFlight()) == 0 }, "nothing held after it")
	if n := o.requeued.Load(); n != 1 || len(b.med.seen()) != 1 {
		t.Errorf("requeued %d times, mediated %d times: want 1 and 1", n, len(b.med.seen()))
	}
	// Ungrouped, it holds nothing back: no hold is left to expire (with no
	// queue answering, it never would).
	if n := b.router.Holds(); n != 0 {
		t.Errorf("%d groups held after an offered pointer's retry, want none", n)
	}
}

// A job taken in process that waits LocalBackstop for a worker leaves its
// lane for the queue, where any replica's router may take it, and is not
// mediated here; a mediation that runs longer stays, and is not copied to
// the queue (another replica would find the job PENDING and deliver it
// twice).
func TestLocalPointerWaitingTooLongGoesToTheQueue(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := setup(t, 1, func(dispatch.Pointer, int) error {
		<-release
		return nil
	})
	var running, waiting offerer
	running.offerWhenRunning(t, b.router, "71")
	eventually(t, 5*time.Second, func() bool { return len(b.med.seen()) == 1 }, "71 in flight")
	if !waiting.offer(b.router, "72") {
		t.Fatal("72 was not taken to wait in the lane")
	}
	eventually(t, 10*time.Second, func() bool { return waiting.requeued.Load() == 1 }, "the waiting pointer moved to the queue")
	if n := len(b.router.InFlight()); n != 1 {
		t.Errorf("the router holds %d messages after the move, want 71 alone", n)
	}
	close(release)
	eventually(t, 5*time.Second, func() bool { return len(b.router.InFlight()) == 0 }, "71 ended")
	if seen := b.med.seen(); len(seen) != 1 || running.requeued.Load() != 0 {
		t.Errorf("mediated %v, 71 requeued %d times: want 71 alone, never requeued", seen, running.requeued.Load())
	}
}
