package router_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// boxOffers is the API's side in process: a real handoff.Box, whose
// give-backs are recorded instead of sent to a queue.
type boxOffers struct {
	box *handoff.Box

	mu      sync.Mutex
	back    []int64
	after   []time.Duration
	asking  int            // the room of the requests waiting now
	askedHi int            // the most asking has been
	pools   map[string]int // the pools requests have named, and how often
}

// newBoxOffers is a box for jobs bound for the queue named queue.
func newBoxOffers(queue string) *boxOffers {
	o := &boxOffers{}
	o.box = handoff.NewBox(queue, func(u dispatch.Unsent, after time.Duration) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.back = append(o.back, u.ID)
		o.after = append(o.after, after)
	})
	return o
}

func (o *boxOffers) Take(ctx context.Context, req handoff.Request) ([]handoff.Offer, error) {
	n := 0
	for _, r := range req.Room {
		n += r
	}
	o.mu.Lock()
	o.asking += n
	o.askedHi = max(o.askedHi, o.asking)
	if o.pools == nil {
		o.pools = map[string]int{}
	}
	for code := range req.Room {
		o.pools[code]++
	}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.asking -= n
		o.mu.Unlock()
	}()
	return o.box.Take(ctx, req)
}

// room is the room the requests waiting now ask for, and the most they
// have asked for at once.
func (o *boxOffers) room() (now, most int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.asking, o.askedHi
}

func (o *boxOffers) GiveBack(_ context.Context, h handoff.Handle, after time.Duration) error {
	o.box.GiveBack(h, after)
	return nil
}

func (o *boxOffers) givenBack() ([]int64, []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int64(nil), o.back...), append([]time.Duration(nil), o.after...)
}

// offerJob offers job id to the router once its request waits in the box.
func (o *boxOffers) offerJob(t *testing.T, id int64) {
	t.Helper()
	u := dispatch.Unsent{ID: id, Mark: time.Now(), PoolCode: dispatch.DefaultPool}
	ptr := dispatch.Pointer{ID: dispatch.FormatID(id), PoolCode: dispatch.DefaultPool, MessageGroupID: dispatch.FormatID(id)}
	eventually(t, 10*time.Second, func() bool { return o.box.Offer(u, ptr) }, "the router asks for new jobs")
}

// setupIntake starts a router with one pool over a fresh queue that also
// asks for new jobs, of a box for jobs bound for that queue; mediate
// stands for the processing endpoint and sees the handle each offered
// job's request carries.
func setupIntake(t *testing.T, concurrency int, mediate func(ctx context.Context, ptr dispatch.Pointer) error) (*router.Router, *boxOffers) {
	t.Helper()
	q := sqstest.New(t, 30*time.Second).Open(t)
	o := newBoxOffers(q.Name())
	r, err := router.New(q, mediatorFunc(mediate), router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: concurrency}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Offers: o,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	return r, o
}

type mediatorFunc func(ctx context.Context, ptr dispatch.Pointer) error

func (f mediatorFunc) Mediate(ctx context.Context, ptr dispatch.Pointer) error { return f(ctx, ptr) }

