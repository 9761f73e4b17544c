package store_test

import (
	"fmt"
	"testing"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// A page of subscriptions' health is read through indexes: behind a long
// history of finished jobs, many of them failed, the statement scans no
// partition of dispatch_job and reads a bounded number of index entries
// per subscription, also for one that never failed.
func TestSubscriptionHealthReadsThroughTheIndex(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	for range 40 {
		createJobs(t, st, 100)
	}
	// Forty subscriptions share the history, 100 jobs each: the first's
	// all delivered, every tenth of the second's failed, and a third of
	// every other's.
	if _, err := pool.Exec(ctx, `UPDATE dispatch_job j SET subscription_id = 1 + n % 40,
		status = CASE WHEN (n % 40 = 1 AND n % 400 = 1) OR (n % 40 >= 2 AND n % 3 = 0) THEN 'ERROR' ELSE 'COMPLETED' END,
		last_error = CASE WHEN (n % 40 = 1 AND n % 400 = 1) OR (n % 40 >= 2 AND n % 3 = 0) THEN 'HTTP 500' END,
		completed_at = created_at + interval '1 second', queued_at = now()
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM dispatch_job) r WHERE j.id = r.id`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	health, err := st.SubscriptionHealth(ctx, []int64{1, 2, 99})
	if err != nil {
		t.Fatal(err)
	}
	if h := health[1]; h.Finished != dispatch.HealthWindow || h.Completed != dispatch.HealthWindow || h.LastFailure != nil || h.LastSuccess == nil {
		t.Errorf("health of the one that never failed = %+v, want 100 of its last 100 completed and no failure", h)
	}
	if h := health[2]; h.Finished != dispatch.HealthWindow || h.Completed != 90 || h.LastError != "HTTP 500" || h.LastFailure == nil || h.LastSuccess == nil {
		t.Errorf("health of the failing one = %+v, want 90 of its last 100 completed and its last error", h)
	}
	if h := health[99]; h.Finished != 0 || h.LastSuccess != nil {
		t.Errorf("health of a subscription with no jobs = %+v", h)
	}

	e := explain(t, pool, true, store.HealthQuery, []int64{1, 2}, dispatch.HealthWindow)
	plan := e.plan
	var scanned []string
	read := 0.0 // index entries read, over every loop
	for _, v := range e.nodes {
		if idx, _ := v["Index Name"].(string); idx != "" {
			rows, _ := v["Actual Rows"].(float64)
			removed, _ := v["Rows Removed by Filter"].(float64)
			loops, _ := v["Actual Loops"].(float64)
			read += (rows + removed) * loops
		}
		if e.onFilled(v) && (v["Node Type"] == "Seq Scan" || v["Node Type"] == "Bitmap Heap Scan") {
			scanned = append(scanned, fmt.Sprint(v["Node Type"], " on ", v["Relation Name"]))
		}
	}
	if len(scanned) > 0 {
		t.Errorf("the health statement scans dispatch_job: %v\n%s", scanned, plan)
	}
	// At most each subscription's newest 100 of each status and two more
	// entries are read, not the history's (nor its failures').
	if read > 2*(2*dispatch.HealthWindow+2) {
		t.Errorf("the health of 2 subscriptions read %.0f index entries, want at most %d\n%s", read, 2*(2*dispatch.HealthWindow+2), plan)
	}
}
