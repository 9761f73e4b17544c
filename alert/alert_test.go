package alert_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/alert"
)

// fakeStore records what the Notifier asks of the database.
type fakeStore struct {
	mu        sync.Mutex
	states    map[string]bool // a key never set is off, as in the database
	holds     map[string]map[string]bool
	sets      map[string]int
	events    []dispatch.AlertEvent
	counts    map[string]int
	oldestDue *time.Time
	countErrs int // CountExhausted calls to fail, as a database away does
}

func newFake() *fakeStore {
	return &fakeStore{states: map[string]bool{}, holds: map[string]map[string]bool{}, sets: map[string]int{}, counts: map[string]int{}}
}

func (f *fakeStore) FlushAlerts(context.Context, time.Time, time.Duration) (int, error) {
	return 0, nil
}

func (f *fakeStore) SetAlertState(_ context.Context, key string, active bool, e dispatch.AlertEvent) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets[key]++
	if f.states[key] == active {
		return false, nil
	}
	f.states[key] = active
	if e.Kind != "" {
		f.events = append(f.events, e)
	}
	return true, nil
}

// HoldAlert and ReleaseAlert keep holds that never run out.
func (f *fakeStore) HoldAlert(_ context.Context, key, holder string, _ time.Duration, e dispatch.AlertEvent) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := len(f.holds[key]) > 0
	if f.holds[key] == nil {
		f.holds[key] = map[string]bool{}
	}
	f.holds[key][holder] = true
	if !was {
		f.events = append(f.events, e)
	}
	return !was, nil
}

func (f *fakeStore) ReleaseAlert(_ context.Context, key, holder string, e dispatch.AlertEvent) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := len(f.holds[key]) > 0
	delete(f.holds[key], holder)
	if was && len(f.holds[key]) == 0 {
		f.events = append(f.events, e)
		return true, nil
	}
	return false, nil
}

func (f *fakeStore) RenewAlertHolds(context.Context, string, []string, time.Duration) ([]string, error) {
	return nil, nil
}

func (f *fakeStore) CountExhausted(_ context.Context, source, typ string, _ time.Time, n, _ int, _ dispatch.AlertEvent) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.countErrs > 0 {
		f.countErrs--
		return false, errors.New("the database is away")
	}
	f.counts[source+"/"+typ] += n
	return false, nil
}

func (f *fakeStore) PruneAlerts(context.Context, time.Time) error { return nil }

func (f *fakeStore) Backlog(context.Context, time.Time) (dispatch.Backlog, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return dispatch.Backlog{OldestDue: f.oldestDue}, nil
}

// start runs n until the test ends.
func start(t *testing.T, n *alert.Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitUntil polls cond (under f's lock) until it holds.
func waitUntil(t *testing.T, f *fakeStore, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		ok := cond()
		f.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNotifierCountsExhaustedJobsButNotAlertJobs(t *testing.T) {
	f := newFake()
	n := alert.New(f, alert.Config{Window: time.Second, ExhaustedThreshold: 3, Tick: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	n.Exhausted(dispatch.AlertSource, dispatch.AlertJobsExhausted) // an alert job: not counted
	for range 4 {
		n.Exhausted("orders", "order.created")
	}
	n.Exhausted("billing", "invoice.sent")
	start(t, n)
	waitUntil(t, f, "both counts are added", func() bool {
		return f.counts["orders/order.created"] == 4 && f.counts["billing/invoice.sent"] == 1
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.counts) != 2 {
		t.Errorf("counted %v", f.counts)
	}
}

// Jobs that exhausted their retries while the database was away are
// counted once it answers again, not dropped with the failed call: a
// threshold crossed during a blip still alerts.
func TestNotifierKeepsExhaustedCountsThroughAFailedWrite(t *testing.T) {
	f := newFake()
	f.countErrs = 3
	n := alert.New(f, alert.Config{Window: time.Second, ExhaustedThreshold: 3, Tick: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	for range 4 {
		n.Exhausted("orders", "order.created")
	}
	start(t, n)
	waitUntil(t, f, "the count is added after the failures", func() bool {
		return f.countErrs == 0 && f.counts["orders/order.created"] == 4
	})
}

func TestNotifierRecordsBreakerChangesAndAnOldBacklog(t *testing.T) {
	f := newFake()
	old := time.Now().Add(-time.Hour)
	f.oldestDue = &old
	n := alert.New(f, alert.Config{Window: time.Second, BacklogAge: 30 * time.Minute, Tick: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	n.BreakerChanged("api.example.com:443", true)
	start(t, n)
	waitUntil(t, f, "two events", func() bool { return len(f.events) == 2 })
	n.BreakerChanged("api.example.com:443", false)
	waitUntil(t, f, "three events", func() bool { return len(f.events) == 3 })
	kinds := map[string]bool{}
	for _, e := range f.events {
		kinds[e.Kind] = true
	}
	if !kinds[dispatch.AlertBreakerOpened] || !kinds[dispatch.AlertBreakerClosed] || !kinds[dispatch.AlertBacklogOld] {
		t.Errorf("events %+v", f.events)
	}
}

func TestNotifierLeavesARecentBacklogAlone(t *testing.T) {
	f := newFake()
	recent := time.Now().Add(-time.Minute)
	f.oldestDue = &recent
	n := alert.New(f, alert.Config{Window: time.Second, BacklogAge: 30 * time.Minute, Tick: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	start(t, n)
	waitUntil(t, f, "the backlog is read", func() bool { return f.sets["backlog"] > 0 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.states["backlog"] || len(f.events) != 0 {
		t.Errorf("a backlog due a minute ago (threshold 30m) raised %+v", f.events)
	}
}

// A restarted process raises an old backlog at once, not a tick later.
func TestNotifierReadsTheBacklogAsItStarts(t *testing.T) {
	f := newFake()
	old := time.Now().Add(-time.Hour)
	f.oldestDue = &old
	n := alert.New(f, alert.Config{Window: time.Second, BacklogAge: 30 * time.Minute, Tick: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	start(t, n)
	waitUntil(t, f, "the old backlog is raised, an hour before the first tick", func() bool {
		return f.states["backlog"] && len(f.events) == 1 && f.events[0].Kind == dispatch.AlertBacklogOld
	})
}
