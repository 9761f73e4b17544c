package store_test

import (
	"encoding/json"
	"fmt"
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
	if got := jobIndexes(t, plan); got != "dispatch_job_pkey" {
		t.Errorf("the claim reads dispatch_job through %q, want the primary key only:\n%s", got, plan)
	}
}

// A connection that ran the claim and the finish while dispatch_job was
// small plans them for the table it finds later. Left to itself, PostgreSQL
// switches a prepared statement to a generic plan after five runs, costed
// against the table as it was then, and keeps it until the next ANALYZE.
// Made on a small table, the finish's generic plan read all of dispatch_job
// for every batch, so a new deployment slowed as its backlog grew: 1,390 such
// scans in one 50,000-job bench run.
func TestHotStatementsArePlannedForTheTableAsItGrows(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// EXECUTE takes no bind parameters, so each statement's arguments for
	// a list of job ids are written out as SQL.
	fill := func(n int, v string) string { return fmt.Sprintf("array_fill(%s, ARRAY[%d])", v, n) }
	statements := []struct {
		name, sql string
		args      func(ids string, n int) string
	}{
		{"claim", store.ClaimManySQL, func(ids string, n int) string {
			return strings.Join([]string{ids, fill(n, "now()"), fill(n, "now() + interval '1 minute'"),
				fill(n, "now() + interval '1 second'")}, ", ")
		}},
		{"finish", store.FinishManySQL, func(ids string, n int) string {
			return strings.Join([]string{ids, fill(n, "1"), ids, fill(n, "now()"), fill(n, "now()"),
				fill(n, "1::bigint"), fill(n, "'SUCCESS'::text"), fill(n, "200"), fill(n, "NULL::text"),
				fill(n, "NULL::text"), fill(n, "'COMPLETED'::text"), fill(n, "NULL::text"),
				fill(n, "NULL::timestamptz"), fill(n, "now()")}, ", ")
		}},
	}
	idArray := func(ids []int64) string {
		return "ARRAY" + strings.ReplaceAll(fmt.Sprint(ids), " ", ",") + "::bigint[]"
	}
	for _, s := range statements {
		if _, err := conn.Conn().Prepare(ctx, s.name, s.sql); err != nil {
			t.Fatal(err)
		}
		for i := range 10 { // jobs that are not there, in a table with a few
			ids := idArray([]int64{int64(i + 1), int64(i + 2)})
			if _, err := conn.Exec(ctx, "EXECUTE "+s.name+"("+s.args(ids, 2)+")"); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
	}
	var ids []int64
	for range 50 {
		batch := make([]*dispatch.Job, 100)
		for i := range batch {
			batch[i] = newJob()
		}
		out, _, err := st.CreateJobs(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range out {
			ids = append(ids, j.ID)
		}
	}
	for _, s := range statements {
		var plan []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+s.name+"("+s.args(idArray(ids[:5]), 5)+")").Scan(&plan); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := jobIndexes(t, plan); got != "dispatch_job_pkey" {
			t.Errorf("after the table grew, the %s reads dispatch_job through %q, want the primary key only:\n%s", s.name, got, plan)
		}
	}
}

// jobIndexes lists the indexes through which an EXPLAIN (FORMAT JSON) plan
// reads dispatch_job j; a sequential scan appears as "Seq Scan".
func jobIndexes(t *testing.T, plan []byte) string {
	t.Helper()
	var reads []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["Relation Name"] == "dispatch_job" && v["Alias"] == "j" {
				if name, ok := v["Index Name"].(string); ok {
					reads = append(reads, name)
				} else if node := fmt.Sprint(v["Node Type"]); strings.HasSuffix(node, "Scan") {
					reads = append(reads, node)
				}
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
	return strings.Join(reads, ",")
}
