package store_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// A page of subscriptions' health is read through
// idx_dispatch_subscription_done: behind a long history of finished jobs,
// the statement scans no partition of dispatch_job and reads a bounded
// number of index entries per subscription.
func TestSubscriptionHealthReadsThroughTheIndex(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	for range 40 {
		createJobs(t, st, 100)
	}
	// Two subscriptions share the history: one's jobs COMPLETED, the
	// other's every tenth failed.
	if _, err := pool.Exec(ctx, `UPDATE dispatch_job j SET subscription_id = 1 + n % 2,
		status = CASE WHEN n % 20 = 1 THEN 'ERROR' ELSE 'COMPLETED' END,
		last_error = CASE WHEN n % 20 = 1 THEN 'HTTP 500' END,
		completed_at = created_at + interval '1 second', queued_at = now()
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM dispatch_job) r WHERE j.id = r.id`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	health, err := st.SubscriptionHealth(ctx, []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if h := health[2]; h.Finished != dispatch.HealthWindow || h.Completed < 85 || h.Completed > 95 || h.LastError != "HTTP 500" || h.LastFailure == nil || h.LastSuccess == nil {
		t.Errorf("health of the failing one = %+v, want about 90 of its last 100 completed and its last error", h)
	}
	if h := health[3]; h.Finished != 0 || h.LastSuccess != nil {
		t.Errorf("health of a subscription with no jobs = %+v", h)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = on; SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+store.HealthQuery, []int64{1, 2}, dispatch.HealthWindow).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	var filled []string // the partitions holding the jobs (an empty one may be planned any way: each costs nothing)
	rows, err := tx.Query(ctx, `SELECT DISTINCT tableoid::regclass::text FROM dispatch_job`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		filled = append(filled, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var scanned []string
	read := 0.0 // index entries read, over every loop
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			idx, _ := v["Index Name"].(string)
			if idx != "" {
				rows, _ := v["Actual Rows"].(float64)
				loops, _ := v["Actual Loops"].(float64)
				read += rows * loops
			}
			switch {
			case !slices.Contains(filled, fmt.Sprint(v["Relation Name"])):
			case v["Node Type"] == "Seq Scan" || v["Node Type"] == "Bitmap Heap Scan":
				scanned = append(scanned, fmt.Sprint(v["Node Type"], " on ", v["Relation Name"]))
			case idx != "" && !strings.Contains(idx, "subscription_done") && !strings.Contains(idx, "_subscription_id_status_comple"):
				scanned = append(scanned, fmt.Sprint(v["Node Type"], " on ", v["Relation Name"], " using ", idx))
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	if len(scanned) > 0 {
		t.Errorf("the health statement reads dispatch_job otherwise than through idx_dispatch_subscription_done: %v\n%s", scanned, plan)
	}
	// Each subscription's 2,000 finished jobs: at most its newest 100 of
	// each status and two more entries are read, not all of them.
	if read > 2*(2*dispatch.HealthWindow+2) {
		t.Errorf("the health of 2 subscriptions read %.0f index entries, want at most %d", read, 2*(2*dispatch.HealthWindow+2))
	}
}