// A router with idle workers asks the API for new jobs and mediates what
// it is offered, each mediation carrying the job's handle; a job done
// goes back nowhere.
func TestRouterMediatesTheJobsTheAPIOffers(t *testing.T) {
	t.Parallel()
	handles := make(chan handoff.Handle, 2)
	_, o := setupIntake(t, 2, func(ctx context.Context, ptr dispatch.Pointer) error {
		h, _ := handoff.HandleFrom(ctx)
		handles <- h
		return nil
	})
	o.offerJob(t, 101)
	o.offerJob(t, 102)
	for range 2 {
		select {
		case h := <-handles:
			if h.ID != 101 && h.ID != 102 {
				t.Errorf("a mediation carried handle %+v, want the offered job's", h)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an offered job was never mediated")
		}
	}
	if back, _ := o.givenBack(); len(back) != 0 {
		t.Errorf("jobs %v given back, want none", back)
	}
}

// A retry of an offered job goes back to the API with its delay, unless
// the processing endpoint answered that it took the job back itself.
func TestRouterGivesBackARetryTheAPIDidNotTake(t *testing.T) {
	t.Parallel()
	// One worker: it handles each answer before it asks for the next job,
	// so once 203 is given back, 202's answer has been handled.
	_, o := setupIntake(t, 1, func(_ context.Context, ptr dispatch.Pointer) error {
		return &dispatch.RetryAfter{Delay: 7 * time.Second, GivenBack: ptr.ID == "202"}
	})
	o.offerJob(t, 201)
	o.offerJob(t, 202)
	o.offerJob(t, 203)
	eventually(t, 10*time.Second, func() bool { back, _ := o.givenBack(); return slices.Contains(back, 203) }, "203 given back")
	back, after := o.givenBack()
	if len(back) != 2 || back[0] == 202 || back[1] == 202 || after[0] != 7*time.Second || after[1] != 7*time.Second {
		t.Errorf("given back %v after %v; want 201 and 203 after 7s, not 202 (the API took it)", back, after)
	}
}

// A router with more idle workers than one request may ask for keeps
// several requests open, so that a job created while one answer is being
// handled still finds one waiting; together they never ask for more than
// its idle workers.
func TestRouterKeepsSeveralRequestsOpenWithinItsIdleWorkers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(5)
	_, o := setupIntake(t, 25, func(context.Context, dispatch.Pointer) error {
		started.Done()
		<-release
		return nil
	})
	t.Cleanup(func() { close(release) }) // before the router stops
	eventually(t, 10*time.Second, func() bool { now, _ := o.room(); return now == 25 && o.box.Waiting() == 3 },
		"three requests ask for the 25 idle workers (10, 10 and 5)")
	for id := range int64(5) {
		o.offerJob(t, 301+id)
	}
	started.Wait()
	// Five workers busy: the requests answered ask again, for what is left.
	eventually(t, 10*time.Second, func() bool { now, _ := o.room(); return now == 20 },
		"the requests ask for the 20 idle workers left")
	if _, most := o.room(); most > 25 {
		t.Errorf("the requests asked for %d at once, more than the pool's 25 workers", most)
	}
}

// A pool whose code no job can name (longer than dispatch.MaxPoolCodeLen)
// is left out of the requests: named, it would have the API refuse them
// all, and no job could be offered to it anyway.
func TestRouterAsksOnlyForPoolsAJobCanName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("L", dispatch.MaxPoolCodeLen+1)
	q := sqstest.New(t, 30*time.Second).Open(t)
	o := newBoxOffers(q.Name())
	r, err := router.New(q, mediatorFunc(func(context.Context, dispatch.Pointer) error { return nil }), router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 2}, {Code: long, Concurrency: 2}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Offers: o,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	o.offerJob(t, 401) // the default pool is asked for
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pools[long] != 0 {
		t.Errorf("requests named the pool %q, which no job can name", long)
	}
}

// A message mediated as the queue hands it out for the first time carries
// that (handoff.FirstReceive); once it comes back (its first mediation
// answered "retry"), it no longer does: someone has had it.
func TestRouterSaysWhichReceiveIsAMessagesFirst(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second).Open(t)
	firsts := make(chan bool, 2)
	runOneWorker(t, q, mediatorFunc(func(ctx context.Context, ptr dispatch.Pointer) error {
		first := handoff.FirstReceive(ctx)
		firsts <- first
		if first {
			return &dispatch.RetryAfter{Delay: time.Second}
		}
		return nil
	}))
	(&bundle{rq: q}).send(t, "301", 301)
	for i, want := range []bool{true, false} {
		select {
		case got := <-firsts:
			if got != want {
				t.Errorf("mediation %d: first receive %v, want %v", i+1, got, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("mediation %d never came", i+1)
		}
	}
}
