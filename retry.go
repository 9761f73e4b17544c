package dispatch

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy shapes the delay between attempts.
type RetryStrategy string

// Retry strategies. Exponential is the default.
const (
	RetryExponential RetryStrategy = "exponential"
	RetryLinear      RetryStrategy = "linear"
	RetryFixed       RetryStrategy = "fixed"
)

// Valid reports whether s is a known strategy.
func (s RetryStrategy) Valid() bool {
	return s == RetryExponential || s == RetryLinear || s == RetryFixed
}

// Backoff computes retry delays: exponential base×2^(n−1), linear base×n,
// fixed base, capped at Max, with ±10% jitter.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
	// Rand returns a float in [0,1); nil uses math/rand/v2.
	Rand func() float64
}

// Delay returns the wait before the attempt after attempt n (n ≥ 1) failed.
func (b Backoff) Delay(s RetryStrategy, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	var d time.Duration
	switch s {
	case RetryFixed:
		d = b.Base
	case RetryLinear:
		d = b.Base * time.Duration(n)
	default:
		d = b.Base
		for i := 1; i < n && d < b.Max; i++ {
			d *= 2
		}
	}
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	jitter := (r()*0.2 - 0.1) * float64(d)
	return d + time.Duration(jitter)
}
