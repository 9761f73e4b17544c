package store

import (
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// mark is the queued mark the test's jobs are handed over with; the tests
// put them a moment after it (at), as the store does.
var (
	mark = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at   = mark.Add(time.Millisecond)
)

func freshJob1(id int64, payload int) dispatch.Job {
	return dispatch.Job{ID: id, Status: dispatch.StatusPending, MaxRetries: 3, Payload: strings.Repeat("x", payload), QueuedAt: &mark}
}

// The jobs remembered for deferred claims are bounded by count, by payload
// bytes and by age; the oldest go first, and each is claimed at most once.
func TestFreshJobsAreBounded(t *testing.T) {
	t.Parallel()
	var f freshJobs
	t0 := at
	for id := int64(1); id <= freshMax+10; id++ {
		f.put([]dispatch.Job{freshJob1(id, 10)}, t0)
	}
	if len(f.jobs) != freshMax {
		t.Errorf("%d jobs remembered after %d puts, want %d", len(f.jobs), freshMax+10, freshMax)
	}
	if _, ok := f.claim(10, true, mark, 0, t0, time.Minute); ok {
		t.Error("one of the oldest jobs is still remembered past the count")
	}
	if _, ok := f.claim(freshMax+10, true, mark, 0, t0, time.Minute); !ok {
		t.Error("the newest job is not remembered")
	}
	if _, ok := f.claim(freshMax+10, true, mark, 0, t0, time.Minute); ok {
		t.Error("a job is claimed in memory twice")
	}
	if _, ok := f.claim(freshMax+9, true, mark, 0, t0.Add(freshTTL), time.Minute); ok {
		t.Error("a job remembered past freshTTL is claimed in memory")
	}

	var g freshJobs
	big := freshMaxPayload
	for id := int64(1); id <= 2*freshBytes/int64(big); id++ {
		g.put([]dispatch.Job{freshJob1(id, big)}, t0)
	}
	if g.bytes > freshBytes || len(g.jobs) != freshBytes/big {
		t.Errorf("%d jobs with %d payload bytes remembered, want at most %d bytes (%d jobs)", len(g.jobs), g.bytes, freshBytes, freshBytes/big)
	}
	g.put([]dispatch.Job{freshJob1(1<<40, freshMaxPayload+1)}, t0)
	if _, ok := g.jobs[1<<40]; ok {
		t.Error("a job over freshMaxPayload is remembered")
	}
}

// Only the pointer a job was handed over as is claimed in memory: one
// from the queue (no handle), or handed over again since (another mark or
// generation), may be a copy another replica has claimed already. Such a
// pointer makes the store forget the job: it is claimed by statement.
func TestFreshJobsAreClaimedOnlyThroughTheirHandle(t *testing.T) {
	t.Parallel()
	var f freshJobs
	t0 := at
	f.put([]dispatch.Job{freshJob1(1, 10), freshJob1(2, 10), freshJob1(3, 10), freshJob1(4, 10)}, t0)
	for _, c := range []struct {
		id     int64
		handed bool
		mark   time.Time
		gen    int
		why    string
	}{
		{1, false, time.Time{}, 0, "a pointer from the queue"},
		{2, true, mark.Add(time.Second), 0, "a pointer handed over under another mark"},
		{3, true, mark, 1, "a pointer of another generation"},
	} {
		if _, ok := f.claim(c.id, c.handed, c.mark, c.gen, t0, time.Minute); ok {
			t.Errorf("%s is claimed in memory", c.why)
		}
		if _, ok := f.claim(c.id, true, mark, 0, t0, time.Minute); ok {
			t.Errorf("after %s, the job is still claimed in memory", c.why)
		}
	}
	if _, ok := f.claim(4, true, mark, 0, t0, time.Minute); !ok {
		t.Error("the pointer handed over is not claimed in memory")
	}
	// An insert that took 25 s after its mark (a lock wait): its send
	// lease, which runs from the mark, ends 5 s after it was put, when the
	// sweep may send it elsewhere; it is not claimed here 6 s on.
	slow := freshJob1(6, 10)
	longAgo := t0.Add(-25 * time.Second).UTC().Truncate(time.Microsecond)
	slow.QueuedAt = &longAgo
	f.put([]dispatch.Job{slow}, t0)
	if _, ok := f.claim(6, true, longAgo, 0, t0.Add(6*time.Second), time.Minute); ok {
		t.Error("a job is claimed in memory 31 s after its queued mark")
	}
	short := freshJobs{ttl: time.Second}
	short.put([]dispatch.Job{freshJob1(5, 10)}, t0)
	if _, ok := short.claim(5, true, mark, 0, t0.Add(time.Second), time.Minute); ok {
		t.Error("a job is claimed in memory past a send lease shorter than freshTTL")
	}
}
