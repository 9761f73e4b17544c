package mediator_test

import (
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
)

// Every known host's breaker is listed with its state and failures, and a
// reset closes an open one at once.
func TestBreakerStatesAndReset(t *testing.T) {
	b := mediator.NewBreakers(2, time.Minute)
	fail(t, b, "down.example:443", 2)
	fail(t, b, "flaky.example:443", 1)
	states := b.States()
	if len(states) != 2 {
		t.Fatalf("states = %+v, want the two hosts", states)
	}
	down, flaky := states[0], states[1]
	if down.Host != "down.example:443" || down.State != dispatch.BreakerOpen || down.OpenUntil == nil ||
		time.Until(*down.OpenUntil) < 55*time.Second || down.ConsecutiveFailures != 2 {
		t.Errorf("down = %+v, want OPEN for about a minute after 2 failures", down)
	}
	if flaky.State != dispatch.BreakerClosed || flaky.ConsecutiveFailures != 1 || flaky.OpenUntil != nil {
		t.Errorf("flaky = %+v, want CLOSED with 1 failure", flaky)
	}
	if !b.Reset("down.example:443") {
		t.Fatal("Reset of a known host reports none")
	}
	if _, _, ok := b.Allow("down.example:443"); !ok {
		t.Error("a reset breaker still refuses")
	}
	if b.Reset("never.example:443") {
		t.Error("Reset of an unknown host reports one")
	}
	if got := mediator.NewBreakers(0, time.Minute).States(); got != nil {
		t.Errorf("breaking off: states %+v", got)
	}
}
