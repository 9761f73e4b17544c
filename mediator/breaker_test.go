package mediator_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
)

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fail reports n failed requests to host.
func fail(t *testing.T, b *mediator.Breakers, host string, n int) {
	t.Helper()
	for i := range n {
		done, _, ok := b.Allow(host)
		if !ok {
			t.Fatalf("request %d refused before the breaker should open", i+1)
		}
		done(true)
	}
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	b := mediator.NewBreakers(3, time.Minute)
	fail(t, b, "a.example:443", 2)
	// A success resets the count: failures must be consecutive.
	done, _, _ := b.Allow("a.example:443")
	done(false)
	fail(t, b, "a.example:443", 3)

	_, wait, ok := b.Allow("a.example:443")
	if ok {
		t.Fatal("breaker still closed after 3 consecutive failures")
	}
	if wait < 55*time.Second || wait > time.Minute {
		t.Errorf("wait = %s, want about the open duration (1m)", wait)
	}
	// Other hosts are not affected.
	if _, _, ok := b.Allow("b.example:443"); !ok {
		t.Error("an unrelated host is refused")
	}
}

func TestBreakerClosesAfterSuccessfulTrial(t *testing.T) {
	b := mediator.NewBreakers(2, 50*time.Millisecond)
	const host = "flaky.example:443"
	fail(t, b, host, 2)
	_, wait, ok := b.Allow(host)
	if ok || wait <= 0 {
		t.Fatalf("open breaker: ok %v, wait %s", ok, wait)
	}

	// After the open duration one trial request goes through (half-open) ...
	var trial func(bool)
	waitUntil(t, 5*time.Second, "the breaker lets a trial through", func() bool {
		done, _, ok := b.Allow(host)
		trial = done
		return ok
	})
	// ... and only one at a time.
	if _, wait, ok := b.Allow(host); ok || wait <= 0 {
		t.Errorf("a second request got through during the trial (ok %v, wait %s)", ok, wait)
	}
	trial(false)

	// Closed again: several requests may run at once.
	for i := range 3 {
		if _, _, ok := b.Allow(host); !ok {
			t.Fatalf("request %d refused after a successful trial", i+1)
		}
	}
}

func TestBreakerReopensAfterFailedTrial(t *testing.T) {
	b := mediator.NewBreakers(1, 50*time.Millisecond)
	const host = "down.example:443"
	fail(t, b, host, 1)
	var trial func(bool)
	waitUntil(t, 5*time.Second, "the breaker lets a trial through", func() bool {
		done, _, ok := b.Allow(host)
		trial = done
		return ok
	})
	trial(true)
	if _, wait, ok := b.Allow(host); ok || wait <= 0 {
		t.Errorf("breaker not open again after a failed trial (ok %v, wait %s)", ok, wait)
	}
}

func TestBreakerDisabled(t *testing.T) {
	for name, b := range map[string]*mediator.Breakers{"zero failures": mediator.NewBreakers(0, time.Minute), "nil": nil} {
		for range 100 {
			done, _, ok := b.Allow("x.example:443")
			if !ok {
				t.Fatalf("%s: disabled breaker refused a request", name)
			}
			done(true)
		}
	}
}

func TestBreakerOpenListsOpenHostsOnly(t *testing.T) {
	b := mediator.NewBreakers(2, time.Minute)
	fail(t, b, "down.example:443", 2)
	fail(t, b, "flaky.example:443", 1)
	open := b.Open()
	if len(open) != 1 || open[0].Host != "down.example:443" {
		t.Fatalf("Open() = %+v, want only down.example:443", open)
	}
	if left := time.Until(open[0].Until); left < 50*time.Second || left > time.Minute {
		t.Errorf("open until %v from now, want about a minute", left)
	}
}

