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
// Idle breakers are forgotten after an hour.
type Breakers struct {
	failures uint32
	open     time.Duration
	mu       sync.Mutex
	byHost   *cache.Cache
	// changed, when set, is told each time a host's breaker opens or
	// closes (operational alerts), a reset included. It is called with
	// the breaker's locks held, so it must not block.
	changed func(host string, open bool)
}

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
	// reset is set when Reset forgets the breaker: requests still running
	// may change it, but the host has a new one, so it tells nothing.
	reset bool
}

// NewBreakers opens a host's breaker after `failures` consecutive retryable
// failures and keeps it open for `open`. failures = 0 disables breaking.
func NewBreakers(failures int, open time.Duration) *Breakers {
	// No janitor goroutine (it would have no owner): expired breakers are
	// pruned when a new host is added instead.
	return &Breakers{failures: uint32(failures), open: open, byHost: cache.New(time.Hour, 0)}
}

func (b *Breakers) get(host string) *hostBreaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	if hb, ok := b.byHost.Get(host); ok {
		b.byHost.SetDefault(host, hb) // refresh the idle timer
		return hb.(*hostBreaker)
	}
	if b.byHost.ItemCount() >= 1024 {
		b.byHost.DeleteExpired()
	}
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
	b.byHost.SetDefault(host, hb)
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
	it, ok := b.byHost.Get(host)
	if ok {
		b.byHost.Delete(host)
	}
	b.mu.Unlock()
	if !ok {
		return false
	}
	hb := it.(*hostBreaker)
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.reset = true
	if hb.toldOpen && b.changed != nil {
		b.changed(host, false)
	}
	return true
}
