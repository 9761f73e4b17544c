package api

import (
	"net/netip"
	"sync"
	"time"
)

// The console's sign-in throttle: after MaxFailedSignIns failed attempts
// from one client address within SignInWindow (counted from the first),
// every further attempt from it is refused with 429 and Retry-After until
// the window ends, whatever the token, so the admin token cannot be
// guessed at speed. Other addresses sign in as usual. A success forgets
// the address's failures.
const (
	MaxFailedSignIns = 5
	SignInWindow     = 5 * time.Minute
	// maxSignInAddresses caps the addresses tracked at once; beyond it
	// expired entries go first, then an arbitrary one (memory never grows
	// with the number of addresses an attacker holds).
	maxSignInAddresses = 10_000
)

type signInThrottle struct {
	mu     sync.Mutex
	byAddr map[string]*signInCount
}

type signInCount struct {
	attempts int
	since    time.Time // the first attempt of the window
}

func newSignInThrottle() *signInThrottle {
	return &signInThrottle{byAddr: map[string]*signInCount{}}
}

// begin reserves one attempt for addr at now. When addr has used its
// attempts it returns false and how long until the window ends. The
// attempt counts as failed until succeeded is called, so that parallel
// guesses cannot all pass the check before any is counted.
func (t *signInThrottle) begin(addr string, now time.Time) (wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byAddr[addr]
	if e != nil && !now.Before(e.since.Add(SignInWindow)) {
		delete(t.byAddr, addr)
		e = nil
	}
	if e == nil {
		t.makeRoom(now)
		e = &signInCount{since: now}
		t.byAddr[addr] = e
	}
	if e.attempts >= MaxFailedSignIns {
		return e.since.Add(SignInWindow).Sub(now), false
	}
	e.attempts++
	return 0, true
}

// succeeded forgets addr's attempts.
func (t *signInThrottle) succeeded(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byAddr, addr)
}

// makeRoom keeps the table below its cap (t.mu held).
func (t *signInThrottle) makeRoom(now time.Time) {
	if len(t.byAddr) < maxSignInAddresses {
		return
	}
	for k, e := range t.byAddr {
		if !now.Before(e.since.Add(SignInWindow)) {
			delete(t.byAddr, k)
		}
	}
	for k := range t.byAddr {
		if len(t.byAddr) < maxSignInAddresses {
			break
		}
		delete(t.byAddr, k)
	}
}

// signInKey is the throttle's key of a client address: an IPv4 address,
// or an IPv6 address's /64 (one host commonly holds a whole /64, so a
// key per address would let it guess 2^64 times as often).
func signInKey(clientIP string) string {
	a, err := netip.ParseAddr(clientIP)
	if err != nil {
		return clientIP
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