func TestBreakerTellsWhenItOpensAndCloses(t *testing.T) {
	b := mediator.NewBreakers(2, 50*time.Millisecond)
	var changes []string
	b.OnChange(func(host string, open bool) {
		state := "closed"
		if open {
			state = "opened"
		}
		changes = append(changes, host+" "+state)
	})
	fail(t, b, "a.example:443", 2)
	// Once open, the trial request is let through; it succeeds and closes it.
	var done func(bool)
	waitUntil(t, 5*time.Second, "the open breaker lets a trial through", func() bool {
		var ok bool
		done, _, ok = b.Allow("a.example:443")
		return ok
	})
	done(false)
	if got := strings.Join(changes, ", "); got != "a.example:443 opened, a.example:443 closed" {
		t.Errorf("changes: %s", got)
	}
}

// recordChanges has b's changes written down as "host opened|closed".
func recordChanges(b *mediator.Breakers) *[]string {
	var changes []string
	b.OnChange(func(host string, open bool) {
		state := "closed"
		if open {
			state = "opened"
		}
		changes = append(changes, host+" "+state)
	})
	return &changes
}

// A reset closes an open breaker as a successful trial would, so the
// alerts hear it close, and the host's next opening is an opening again
// (breaker.opened), not a change they already knew of.
func TestBreakerResetTellsItClosed(t *testing.T) {
	b := mediator.NewBreakers(2, time.Minute)
	changes := recordChanges(b)
	const host = "down.example:443"
	fail(t, b, host, 2)
	b.Reset(host)
	fail(t, b, host, 2)
	// A breaker reset while closed was never told open: nothing to tell.
	fail(t, b, "flaky.example:443", 1)
	b.Reset("flaky.example:443")
	if got := strings.Join(*changes, ", "); got != host+" opened, "+host+" closed, "+host+" opened" {
		t.Errorf("changes: %s", got)
	}
}

// A trial still running when its breaker is reset ends on a breaker the
// host no longer has: its failure opens nothing the alerts hear of.
func TestBreakerResetDuringTrialTellsNothingMore(t *testing.T) {
	b := mediator.NewBreakers(1, 50*time.Millisecond)
	changes := recordChanges(b)
	const host = "down.example:443"
	fail(t, b, host, 1)
	var trial func(bool)
	waitUntil(t, 5*time.Second, "the breaker lets a trial through", func() bool {
		done, _, ok := b.Allow(host)
		trial = done
		return ok
	})
	b.Reset(host) // half-open: told closed
	trial(true)
	if _, _, ok := b.Allow(host); !ok {
		t.Error("the host's new breaker refuses after the old one's trial failed")
	}
	if got := strings.Join(*changes, ", "); got != host+" opened, "+host+" closed" {
		t.Errorf("changes: %s", got)
	}
}

// An open breaker no request asks for is forgotten after its idle time
// (an hour), as requests to other hosts go on: it is told closed, since
// the host's requests go again, so the host's next outage is alerted as
// an opening, not taken for the one the alerts already know.
func TestBreakerForgottenWhileOpenTellsItClosed(t *testing.T) {
	b := mediator.NewBreakers(2, time.Minute)
	mediator.ForgetIdleAfter(b, 50*time.Millisecond)
	changes := recordChanges(b)
	const host = "down.example:443"
	fail(t, b, host, 2)
	waitUntil(t, 5*time.Second, "the idle open breaker is forgotten", func() bool {
		done, _, _ := b.Allow("up.example:443")
		done(false)
		return len(*changes) == 2
	})
	if got := strings.Join(*changes, ", "); got != host+" opened, "+host+" closed" {
		t.Fatalf("changes: %s", got)
	}
	if states := b.States(); slices.ContainsFunc(states, func(s dispatch.BreakerState) bool { return s.Host == host }) {
		t.Errorf("the forgotten breaker is still listed: %+v", states)
	}
	// The host's next outage opens a new breaker, told as an opening.
	fail(t, b, host, 2)
	if got := strings.Join(*changes, ", "); got != host+" opened, "+host+" closed, "+host+" opened" {
		t.Errorf("changes: %s", got)
	}
}
