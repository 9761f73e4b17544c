package store

import (
	"slices"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
)

// lostClaims remembers the claims this process made whose answer it never
// read and could not check afterwards (the connection dropped after the
// commit, and PostgreSQL stayed out of reach for the look-up that would
// have recognised them). ClaimJob then returned an error and no request
// went out, so the claim is still this process's to deliver: the next
// pointer of the job takes it over at once, instead of waiting out the
// lease and charging the job a TIMEOUT attempt that was never made (a
// job with one try would end ERROR without a request).
//
// It is per process: a pointer handled by another replica waits out the
// lease as before. An entry goes when it is taken, or once its lease has
// ended (another processor may have taken the job over by then, and the
// claim's stamps no longer match).
type lostClaims struct {
	mu sync.Mutex
	m  map[int64][]lostClaim // a job's claims tried while it was away: any one may be the row's
}

type lostClaim struct{ now, until time.Time }

// maxLostClaims bounds the memory; past it a new claim is not remembered
// (its job waits out the lease).
const maxLostClaims = 10_000

// add remembers the claim of job id made at now until until.
func (l *lostClaims) add(id int64, now, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[int64][]lostClaim)
	}
	l.expire(now) // a few entries, only while the database is unreachable
	if len(l.m) >= maxLostClaims || len(l.m[id]) >= maxLostPerJob {
		return
	}
	l.m[id] = append(l.m[id], lostClaim{now: now, until: until})
}

// maxLostPerJob bounds the claims remembered for one job: those whose
// statement reached the database and may have committed, a few at most.
const maxLostPerJob = 4

// take reports whether j holds a claim this process lost the answer of,
// and forgets it.
func (l *lostClaims) take(j dispatch.Job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs, ok := l.m[j.ID]
	if !ok {
		return false
	}
	delete(l.m, j.ID)
	return slices.ContainsFunc(cs, func(c lostClaim) bool { return ownClaim(j, c.now, c.until) })
}

// expire forgets the claims whose lease ended before now.
func (l *lostClaims) expire(now time.Time) {
	for id, cs := range l.m {
		if !slices.ContainsFunc(cs, func(c lostClaim) bool { return !c.until.Before(now) }) {
			delete(l.m, id)
		}
	}
}
