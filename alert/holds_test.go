package alert_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/alert"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// run runs n until stop is called (or the test ends), as a process does.
func run(t *testing.T, n *alert.Notifier) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// count answers a count(*) query.
func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func events(t *testing.T, pool *pgxpool.Pool, kind string) int {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM dispatch_alert_event WHERE kind = $1`, kind)
}

// liveHolds counts the processes holding host's breaker alert.
func liveHolds(t *testing.T, pool *pgxpool.Pool, host string) int {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM dispatch_alert_hold WHERE key = $1 AND expires_at > now()`, "breaker:"+host)
}

// A process whose breaker for a host is open stops (a restart, a crash)
// without telling it closed: its hold runs out, and the host's next
// outage, seen by another process, is alerted again.
func TestBreakerAlertIsRaisedAgainAfterItsProcessStopped(t *testing.T) {
	t.Parallel()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1})
	cfg := alert.Config{Window: time.Minute, Tick: 10 * time.Millisecond, BreakerLease: 500 * time.Millisecond}
	const host = "api.example.com:443"

	first := alert.New(st, cfg)
	stopFirst := run(t, first)
	first.BreakerChanged(host, true)
	eventually(t, "the opening is alerted", func() bool { return events(t, pool, dispatch.AlertBreakerOpened) == 1 })
	// Renewed while it runs: the hold outlives its first lease.
	var firstLease time.Time
	if err := pool.QueryRow(t.Context(), `SELECT expires_at FROM dispatch_alert_hold`).Scan(&firstLease); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hold is live past its first lease", func() bool {
		return count(t, pool, `SELECT count(*) FROM dispatch_alert_hold WHERE expires_at > now() AND now() > $1`, firstLease) == 1
	})
	stopFirst() // with the breaker open

	second := alert.New(st, cfg)
	run(t, second)
	eventually(t, "the stopped process's hold runs out", func() bool { return liveHolds(t, pool, host) == 0 })
	second.BreakerChanged(host, true)
	eventually(t, "the host's next outage is alerted", func() bool { return events(t, pool, dispatch.AlertBreakerOpened) == 2 })
	if n := events(t, pool, dispatch.AlertBreakerClosed); n != 0 {
		t.Errorf("%d breaker.closed events, want none: no breaker closed", n)
	}
}

// Replicas whose breakers open for the same host alert it once, when the
// first opens, and alert it closed when the last closes, not before.
func TestBreakerAlertsOpenWithTheFirstReplicaAndCloseWithTheLast(t *testing.T) {
	t.Parallel()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1})
	cfg := alert.Config{Window: time.Minute, Tick: 10 * time.Millisecond}
	const host = "api.example.com:443"
	a, b := alert.New(st, cfg), alert.New(st, cfg)
	run(t, a)
	run(t, b)
	opened := func() int { return events(t, pool, dispatch.AlertBreakerOpened) }
	closed := func() int { return events(t, pool, dispatch.AlertBreakerClosed) }

	a.BreakerChanged(host, true)
	eventually(t, "a's breaker holds the alert", func() bool { return liveHolds(t, pool, host) == 1 })
	b.BreakerChanged(host, true)
	eventually(t, "b's breaker holds it too", func() bool { return liveHolds(t, pool, host) == 2 })
	if n := opened(); n != 1 {
		t.Errorf("%d breaker.opened events, want 1", n)
	}
	a.BreakerChanged(host, false)
	eventually(t, "a's breaker lets go", func() bool { return liveHolds(t, pool, host) == 1 })
	if n := closed(); n != 0 {
		t.Errorf("%d breaker.closed events while b's breaker is open, want none", n)
	}
	b.BreakerChanged(host, false)
	eventually(t, "the last breaker's close is alerted", func() bool { return closed() == 1 })
	if n := opened(); n != 1 || liveHolds(t, pool, host) != 0 {
		t.Errorf("%d breaker.opened events (want 1), %d holds left (want none)", n, liveHolds(t, pool, host))
	}
}

// Many breakers changing at once (a network outage): every host's
// opening, and then its closing, is recorded; none is dropped.
func TestNotifierRecordsEveryBreakerChange(t *testing.T) {
	t.Parallel()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1})
	n := alert.New(st, alert.Config{Window: time.Minute, Tick: 10 * time.Millisecond})
	const hosts = 300
	for i := range hosts { // before Run takes any
		n.BreakerChanged(fmt.Sprintf("h%d.example:443", i), true)
	}
	run(t, n)
	eventually(t, "every opening is recorded", func() bool { return events(t, pool, dispatch.AlertBreakerOpened) == hosts })
	for i := range hosts {
		n.BreakerChanged(fmt.Sprintf("h%d.example:443", i), false)
	}
	eventually(t, "every closing is recorded", func() bool { return events(t, pool, dispatch.AlertBreakerClosed) == hosts })
}
