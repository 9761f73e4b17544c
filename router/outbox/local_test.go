package outbox_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// fakeLocal is a hand-written outbox.Local: it takes the pointers whose
// ids it is told to and keeps their requeue functions.
type fakeLocal struct {
	mu      sync.Mutex
	take    map[string]bool
	offered []string
	requeue map[string]func(time.Duration)
}

func (f *fakeLocal) Offer(_ dispatch.Unsent, ptr dispatch.Pointer, requeue func(time.Duration)) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offered = append(f.offered, ptr.ID)
	if !f.take[ptr.ID] {
		return false
	}
	f.requeue[ptr.ID] = requeue
	return true
}

// A handed pointer the router in this process takes never goes onto the
// queue, unless it is requeued: with no delay (a long delivery, a stop) it
// is sent at once; with one (a retry) its queued mark is cleared, for the
// outbox query to send it when due. Declined pointers go to the queue as
// before, and a grouped job, or one naming its queue, is never offered.
func TestHandedPointersTakenInProcessSkipTheQueue(t *testing.T) {
	q := sqstest.New(t, 30*time.Second)
	store := &fakeOutbox{}
	p, _ := startPublisher(t, q.Open(t), store)
	l := &fakeLocal{take: map[string]bool{"21": true, "22": true, "31": true}, requeue: map[string]func(time.Duration){}}
	p.DeliverLocally(l)
	mark := time.Now()
	jobs := []dispatch.Unsent{{ID: 21, Mark: mark}, {ID: 22, Mark: mark}, {ID: 23, Mark: mark}, {ID: 31, GroupID: "g", Seq: 1, Mark: mark},
		{ID: 32, QueueURL: "named", Mark: mark}}
	p.Hand(jobs, len(jobs))

	rq := q.Open(t)
	if ids := queuedIDs(t, rq, 3); ids != "[23 31 32]" {
		t.Errorf("the queue got %v, want the declined 23, the grouped 31 and 32 (naming a queue no longer configured: the default) only", ids)
	}
	l.mu.Lock()
	offered := slices.Clone(l.offered)
	requeue, retry := l.requeue["22"], l.requeue["21"]
	l.mu.Unlock()
	if fmt.Sprint(offered) != "[21 22 23]" {
		t.Errorf("offered %v, want the three ungrouped jobs [21 22 23]", offered)
	}

	retry(time.Minute)
	if fmt.Sprint(store.ids(mark)) != "[21]" {
		t.Errorf("unmarked %v, want the retried 21 (the outbox sends it when due)", store.ids(mark))
	}
	requeue(0)
	back := drain(t, rq, 1)
	if len(back) != 1 || back[0].ID != "22" || back[0].PoolCode == "" || back[0].MessageGroupID != "22" {
		t.Errorf("requeued pointers %+v, want job 22 alone, in its own group, with a pool", back)
	}
}

// A retried job whose queued mark cannot be cleared (the database may be
// what failed its delivery) has its pointer sent at once instead: the
// processor holds it back until it is due.
func TestRetriedJobTakenInProcessIsSentWhenTheOutboxCannotTakeIt(t *testing.T) {
	q := sqstest.New(t, 30*time.Second)
	store := &fakeOutbox{unmarkErr: errors.New("database down")}
	p, _ := startPublisher(t, q.Open(t), store)
	l := &fakeLocal{take: map[string]bool{"81": true}, requeue: map[string]func(time.Duration){}}
	p.DeliverLocally(l)
	p.Hand([]dispatch.Unsent{{ID: 81, Mark: time.Now()}}, 1)
	l.mu.Lock()
	retry := l.requeue["81"]
	l.mu.Unlock()
	if retry == nil {
		t.Fatal("job 81 was not taken in process")
	}
	retry(time.Minute)
	if got := drain(t, q.Open(t), 1); len(got) != 1 || got[0].ID != "81" {
		t.Errorf("the queue got %+v, want job 81's pointer", got)
	}
}

// queuedIDs drains n pointers from rq and lists their job ids, sorted.
func queuedIDs(t *testing.T, rq *queue.Queue, n int) string {
	t.Helper()
	var ids []string
	for _, ptr := range drain(t, rq, n) {
		ids = append(ids, ptr.ID)
	}
	slices.Sort(ids)
	return fmt.Sprint(ids)
}

// fakeRemote is a hand-written outbox.Remote (a router of another process
// waiting in the API's handoff.Box): it takes the jobs it is told to.
type fakeRemote struct {
	mu      sync.Mutex
	take    map[int64]bool
	offered []int64
}

func (f *fakeRemote) Offer(u dispatch.Unsent, ptr dispatch.Pointer) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offered = append(f.offered, u.ID)
	return f.take[u.ID] && ptr.ID == dispatch.FormatID(u.ID)
}

// Split mode: a handed pointer a router of another process takes never
// goes onto the queue; one it declines does. This process's own router,
// when there is one, is asked first, and a grouped job, or one naming its
// queue, is offered to neither. A job given back (Requeue) with no delay
// is sent at once.
func TestHandedPointersTakenByAnotherProcessSkipTheQueue(t *testing.T) {
	q := sqstest.New(t, 30*time.Second)
	store := &fakeOutbox{}
	p, _ := startPublisher(t, q.Open(t), store)
	l := &fakeLocal{take: map[string]bool{"41": true}, requeue: map[string]func(time.Duration){}}
	r := &fakeRemote{take: map[int64]bool{41: true, 42: true}}
	p.DeliverLocally(l)
	p.OfferTo(r)
	mark := time.Now()
	jobs := []dispatch.Unsent{{ID: 41, Mark: mark}, {ID: 42, Mark: mark}, {ID: 43, Mark: mark},
		{ID: 44, GroupID: "g", Seq: 1, Mark: mark}, {ID: 45, QueueURL: "named", Mark: mark}}
	p.Hand(jobs, len(jobs))

	rq := q.Open(t)
	if ids := queuedIDs(t, rq, 3); ids != "[43 44 45]" {
		t.Errorf("the queue got %v, want the declined 43, the grouped 44 and 45 (naming a queue) only", ids)
	}
	r.mu.Lock()
	offered := slices.Clone(r.offered)
	r.mu.Unlock()
	if fmt.Sprint(offered) != "[42 43]" {
		t.Errorf("offered to the other process %v, want [42 43]: 41 was taken here, 44 and 45 are never offered", offered)
	}

	p.Requeue(jobs[1], 0) // the router gave 42 back
	if back := drain(t, rq, 1); len(back) != 1 || back[0].ID != "42" {
		t.Errorf("given back %+v, want job 42's pointer", back)
	}
}
