package store_test

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// An attempt's request and response headers are stored with it, whether
// its finish was committed alone or in a batch with others, and read back
// as they were; an attempt without them reads back without them.
func TestAttemptHeadersAreStored(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	ctx := t.Context()
	jobs := createJobs(t, st, 8)
	t0 := now()
	req := map[string]string{"Content-Type": "application/json", "Authorization": "[redacted]", "X-Dispatch-Attempt": "1"}
	resp := map[string]string{"X-Request-Id": "r-1", "Content-Type": "text/plain; charset=utf-8", "Note": "ünïcode ✓"}
	var wg sync.WaitGroup
	for i, j := range jobs {
		c := claim(t, st, j.ID, t0, dispatch.Claimed)
		a := dispatch.Attempt{JobID: j.ID, AttemptNumber: c.Job.AttemptCount, AttemptedAt: t0, CompletedAt: t0.Add(time.Millisecond),
			Status: dispatch.AttemptSuccess, ResponseCode: 200}
		if i > 0 { // the first has none: no request was made
			a.RequestHeaders, a.ResponseHeaders = req, resp
		}
		wg.Add(1)
		go func() { // together: the finishes are committed in batches
			defer wg.Done()
			if ok, err := st.FinishAttempt(ctx, a, dispatch.Transition{Status: dispatch.StatusCompleted}); err != nil || !ok {
				t.Errorf("FinishAttempt(%d) = %v, %v", a.JobID, ok, err)
			}
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		as, err := st.ListAttempts(ctx, j.ID)
		if err != nil || len(as) != 1 {
			t.Fatalf("ListAttempts(%d) = %v, %v", j.ID, as, err)
		}
		a := as[0]
		if i == 0 {
			if a.RequestHeaders != nil || a.ResponseHeaders != nil {
				t.Errorf("an attempt stored without headers reads back with %v and %v", a.RequestHeaders, a.ResponseHeaders)
			}
			continue
		}
		if !maps.Equal(a.RequestHeaders, req) || !maps.Equal(a.ResponseHeaders, resp) {
			t.Errorf("attempt of job %d: request headers %v, response headers %v; want them as stored", j.ID, a.RequestHeaders, a.ResponseHeaders)
		}
	}
}
