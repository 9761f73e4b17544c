package handoff_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
)

type requeued struct {
	mu  sync.Mutex
	ids []int64
	at  []time.Duration
}

func (r *requeued) requeue(u dispatch.Unsent, after time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, u.ID)
	r.at = append(r.at, after)
}

func job(id int64, pool string) (dispatch.Unsent, dispatch.Pointer) {
	u := dispatch.Unsent{ID: id, Gen: 2, Mark: time.Unix(1700000000, 123456000).UTC(), PoolCode: pool, TraceContext: "00-abc"}
	return u, dispatch.Pointer{ID: dispatch.FormatID(id), PoolCode: pool, MessageGroupID: dispatch.FormatID(id)}
}

// waitFor waits until n requests wait in b.
func waitFor(t *testing.T, b *handoff.Box, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.Waiting() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait, want %d", b.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNothingIsOfferedWhileNoRouterAsks(t *testing.T) {
	b := handoff.NewBox("jobs.fifo", (&requeued{}).requeue)
	if b.Offer(job(1, "P")) {
		t.Fatal("a job was taken with no request waiting")
	}
}

func TestARequestTakesItsPoolsJobsUpToItsRoom(t *testing.T) {
	b := handoff.NewBox("jobs.fifo", (&requeued{}).requeue)
	got := make(chan []handoff.Offer)
	go func() {
		offers, _ := b.Take(context.Background(), handoff.Request{Queues: []string{"other.fifo", "jobs.fifo"}, Room: map[string]int{"P": 2}, WaitSeconds: 20})
		got <- offers
	}()
	waitFor(t, b, 1)
	if b.Offer(job(1, "OTHER")) {
		t.Error("a job of a pool the request has no room in was taken")
	}
	// Under the box's lock the request cannot go before the second offer
	// is in; whether it does depends on timing, so only the first is sure.
	if !b.Offer(job(2, "P")) {
		t.Fatal("the waiting request did not take a job of its pool")
	}
	offers := <-got
	if len(offers) < 1 || offers[0].Pointer.ID != "2" || offers[0].TraceContext != "00-abc" {
		t.Fatalf("offers %+v, want job 2 first with its trace", offers)
	}
	h := offers[0].Handle
	if u := h.Unsent(); u.ID != 2 || u.Gen != 2 || !u.Mark.Equal(time.Unix(1700000000, 123456000)) || u.PoolCode != "P" {
		t.Errorf("handle %+v does not name the job as sent", h)
	}
	if b.Waiting() != 0 || b.Offer(job(3, "P")) {
		t.Error("a request that has answered still takes jobs")
	}
	if n := b.Offered(); n != int64(len(offers)) {
		t.Errorf("Offered() = %d, want %d", n, len(offers))
	}
}

func TestAWaitEndsEmptyAndCloseAnswersAtOnce(t *testing.T) {
	b := handoff.NewBox("jobs.fifo", (&requeued{}).requeue)
	start := time.Now()
	if offers, err := b.Take(context.Background(), handoff.Request{Queues: []string{"other.fifo", "jobs.fifo"}, Room: map[string]int{"P": 1}, WaitSeconds: 1}); len(offers) != 0 || err != nil {
		t.Fatalf("offers %+v, %v from an empty box", offers, err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the wait ended after %v, want 1 s", d)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Take(context.Background(), handoff.Request{Queues: []string{"other.fifo", "jobs.fifo"}, Room: map[string]int{"P": 1}, WaitSeconds: 20})
	}()
	waitFor(t, b, 1)
	b.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close left a request waiting")
	}
	if b.Offer(job(1, "P")) {
		t.Error("a closed box took a job")
	}
}

// A router consuming only other queues is told at once that it is
// offered nothing, and takes nothing: the jobs are bound for a queue it
// does not serve.
func TestARouterOfOtherQueuesIsOfferedNothing(t *testing.T) {
	b := handoff.NewBox("jobs.fifo", (&requeued{}).requeue)
	offers, err := b.Take(context.Background(), handoff.Request{Queues: []string{"other.fifo"}, Room: map[string]int{"P": 1}, WaitSeconds: 20})
	if !errors.Is(err, handoff.ErrNotOffered) || offers != nil {
		t.Fatalf("Take() = %v, %v; want ErrNotOffered", offers, err)
	}
	if b.Waiting() != 0 || b.Offer(job(1, "P")) {
		t.Error("the request of a router of other queues waits for jobs")
	}
}

func TestReturnedAndGivenBackJobsGoToTheQueue(t *testing.T) {
	rq := &requeued{}
	b := handoff.NewBox("jobs.fifo", rq.requeue)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan []handoff.Offer)
	go func() {
		offers, _ := b.Take(ctx, handoff.Request{Queues: []string{"jobs.fifo"}, Room: map[string]int{"P": 1}, WaitSeconds: 20})
		got <- offers
	}()
	waitFor(t, b, 1)
	b.Offer(job(7, "P"))
	cancel()
	b.Return(<-got)
	b.GiveBack(handoff.HandleOf(dispatch.Unsent{ID: 8, Mark: time.Now()}), 30*time.Second)
	if len(rq.ids) != 2 || rq.ids[0] != 7 || rq.at[0] != 0 || rq.ids[1] != 8 || rq.at[1] != 30*time.Second {
		t.Errorf("requeued %v after %v, want 7 now and 8 after 30s", rq.ids, rq.at)
	}
}

func TestHandleHeaderRoundTripsAndRefusesJunk(t *testing.T) {
	u, _ := job(42, "P")
	h, err := handoff.DecodeHeader(handoff.HandleOf(u).EncodeHeader())
	if err != nil || h.ID != 42 || !h.Mark.Equal(u.Mark) || h.Gen != 2 {
		t.Fatalf("decoded %+v, %v", h, err)
	}
	for _, v := range []string{"", "!!", "e30", handoff.HandleOf(dispatch.Unsent{ID: 1}).EncodeHeader()} {
		if _, err := handoff.DecodeHeader(v); err == nil {
			t.Errorf("DecodeHeader(%q) took it", v)
		}
	}
}

func TestRequestCheckNamesEveryBadField(t *testing.T) {
	err := handoff.Request{Room: map[string]int{"P": 11}, WaitSeconds: -1}.Check()
	var e *dispatch.Error
	if err == nil || !errors.As(err, &e) || len(e.Details) != 3 {
		t.Fatalf("Check() = %v, want three problems (room, queues, waitSeconds)", err)
	}
	if err := (handoff.Request{Queues: []string{"other.fifo", "jobs.fifo"}, Room: map[string]int{"P": 10}, WaitSeconds: 20}).Check(); err != nil {
		t.Errorf("a good request was refused: %v", err)
	}
}
