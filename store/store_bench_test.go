package store_test

import (
	"fmt"
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

// BenchmarkPublishEvent is the fan-out of one event: the event row, the
// match over the subscriptions' patterns and one job per match, in one
// transaction. Each size has 10,000 subscriptions in all, of which n match
// (ns/op is the time per event; ms/event is reported too).
func BenchmarkPublishEvent(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			st, pool, _ := storetest.New(b, store.Options{NodeID: 1})
			ctx := b.Context()
			// 10,000 subscriptions: n match order.created (exact or by
			// prefix), the rest listen to other types.
			if _, err := pool.Exec(ctx, `
				INSERT INTO dispatch_subscription (id, name, url, event_types, max_retries, retry_strategy, status, created_at, updated_at)
				SELECT g, 'bench', 'https://example.com/hook/' || g,
					CASE WHEN g <= $1 THEN (CASE WHEN g % 2 = 0 THEN ARRAY['order.created'] ELSE ARRAY['order.*'] END)
					ELSE ARRAY['invoice.' || g] END,
					5, 'exponential', 'ACTIVE', now(), now()
				FROM generate_series(1, 10000) g`, n); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `ANALYZE dispatch_subscription`); err != nil {
				b.Fatal(err)
			}
			data := map[string]any{"orderId": "o-1"}
			b.ResetTimer()
			start, events := time.Now(), 0
			for b.Loop() {
				events++
				e, _, err := st.PublishEvent(ctx, &dispatch.Event{Source: "bench", Type: "order.created", Data: `{"orderId":"o-1"}`}, data)
				if err != nil || len(e.Jobs) != n {
					b.Fatalf("PublishEvent: %d jobs, err %v; want %d", len(e.Jobs), err, n)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(events), "ms/event")
		})
	}
}
