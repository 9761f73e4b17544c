package mediator

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/patrickmn/go-cache"
	"github.com/sony/gobreaker/v2"

	"github.com/dispatchhq/dispatch"
)

// Breakers holds one circuit breaker per target host, so one failing
// endpoint stops costing attempts and pool slots while others go on.
// Idle breakers are forgotten after an hour (breakerIdle).
type Breakers struct {
	failures uint32
	open     time.Duration
	idle     time.Duration
	mu       sync.Mutex
	byHost   *cache.Cache
	swept    time.Time // when forgotten breakers were last looked for
	// changed, when set, is told each time a host's breaker opens or
	// closes (operational alerts), a reset and an open breaker forgotten
	// included. It is called with the breaker's locks held, so it must
	// not block.
	changed func(host string, open bool)
}

// breakerIdle is how long a breaker no request asked for is kept.
const breakerIdle = time.Hour

// OnChange has fn told each time a host's breaker opens or closes; fn must
// not block. Call it before the breakers are used.
func (b *Breakers) OnChange(fn func(host string, open bool)) {
	if b != nil {
		b.changed = fn
	}
}

type hostBreaker struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	mu       sync.Mutex
	openedAt time.Time
	tripped  uint32 // the failures in a row that opened it last
	// toldOpen is whether changed was last told this breaker is open
	// (half-open still is: only a close or an opening is told).
	toldOpen bool
	// reset is set when the breaker is forgotten (Reset, or idle):
	// requests still running may change it, but the host has a new one,
	// so it tells nothing.
	reset bool
}

// NewBreakers opens a host's breaker after `failures` consecutive retryable
// failures and keeps it open for `open`. failures = 0 disables breaking.
func NewBreakers(failures int, open time.Duration) *Breakers {
	// No janitor goroutine (it would have no owner): forgotten breakers are
	// swept as requests ask for breakers (get), at most once a minute.
	b := &Breakers{failures: uint32(failures), open: open, idle: breakerIdle, byHost: cache.New(breakerIdle, 0)}
	b.byHost.OnEvicted(func(host string, v any) { b.forget(host, v.(*hostBreaker)) })
	return b
}

// forget is told that host's breaker hb is gone (reset, or idle): one
// told open is told closed, as if its trial had succeeded, since the
// host's requests go again; so the host's next opening is alerted as one,
// not taken for an opening already known. Called with b.mu held.
func (b *Breakers) forget(host string, hb *hostBreaker) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.reset = true
	if hb.toldOpen && b.changed != nil {
		b.changed(host, false)
	}
	hb.toldOpen = false
}

// sweep forgets the breakers idle for longer than b.idle, at most once a
// sixtieth of it (a minute). Called with b.mu held.
func (b *Breakers) sweep(now time.Time) {
	if now.Sub(b.swept) >= b.idle/60 {
		b.swept = now
		b.byHost.DeleteExpired()
	}
}

func (b *Breakers) get(host string) *hostBreaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(time.Now())
	if hb, ok := b.byHost.Get(host); ok {
		b.byHost.Set(host, hb, b.idle) // refresh the idle timer
		return hb.(*hostBreaker)
	}
	b.byHost.Delete(host) // the host's idle breaker, if one is left: forgotten
	hb := &hostBreaker{}
	hb.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        host,
		MaxRequests: 1,
		Timeout:     b.open,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if c.ConsecutiveFailures < b.failures {
				return false
			}
			hb.mu.Lock()
			hb.tripped = c.ConsecutiveFailures
			hb.mu.Unlock()
			return true
		},
		OnStateChange: func(_ string, _, to gobreaker.State) {
			hb.mu.Lock()
			defer hb.mu.Unlock()
			if to == gobreaker.StateOpen {
				hb.openedAt = time.Now()
			}
			if to == gobreaker.StateHalfOpen || hb.reset {
				return
			}
			hb.toldOpen = to == gobreaker.StateOpen
			if b.changed != nil {
				b.changed(host, hb.toldOpen)
			}
		},
	})
	b.byHost.Set(host, hb, b.idle)
	return hb
}

// Allow asks whether a request to host may go. If not, it says how long
// until the breaker lets a trial request through. done must be called with
// whether the request failed in a way that counts against the host.
func (b *Breakers) Allow(host string) (done func(failed bool), wait time.Duration, ok bool) {
	if b == nil || b.failures == 0 {
		return func(bool) {}, 0, true
	}
	hb := b.get(host)
	report, err := hb.cb.Allow()
	if err == nil {
		return func(failed bool) {
			if failed {
				report(errors.New("failed"))
			} else {
				report(nil)
			}
		}, 0, true
	}
	hb.mu.Lock()
	wait = b.open - time.Since(hb.openedAt)
	hb.mu.Unlock()
	if wait < time.Second {
		wait = time.Second // half-open and a trial is already running
	}
	return nil, wait, false
}

// OpenHost is a target host whose breaker is open until Until.
type OpenHost struct {
	Host  string
	Until time.Time
}

// Open lists the hosts whose breakers are open now, for the console.
func (b *Breakers) Open() []OpenHost {
	if b == nil || b.failures == 0 {
		return nil
	}
	b.mu.Lock()
	b.sweep(time.Now())
	items := b.byHost.Items()
	b.mu.Unlock()
	var out []OpenHost
	for host, it := range items {
		hb := it.Object.(*hostBreaker)
		if hb.cb.State() != gobreaker.StateOpen {
			continue
		}
		hb.mu.Lock()
		until := hb.openedAt.Add(b.open)
		hb.mu.Unlock()
		out = append(out, OpenHost{Host: host, Until: until})
	}
	return out
}

// States lists every target host's breaker this process knows (those used
// within the hour), by host.
func (b *Breakers) States() []dispatch.BreakerState {
	if b == nil || b.failures == 0 {
		return nil
	}
	b.mu.Lock()
	b.sweep(time.Now())
	items := b.byHost.Items()
	b.mu.Unlock()
	out := make([]dispatch.BreakerState, 0, len(items))
	for host, it := range items {
		hb := it.Object.(*hostBreaker)
		st := dispatch.BreakerState{Host: host, State: dispatch.BreakerClosed, ConsecutiveFailures: int(hb.cb.Counts().ConsecutiveFailures)}
		switch hb.cb.State() {
		case gobreaker.StateOpen: // its counts start again at 0 when it opens
			hb.mu.Lock()
			until := hb.openedAt.Add(b.open)
			st.ConsecutiveFailures = int(hb.tripped)
			hb.mu.Unlock()
			st.State, st.OpenUntil = dispatch.BreakerOpen, &until
		case gobreaker.StateHalfOpen:
			st.State = dispatch.BreakerHalfOpen
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b dispatch.BreakerState) int { return strings.Compare(a.Host, b.Host) })
	return out
}

// Reset closes host's breaker: its failures are forgotten and deliveries
// go at once. A breaker open (or half-open) is told closed, as if its trial
// had succeeded, so the alerts see the host's next opening as one. It
// reports whether the host had one.
func (b *Breakers) Reset(host string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.byHost.Get(host)
	b.byHost.Delete(host) // forget, told closed if it was told open
	return ok
}
