package store

import (
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

func freshJob1(id int64, payload int) dispatch.Job {
	return dispatch.Job{ID: id, Status: dispatch.StatusPending, MaxRetries: 3, Payload: strings.Repeat("x", payload)}
}

// The jobs remembered for deferred claims are bounded by count, by payload
// bytes and by age; the oldest go first, and each is claimed at most once.
func TestFreshJobsAreBounded(t *testing.T) {
	t.Parallel()
	var f freshJobs
	t0 := time.Now()
	for id := int64(1); id <= freshMax+10; id++ {
		f.put([]dispatch.Job{freshJob1(id, 10)}, t0)
	}
	if len(f.jobs) != freshMax {
		t.Errorf("%d jobs remembered after %d puts, want %d", len(f.jobs), freshMax+10, freshMax)
	}
	if _, ok := f.claim(10, t0, time.Minute); ok {
		t.Error("one of the oldest jobs is still remembered past the count")
	}
	if _, ok := f.claim(freshMax+10, t0, time.Minute); !ok {
		t.Error("the newest job is not remembered")
	}
	if _, ok := f.claim(freshMax+10, t0, time.Minute); ok {
		t.Error("a job is claimed in memory twice")
	}
	if _, ok := f.claim(freshMax+9, t0.Add(freshTTL), time.Minute); ok {
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
