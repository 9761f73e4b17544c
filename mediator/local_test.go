package mediator_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
)

// The in-process mediator gives the router the outcomes the processing
// endpoint would: done (nil) after a success, a RetryAfter of whole seconds
// after a retryable failure, nil for an unknown job.
func TestLocalMediatorOutcomes(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	var calls atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer target.Close()
	j := s.createJob(t, target.URL, nil)
	local := mediator.NewLocal(s.proc)
	ptr := dispatch.Pointer{ID: dispatch.FormatID(j.ID), PoolCode: dispatch.DefaultPool, MediationType: "HTTP"}

	err := local.Mediate(context.Background(), ptr)
	var ra *dispatch.RetryAfter
	if !errors.As(err, &ra) {
		t.Fatalf("after a 503 Mediate returned %v, want a RetryAfter", err)
	}
	if ra.Delay <= 0 || ra.Delay%time.Second != 0 {
		t.Errorf("retry delay %v, want a positive whole number of seconds", ra.Delay)
	}
	if got := s.job(t, j.ID); got.Status != dispatch.StatusFailed || got.AttemptCount != 1 {
		t.Errorf("job is %s after %d attempts, want FAILED after 1", got.Status, got.AttemptCount)
	}
	// Make the job due now (the backoff would otherwise refuse it) and try again.
	if _, err := s.pool.Exec(context.Background(), `UPDATE dispatch_job SET next_attempt_at = now() WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := local.Mediate(context.Background(), ptr); err != nil {
		t.Fatalf("after a 200 Mediate returned %v, want nil (done)", err)
	}
	if got := s.job(t, j.ID); got.Status != dispatch.StatusCompleted {
		t.Errorf("job is %s, want COMPLETED", got.Status)
	}
	unknown := dispatch.Pointer{ID: dispatch.FormatID(j.ID + 12345), PoolCode: dispatch.DefaultPool}
	if err := local.Mediate(context.Background(), unknown); err != nil {
		t.Errorf("unknown job: %v, want nil (dropped)", err)
	}
}
