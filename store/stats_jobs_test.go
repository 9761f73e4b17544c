package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/store"
)

// The Overview's jobs that ended undelivered in the window are the ERROR
// and EXPIRED ones that finished in it (not before it, not cancelled), read
// through idx_dispatch_failed_done: behind a long history of delivered
// jobs, the statement scans no partition of dispatch_job.
func TestStatsCountFailedJobsThroughTheirIndex(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	for range 40 {
		createJobs(t, st, 100)
	}
	// Of 4,000 jobs: 3 ERROR and 1 EXPIRED in the last hour, 1 ERROR two
	// hours ago, 1 CANCELLED; the rest delivered.
	if _, err := pool.Exec(ctx, `UPDATE dispatch_job j SET queued_at = now(), status = CASE
			WHEN n <= 3 THEN 'ERROR' WHEN n = 4 THEN 'EXPIRED' WHEN n = 5 THEN 'ERROR' WHEN n = 6 THEN 'CANCELLED' ELSE 'COMPLETED' END,
		completed_at = CASE WHEN n = 5 THEN now() - interval '2 hours' ELSE now() - interval '1 minute' END
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM dispatch_job) r WHERE j.id = r.id`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	s, err := st.Stats(ctx, time.Now(), time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s.JobsFailed != 4 {
		t.Errorf("%d jobs ended undelivered in the last hour, want 4 (3 ERROR, 1 EXPIRED)", s.JobsFailed)
	}

	e := explain(t, pool, false, store.FailedJobsQuery, time.Now().Add(-time.Hour), time.Now())
	plan := e.plan
	var wrong []string
	for _, v := range e.nodes {
		idx, _ := v["Index Name"].(string)
		switch {
		case !e.onFilled(v):
		case v["Node Type"] == "Seq Scan" || v["Node Type"] == "Bitmap Heap Scan":
			wrong = append(wrong, fmt.Sprint(v["Node Type"], " on ", v["Relation Name"]))
		case idx != "" && !strings.Contains(idx, "failed_done") && !strings.Contains(idx, "_completed_at_idx"):
			wrong = append(wrong, fmt.Sprint(v["Node Type"], " on ", v["Relation Name"], " using ", idx))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("the failed jobs' count reads dispatch_job otherwise than through idx_dispatch_failed_done: %v\n%s", wrong, plan)
	}
}
