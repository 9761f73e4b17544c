package store_test

import (
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// BenchmarkDeliveryCycle is the store's share of one successful delivery
// against the real database: create the job, claim it, record the attempt.
func BenchmarkDeliveryCycle(b *testing.B) {
	st, _, _ := storetest.New(b, store.Options{NodeID: 1})
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		j, created, err := st.CreateJob(ctx, newJob())
		if err != nil || !created {
			b.Fatalf("CreateJob: created %v, err %v", created, err)
		}
		t0 := time.Now()
		c, err := st.ClaimJob(ctx, j.ID, t0, lease)
		if err != nil || c.State != dispatch.Claimed {
			b.Fatalf("ClaimJob: state %v, err %v", c.State, err)
		}
		applied, err := st.FinishAttempt(ctx, dispatch.Attempt{
			JobID: j.ID, AttemptNumber: c.Job.AttemptCount, AttemptedAt: t0, CompletedAt: time.Now(),
			Status: dispatch.AttemptSuccess, ResponseCode: 200,
		}, dispatch.Transition{Status: dispatch.StatusCompleted})
		if err != nil || !applied {
			b.Fatalf("FinishAttempt: applied %v, err %v", applied, err)
		}
	}
}
