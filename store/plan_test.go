package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// The claim finds its jobs by primary key whatever the statistics say.
// With statistics taken while almost every job was COMPLETED and a backlog
// of PENDING jobs since, PostgreSQL planned the claim as a scan of every
// PENDING job through idx_dispatch_status hashed against the ids, and split
// mode stalled at 300 deliveries/s until the next autoanalyze.
func TestClaimIsPlannedByPrimaryKeyWithStaleStatistics(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	insert := func(n int, status string) []int64 {
		t.Helper()
		batch := make([]*dispatch.Job, n)
		for i := range batch {
			batch[i] = newJob()
		}
		out, _, err := st.CreateJobs(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, n)
		for i, j := range out {
			ids[i] = j.ID
		}
		if _, err := pool.Exec(ctx, `UPDATE dispatch_job SET status = $2 WHERE id = ANY($1)`, ids, status); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for range 40 {
		insert(100, "COMPLETED")
	}
	if _, err := pool.Exec(ctx, `ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	var backlog []int64
	for range 30 {
		backlog = append(backlog, insert(100, "PENDING")...) // not analyzed: the statistics say PENDING is rare
	}
	ids := backlog[:50]
	now := time.Now()
	times := func(t time.Time) []time.Time {
		out := make([]time.Time, len(ids))
		for i := range out {
			out[i] = t
		}
		return out
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// A custom plan, as PostgreSQL makes for a statement's first runs and
	// whenever it finds one cheaper than the generic plan.
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+store.ClaimManySQL,
		ids, times(now), times(now.Add(time.Minute)), times(now.Add(time.Second))).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var indexes []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if name, ok := v["Index Name"].(string); ok && v["Relation Name"] == "dispatch_job" && v["Alias"] == "j" {
				indexes = append(indexes, name)
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
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	walk(doc)
	if strings.Join(indexes, ",") != "dispatch_job_pkey" {
		t.Errorf("the claim reads dispatch_job through %v, want the primary key only:\n%s", indexes, plan)
	}
}
