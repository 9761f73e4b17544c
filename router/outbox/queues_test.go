package outbox_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/outbox"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// skipOutbox is a fakeOutbox that records the queues each outbox pass is
// told to skip.
type skipOutbox struct {
	fakeOutbox
	skipMu sync.Mutex
	skips  [][]string
}

func (f *skipOutbox) PublishDueExcept(_ context.Context, _ time.Time, _ int, skip []string, _ func([]dispatch.Unsent) ([]int64, error)) (int, error) {
	f.skipMu.Lock()
	defer f.skipMu.Unlock()
	f.skips = append(f.skips, slices.Clone(skip))
	return 0, nil
}

func (f *skipOutbox) skipped(key string) bool {
	f.skipMu.Lock()
	defer f.skipMu.Unlock()
	for _, s := range f.skips {
		if slices.Contains(s, key) {
			return true
		}
	}
	return false
}

// runPublisher runs p until the test ends.
func runPublisher(t *testing.T, p *outbox.Publisher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// drain receives every pointer on q until n have come, deleting them.
func drain(t *testing.T, q *queue.Queue, n int) []dispatch.Pointer {
	t.Helper()
	var got []dispatch.Pointer
	eventually(t, 10*time.Second, func() bool {
		msgs, err := q.Receive(context.Background(), 10, time.Second, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			var ptr dispatch.Pointer
			_ = json.Unmarshal([]byte(m.Body), &ptr)
			got = append(got, ptr)
			_ = q.DeleteBatch(context.Background(), []string{m.Receipt})
		}
		return len(got) >= n
	}, "pointers reach "+q.Name())
	return got
}

// Each pointer goes to the queue its job names, with its pool; a job naming
// none, or a queue no longer configured, goes to the default queue. A queue
// that cannot be sent to holds up only its own jobs: they go back to the
// outbox, whose passes leave them out while the queue is in its backoff.
func TestPointersGoToTheQueueTheirJobNames(t *testing.T) {
	a, b := sqstest.New(t, 30*time.Second), sqstest.New(t, 30*time.Second)
	qa, qb := a.Open(t), b.Open(t)
	missing, err := queue.Open(context.Background(), queue.Config{
		URL: strings.TrimSuffix(a.URL, a.Name) + "t-nowhere.fifo", Endpoint: a.Endpoint, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := &skipOutbox{}
	p := outbox.New(qa, store, outbox.Config{
		Destinations: []outbox.Destination{{Key: a.URL, Queue: qa}, {Key: b.Name, Queue: qb}, {Key: "nowhere.fifo", Queue: missing}},
		RequeueAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	runPublisher(t, p)

	mark := time.Now().Truncate(time.Microsecond)
	p.Hand([]dispatch.Unsent{
		{ID: 1, Mark: mark},
		{ID: 2, Mark: mark, QueueURL: b.Name, PoolCode: "SLOW"},
		{ID: 3, Mark: mark, QueueURL: "nowhere.fifo"},
		{ID: 4, Mark: mark, QueueURL: "gone.fifo"},
		{ID: 5, Mark: mark, QueueURL: a.URL, PoolCode: "A"},
	}, 0)
	got := drain(t, qa, 3)
	ids := []string{got[0].ID, got[1].ID, got[2].ID}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"1", "4", "5"}) {
		t.Errorf("the default queue got %v, want 1 (naming none), 4 (naming a queue no longer configured) and 5", ids)
	}
	for _, ptr := range got {
		if want := map[string]string{"1": dispatch.DefaultPool, "4": dispatch.DefaultPool, "5": "A"}[ptr.ID]; ptr.PoolCode != want {
			t.Errorf("pointer %s names pool %q, want %q", ptr.ID, ptr.PoolCode, want)
		}
	}
	if got := drain(t, qb, 1); got[0].ID != "2" || got[0].PoolCode != "SLOW" {
		t.Errorf("queue b got %+v, want job 2 in pool SLOW", got[0])
	}
	eventually(t, 10*time.Second, func() bool { return slices.Contains(store.ids(mark), 3) },
		"the pointer of the queue that cannot be sent to is given back to the outbox")
	if slices.Contains(store.ids(mark), 2) || slices.Contains(store.ids(mark), 1) {
		t.Errorf("sent pointers were given back too: %v", store.ids(mark))
	}
	eventually(t, 10*time.Second, func() bool { return store.skipped("nowhere.fifo") },
		"the outbox passes leave the failing queue's jobs out")

	// The failing queue does not hold up the others.
	later := mark.Add(time.Second)
	p.Hand([]dispatch.Unsent{{ID: 6, Mark: later, QueueURL: "nowhere.fifo"}, {ID: 7, Mark: later, QueueURL: b.Name}}, 0)
	if got := drain(t, qb, 1); got[0].ID != "7" {
		t.Errorf("queue b got %+v, want job 7", got[0])
	}
	eventually(t, 10*time.Second, func() bool { return slices.Contains(store.ids(later), 6) }, "job 6 waits in the outbox")
}

// While the default queue is in its backoff, the jobs naming a queue no
// longer configured, which go to it, are left out of the outbox passes too:
// the oldest due, they would otherwise fill each pass and hold up the jobs
// of the queues that work.
func TestJobsNamingAGoneQueueWaitWhileTheDefaultQueueFails(t *testing.T) {
	b := sqstest.New(t, 30*time.Second)
	qb := b.Open(t)
	missing, err := queue.Open(context.Background(), queue.Config{
		URL: strings.TrimSuffix(b.URL, b.Name) + "t-nowhere.fifo", Endpoint: b.Endpoint, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := &skipOutbox{}
	p := outbox.New(missing, store, outbox.Config{Destinations: []outbox.Destination{{Key: b.Name, Queue: qb}},
		RequeueAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	runPublisher(t, p)

	mark := time.Now().Truncate(time.Microsecond)
	p.Hand([]dispatch.Unsent{{ID: 1, Mark: mark, QueueURL: "gone.fifo"}, {ID: 2, Mark: mark, QueueURL: b.Name}}, 0)
	if got := drain(t, qb, 1); got[0].ID != "2" {
		t.Errorf("queue b got %+v, want job 2", got[0])
	}
	eventually(t, 10*time.Second, func() bool { return slices.Contains(store.ids(mark), 1) },
		"the job naming a gone queue is given back to the outbox when the default queue fails")
	eventually(t, 10*time.Second, func() bool { return store.skipped("") && store.skipped("gone.fifo") },
		"the outbox passes leave out the default queue's jobs and those naming the gone queue")
	if store.skipped(b.Name) {
		t.Error("the passes left out the jobs of the queue that works")
	}
}
