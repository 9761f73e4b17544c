package store

import (
	"cmp"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
)

// Deferred claims. A job this store created and handed over a moment ago
// is, when the very pointer it handed over comes back to this process (in
// process, or offered to a router: it carries the job's handle), in
// exactly the state it was inserted in unless this store changed it since:
// no other copy of that pointer exists to be claimed elsewhere. PENDING, no
// attempt, due, ungrouped (grouped jobs are never handed, see
// insertAndHand). ClaimJob then claims it in memory only (Claim.Deferred):
// no statement, and the attempt's record writes the claim together with the
// outcome (Transition.ClaimDeferred), or RecordClaim writes it first for a
// delivery that runs long. Any other pointer, and any job this store
// cancelled meanwhile, takes the usual claim. See
// docs/decisions/commits-per-delivery.md.
const (
	// freshMax and freshBytes bound the jobs remembered, by count and by
	// payload bytes: enough for the pointers of a second at full load.
	freshMax   = 2048
	freshBytes = 2 << 20
	// freshTTL is how long a created job is remembered. Another replica's
	// cancel of it within that span is not seen here: the cancel and the
	// delivery race, as a cancel during any delivery does.
	freshTTL = 10 * time.Second
	// freshMaxPayload: larger payloads are not held in memory.
	freshMaxPayload = 64 << 10
)

// freshJobs remembers the jobs created and handed over here most recently,
// each claimed at most once, and the deferred claims in flight.
type freshJobs struct {
	ttl   time.Duration // how long a job put is claimed here: freshTTL, or the send lease if shorter
	mu    sync.Mutex
	jobs  map[int64]freshJob
	ring  [freshMax]int64 // ids in the order put: n of them from head on
	head  int
	n     int
	bytes int // payload bytes of the jobs remembered
	// held: the jobs claimed from here whose claims are not written yet,
	// with their leases' ends. Cancelling one is refused as cancelling a
	// job IN_PROGRESS is.
	held map[int64]time.Time
}

type freshJob struct {
	job dispatch.Job
	at  time.Time
}

// put remembers committed jobs just handed over, evicting the oldest.
func (f *freshJobs) put(jobs []dispatch.Job, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.jobs == nil {
		f.jobs = make(map[int64]freshJob, freshMax)
		f.held = make(map[int64]time.Time)
	}
	for _, j := range jobs {
		if len(j.Payload) > freshMaxPayload {
			continue
		}
		for f.n == freshMax || (f.n > 0 && f.bytes+len(j.Payload) > freshBytes) {
			f.forget(f.ring[f.head])
			f.head = (f.head + 1) % freshMax
			f.n--
		}
		f.ring[(f.head+f.n)%freshMax] = j.ID
		f.n++
		at := now
		if j.QueuedAt != nil && j.QueuedAt.Before(now) {
			// The window runs from the queued mark, as the send lease does:
			// an insert that took long (a lock wait) must not leave a job
			// claimable here after its lease has ended and the sweep may
			// have sent it to another replica.
			at = *j.QueuedAt
		}
		f.jobs[j.ID] = freshJob{job: j, at: at}
		f.bytes += len(j.Payload)
	}
	if len(f.held) > freshMax { // claims whose record never came (the database was down)
		for id, until := range f.held {
			if !now.Before(until) {
				delete(f.held, id)
			}
		}
	}
}

// claim claims the job with id in memory if it was put within its ttl,
// the pointer is the copy it was handed over as (handed, with the mark and
// generation the job was stored with) and the claim statement would take
// it. It forgets the job either way: any other pointer of the job, or a
// second one, claims it the usual way.
func (f *freshJobs) claim(id int64, handed bool, mark time.Time, gen int, now time.Time, lease time.Duration) (dispatch.Job, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.jobs[id]
	if !ok {
		return dispatch.Job{}, false
	}
	f.forget(id)
	if !handed || e.job.QueuedAt == nil || !e.job.QueuedAt.Equal(mark) || e.job.PointerGen != gen ||
		now.Sub(e.at) >= cmp.Or(f.ttl, freshTTL) {
		return dispatch.Job{}, false
	}
	j, ok := claimFresh(e.job, now, lease)
	if ok {
		f.held[id] = *j.ClaimedUntil
	}
	return j, ok
}

// release ends a deferred claim's hold: its claim or record is written.
func (f *freshJobs) release(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.held, id)
}

// cancel forgets a job about to be cancelled, and reports whether a
// deferred claim of it is being delivered.
func (f *freshJobs) cancel(id int64, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forget(id)
	until, ok := f.held[id]
	return ok && now.Before(until)
}

// forget drops the job with id, if remembered (its id stays in the ring
// until its turn to go).
func (f *freshJobs) forget(id int64) {
	if e, ok := f.jobs[id]; ok {
		f.bytes -= len(e.job.Payload)
		delete(f.jobs, id)
	}
}

// claimFresh claims j, as inserted a moment ago, in memory: it reports
// false where the claim statement would have refused it or decided
// otherwise (expired, not due, grouped, no attempts).
func claimFresh(j dispatch.Job, now time.Time, lease time.Duration) (dispatch.Job, bool) {
	due := j.NextAttemptAt == nil || !j.NextAttemptAt.After(now.Add(time.Second))
	if j.Status != dispatch.StatusPending || j.GroupID != "" || j.AttemptCount >= j.MaxRetries || !due ||
		(j.ExpiresAt != nil && !now.Before(*j.ExpiresAt)) {
		return dispatch.Job{}, false
	}
	until := now.Add(lease)
	j.Status, j.AttemptCount = dispatch.StatusInProgress, j.AttemptCount+1
	j.LastAttemptAt, j.ClaimedUntil, j.UpdatedAt = &now, &until, now
	return j, true
}
