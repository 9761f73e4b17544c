package dispatch_test

import (
	"math"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// noJitter makes Backoff.Delay exact: 0.5 maps to a jitter factor of 0.
func noJitter() float64 { return 0.5 }

func TestBackoffDelay(t *testing.T) {
	b := dispatch.Backoff{Base: time.Second, Max: time.Minute, Rand: noJitter}
	tests := []struct {
		strategy dispatch.RetryStrategy
		attempt  int
		want     time.Duration
	}{
		{dispatch.RetryExponential, 1, time.Second},
		{dispatch.RetryExponential, 2, 2 * time.Second},
		{dispatch.RetryExponential, 3, 4 * time.Second},
		{dispatch.RetryExponential, 6, 32 * time.Second},
		{dispatch.RetryExponential, 7, time.Minute}, // 64s capped
		{dispatch.RetryExponential, 50, time.Minute},
		{dispatch.RetryExponential, math.MaxInt, time.Minute},
		{dispatch.RetryExponential, 0, time.Second}, // treated as the first attempt
		{dispatch.RetryExponential, -3, time.Second},
		{"", 3, 4 * time.Second}, // unknown strategies back off exponentially
		{dispatch.RetryLinear, 1, time.Second},
		{dispatch.RetryLinear, 3, 3 * time.Second},
		{dispatch.RetryLinear, 60, time.Minute},
		{dispatch.RetryLinear, 61, time.Minute},
		{dispatch.RetryFixed, 1, time.Second},
		{dispatch.RetryFixed, 40, time.Second},
	}
	for _, tt := range tests {
		if got := b.Delay(tt.strategy, tt.attempt); got != tt.want {
			t.Errorf("Delay(%q, %d) = %s, want %s", tt.strategy, tt.attempt, got, tt.want)
		}
	}
}

func TestBackoffNeverOverflows(t *testing.T) {
	b := dispatch.Backoff{Base: time.Hour, Max: math.MaxInt64, Rand: noJitter}
	for n := 1; n <= 100; n++ {
		for _, s := range []dispatch.RetryStrategy{dispatch.RetryExponential, dispatch.RetryLinear, dispatch.RetryFixed} {
			if d := b.Delay(s, n); d < time.Hour {
				t.Fatalf("Delay(%q, %d) = %s: overflowed below the base", s, n, d)
			}
		}
	}
}

func TestBackoffJitter(t *testing.T) {
	b := dispatch.Backoff{Base: 10 * time.Second, Max: time.Hour}
	tests := []struct {
		r    float64
		want time.Duration
	}{
		{0, 9 * time.Second}, // −10%
		{0.25, 9500 * time.Millisecond},
		{0.5, 10 * time.Second},
		{0.75, 10500 * time.Millisecond},
	}
	for _, tt := range tests {
		b.Rand = func() float64 { return tt.r }
		if got := b.Delay(dispatch.RetryFixed, 1); absDur(got-tt.want) > time.Microsecond {
			t.Errorf("rand %v: Delay = %s, want %s", tt.r, got, tt.want)
		}
	}
	b.Rand = func() float64 { return math.Nextafter(1, 0) }
	if got := b.Delay(dispatch.RetryFixed, 1); got > 11*time.Second || got < 10999*time.Millisecond {
		t.Errorf("rand just below 1: Delay = %s, want just below 11s", got)
	}

	// The default source stays within ±10% and actually varies.
	b.Rand = nil
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := b.Delay(dispatch.RetryExponential, 3) // 40s
		if d < 36*time.Second || d > 44*time.Second {
			t.Fatalf("Delay = %s, outside 40s ±10%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct delays in 1000 draws: no jitter?", len(seen))
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func TestRetryStrategyValid(t *testing.T) {
	for _, s := range []dispatch.RetryStrategy{dispatch.RetryExponential, dispatch.RetryLinear, dispatch.RetryFixed} {
		if !s.Valid() {
			t.Errorf("%q not valid", s)
		}
	}
	for _, s := range []dispatch.RetryStrategy{"", "Exponential", "random"} {
		if s.Valid() {
			t.Errorf("%q valid", s)
		}
	}
}
