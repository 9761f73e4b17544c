package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// Many deliveries finishing at once are committed together (group commit),
// and each still gets its own answer: every attempt row is written and every
// job takes its own new state; a stale finish (its claim is gone) is
// reported as not applied without disturbing the rest.
func TestFinishAttemptConcurrentCallsEachGetTheirOwnOutcome(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	const n = 60
	jobs := make([]dispatch.Job, n)
	for i := range jobs {
		jobs[i] = createJob(t, st)
		claim(t, st, jobs[i].ID, t0, dispatch.Claimed)
	}
	applied := make([]bool, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := jobs[i%n]
			a := dispatch.Attempt{JobID: j.ID, AttemptNumber: 1, AttemptedAt: t0, CompletedAt: t0.Add(time.Duration(i) * time.Millisecond),
				Status: dispatch.AttemptSuccess, ResponseCode: 200}
			tr := dispatch.Transition{Status: dispatch.StatusCompleted}
			if i%3 == 1 {
				a.Status, a.ResponseCode = dispatch.AttemptFailure, 503
				tr = dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503", NextAttemptAt: t0.Add(time.Minute)}
			}
			if i == n { // a second finish of job 0's attempt 1: its claim is gone by then, or it loses the race
				tr = dispatch.Transition{Status: dispatch.StatusError, LastError: "late"}
			}
			applied[i], errs[i] = st.FinishAttempt(t.Context(), a, tr)
		}()
	}
	wg.Wait()
	for i := range n + 1 {
		if errs[i] != nil {
			t.Fatalf("finish %d: %v", i, errs[i])
		}
	}
	if applied[0] == applied[n] {
		t.Errorf("two finishes of job 0's attempt 1: applied %v and %v, want exactly one", applied[0], applied[n])
	}
	for i := 1; i < n; i++ {
		if !applied[i] {
			t.Errorf("finish %d was not applied", i)
		}
		got := getJob(t, st, jobs[i].ID)
		want := dispatch.StatusCompleted
		if i%3 == 1 {
			want = dispatch.StatusFailed
		}
		if got.Status != want {
			t.Errorf("job %d is %s, want %s", i, got.Status, want)
		}
		if want == dispatch.StatusFailed && (got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(t0.Add(time.Minute))) {
			t.Errorf("job %d next attempt %v, want %v", i, got.NextAttemptAt, t0.Add(time.Minute))
		}
		if atts, err := st.ListAttempts(t.Context(), jobs[i].ID); err != nil || len(atts) != 1 {
			t.Errorf("job %d has %d attempts (%v), want 1", i, len(atts), err)
		}
	}
}
