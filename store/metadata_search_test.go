package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// A metadata search finds a job in every status: finished jobs through the
// metadata index (which holds only those), live ones through the status
// index, and a job moving from one to the other is found all along.
func TestMetadataSearchFindsJobsInEveryStatus(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	want := map[int64]dispatch.Status{}
	for _, status := range dispatch.Statuses {
		j := createJob(t, st, withMetadata("tenant", "acme"))
		createJob(t, st, withMetadata("tenant", "other"))
		if _, err := pool.Exec(ctx, `UPDATE dispatch_job SET status = $2 WHERE id = $1`, j.ID, string(status)); err != nil {
			t.Fatal(err)
		}
		want[j.ID] = status
	}
	search := func() map[int64]dispatch.Status {
		t.Helper()
		got, total, err := st.SearchJobs(ctx, dispatch.JobFilter{Metadata: map[string]string{"tenant": "acme"}}, 0, 50)
		if err != nil {
			t.Fatal(err)
		}
		if total != len(got) {
			t.Errorf("total %d for %d jobs found", total, len(got))
		}
		m := map[int64]dispatch.Status{}
		for _, j := range got {
			m[j.ID] = j.Status
		}
		return m
	}
	if got := search(); len(got) != len(want) {
		t.Fatalf("found %v, want one job in each status: %v", got, want)
	}
	// Filtered by status as well: each status alone finds its job.
	for id, status := range want {
		got, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Statuses: []dispatch.Status{status},
			Metadata: map[string]string{"tenant": "acme"}}, 0, 50)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != id {
			t.Errorf("status %s: found %v, want job %d", status, ids(got), id)
		}
	}
}

// The metadata search can go by index for finished and live jobs alike:
// with the partitions' sequential reads priced out (as they are on a
// partition of millions of jobs), its plan reads the metadata index for
// the finished arm and the status index for the live arm, on every
// partition. Every partition has a valid metadata index.
func TestMetadataSearchCanUseTheIndexes(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	jobs := createJobs(t, st, 50)
	ids := make([]int64, len(jobs))
	for k, j := range jobs {
		ids[k] = j.ID
	}
	if _, err := pool.Exec(ctx, `UPDATE dispatch_job SET status = CASE WHEN id % 5 = 0 THEN 'PENDING' ELSE 'COMPLETED' END,
		metadata = jsonb_build_object('tenant', CASE WHEN id % 10 = 0 THEN 'rare' ELSE 'common' END)
		WHERE id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	where, args := store.FilterWhere(dispatch.JobFilter{Metadata: map[string]string{"tenant": "rare"}})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	plan := planText(t, tx, `EXPLAIN SELECT id FROM dispatch_job`+where, args...)
	if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "_metadata_done") || !strings.Contains(plan, "BitmapOr") {
		t.Errorf("the metadata search cannot go by the metadata and status indexes:\n%s", plan)
	}

	rows, err := pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'dispatch_job'::regclass AND NOT EXISTS (
			SELECT 1 FROM pg_class x JOIN pg_index ix ON ix.indexrelid = x.oid
			WHERE x.relname = c.relname || '_metadata_done' AND ix.indisvalid)`)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("partitions without a valid metadata index: %v", missing)
	}
}

// Creation-time bounds far from now (before the ids' epoch, or past the
// last time an id can hold) are bounds like any other: they keep every job
// on their side, instead of wrapping around and matching nothing.
func TestSearchWithFarCreationTimes(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	j := createJob(t, st, func(j *dispatch.Job) { j.Source = "far-times" })
	for _, c := range []struct{ after, before string }{
		{"0100-01-01T00:00:00Z", "2099-01-01T00:00:00Z"},
		{"1990-01-01T00:00:00Z", "9999-12-31T23:59:59Z"},
	} {
		after, _ := time.Parse(time.RFC3339, c.after)
		before, _ := time.Parse(time.RFC3339, c.before)
		found, total, err := st.SearchJobs(t.Context(), dispatch.JobFilter{Source: "far-times", CreatedAfter: &after, CreatedBefore: &before}, 0, 20)
		if err != nil || total != 1 || len(found) != 1 || found[0].ID != j.ID {
			t.Errorf("created after %s and before %s: %d of %d jobs (%v), want the job", c.after, c.before, len(found), total, err)
		}
	}
}
