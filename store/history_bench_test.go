package store_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// BenchmarkHistoryReads times the console's reads over a month of history:
// DISPATCH_BENCH_HISTORY_JOBS finished jobs (default 200,000; the budget
// is stated for 5,000,000) spread over 30 days in daily partitions, each
// with its attempt and payload, 5 % of them ERROR, 20 sources, 50 types,
// 1,000 tenants, and one event per 10 jobs. Each read runs 15 times; the
// metrics are their p95 in milliseconds.
//
// With DISPATCH_BENCH_HISTORY_KEEP=<name>, the seeded history is also
// copied to a new database of that name on the same server, which outlives
// the benchmark: `dispatch-bench -database` runs the whole pipeline on a
// copy of it (docs/benchmarks.md).
func BenchmarkHistoryReads(b *testing.B) {
	n := benchSize("DISPATCH_BENCH_HISTORY_JOBS", 200_000)
	dbURL, start := seedHistory(b, n, os.Getenv("DISPATCH_BENCH_HISTORY_KEEP"))
	st, pool := storetest.Open(b, dbURL, store.Options{NodeID: 1})
	ctx := context.Background()
	var mid int64
	if err := pool.QueryRow(ctx, `SELECT id FROM dispatch_job WHERE created_at < $1 ORDER BY id DESC LIMIT 1`,
		start.Add(15*24*time.Hour)).Scan(&mid); err != nil {
		b.Fatal(err)
	}
	twoDays := time.Now().Add(-48 * time.Hour)
	reads := []struct {
		name string
		read func() error
	}{
		{"search-all", func() error {
			_, _, err := st.SearchJobs(ctx, dispatch.JobFilter{}, 0, 20)
			return err
		}},
		{"search-error", func() error {
			_, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Statuses: []dispatch.Status{dispatch.StatusError}}, 0, 20)
			return err
		}},
		{"search-tenant", func() error {
			_, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Metadata: map[string]string{"tenantId": "tenant-7"}}, 0, 20)
			return err
		}},
		{"search-source-2d", func() error {
			_, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Source: "source-3", CreatedAfter: &twoDays}, 0, 20)
			return err
		}},
		{"search-deep", func() error {
			_, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Before: mid}, 0, 20)
			return err
		}},
		{"job-and-attempts", func() error {
			if _, err := st.GetJob(ctx, mid); err != nil {
				return err
			}
			_, err := st.ListAttempts(ctx, mid)
			return err
		}},
		{"events", func() error {
			_, _, err := st.SearchEvents(ctx, dispatch.EventFilter{}, 0, 20)
			return err
		}},
		{"stats-1h", func() error {
			_, err := st.Stats(ctx, time.Now(), time.Hour, time.Minute)
			return err
		}},
	}
	// Deliveries on this history against an empty database, alternating.
	empty, _, _ := storetest.New(b, store.Options{NodeID: 2})
	var withHistory, without float64
	for range 3 {
		withHistory += deliveriesPerSecond(b, st, 2000)
		without += deliveriesPerSecond(b, empty, 2000)
	}
	b.ResetTimer() // (it drops metrics reported before it)
	for b.Loop() {
		b.ReportMetric(withHistory/without, "x-throughput-vs-empty")
		for _, r := range reads {
			var took []time.Duration
			for range 15 {
				t0 := time.Now()
				if err := r.read(); err != nil {
					b.Fatalf("%s: %v", r.name, err)
				}
				took = append(took, time.Since(t0))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[13].Microseconds())/1000, "ms-p95-"+r.name)
		}
	}
}

// seedHistory makes a fresh database holding n finished jobs over the last
// 30 days, as BenchmarkHistoryReads describes, vacuumed and analyzed, and
// returns its URL (with no connection left open to it) and the start of
// the history. With keep, it also copies that database to a new one named
// keep, which nothing drops.
func seedHistory(b *testing.B, n int, keep string) (string, time.Time) {
	b.Helper()
	st, pool, dbURL := storetest.New(b, store.Options{NodeID: 1})
	ctx := context.Background()
	if keep != "" { // before minutes of seeding, not after
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, keep).Scan(&exists); err != nil {
			b.Fatal(err)
		}
		if exists {
			b.Fatalf("DISPATCH_BENCH_HISTORY_KEEP: database %s exists; drop it or name another", keep)
		}
	}
	start := time.Now().Add(-30 * 24 * time.Hour).Truncate(24 * time.Hour)
	if err := store.StartHistoryAt(ctx, st, start.Add(-24*time.Hour), 24*time.Hour); err != nil {
		b.Fatal(err)
	}
	seedStart := time.Now()
	span := time.Since(start) - time.Hour
	const chunk = 250_000
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		for _, q := range []string{
			`INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, protocol, headers,
				payload_content_type, status, max_retries, retry_strategy, attempt_count, last_attempt_at,
				completed_at, duration_millis, metadata, next_attempt_at, event_id)
			SELECT id, ts, ts, 'source-' || (g % 20), 'type-' || (g % 50), 'https://example.com/hook', 'HTTP_WEBHOOK',
				'{}', 'application/json', CASE WHEN g % 20 = 7 THEN 'ERROR' ELSE 'COMPLETED' END, 5, 'exponential', 1,
				ts, ts, 12, jsonb_build_object('tenantId', 'tenant-' || (g % 1000)), ts,
				CASE WHEN g % 10 = 0 THEN id - 1 END
			FROM (SELECT g, ts, (((extract(epoch FROM ts) * 1000)::bigint - 1288834974657) << 22) + (g % 4096) AS id
				FROM (SELECT g, $3::timestamptz + (g::double precision / $4) * $5::interval AS ts
					FROM generate_series($1::bigint, $2::bigint - 1) g) t) s`,
			`INSERT INTO dispatch_payload (job_id, body)
			SELECT id, '\x00'::bytea || convert_to('{"order":{"id":"' || id || '","total":12.5}}', 'UTF8')
			FROM dispatch_job WHERE id >= $1 AND id < $2 ON CONFLICT DO NOTHING`,
			`INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at, duration_millis, status, response_code)
			SELECT id + 1, id, 1, created_at, created_at, 12, CASE status WHEN 'ERROR' THEN 'FAILURE' ELSE 'SUCCESS' END,
				CASE status WHEN 'ERROR' THEN 500 ELSE 200 END
			FROM dispatch_job WHERE id >= $1 AND id < $2 ON CONFLICT DO NOTHING`,
			`INSERT INTO dispatch_event (id, source, type, data, metadata, created_at)
			SELECT event_id, source, type, '{}', metadata, created_at FROM dispatch_job
			WHERE event_id IS NOT NULL AND id >= $1 AND id < $2 ON CONFLICT DO NOTHING`,
		} {
			t0 := start.Add(time.Duration(float64(span) * float64(from) / float64(n)))
			t1 := start.Add(time.Duration(float64(span) * float64(to) / float64(n)))
			args := []any{store.IDAt(t0.Add(-time.Second)), store.IDAt(t1.Add(time.Second))}
			if strings.Contains(q, "generate_series") {
				args = []any{from, to, start, float64(n), fmt.Sprintf("%d microseconds", span.Microseconds())}
			}
			// A seed statement runs longer than the service's statement timeout.
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, q, args...)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	// As autovacuum leaves a month of finished partitions: analyzed, and
	// all-visible (index-only scans).
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{`SET statement_timeout = 0`, `VACUUM ANALYZE`, `RESET statement_timeout`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	conn.Release()
	b.Logf("seeded %d jobs over 30 days in %s", n, time.Since(seedStart).Round(time.Second))
	pool.Close() // PostgreSQL copies only a database nobody is connected to
	if keep != "" {
		t0 := time.Now()
		storetest.CopyDatabase(b, dbURL, keep)
		b.Logf("kept the seeded history as database %s (copied in %s)", keep, time.Since(t0).Round(time.Second))
	}
	return dbURL, start
}

// benchSize is the whole number in the environment variable name, or def.
func benchSize(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// deliveriesPerSecond runs n deliveries (create, claim, complete) from
// eight goroutines and returns how many it did a second.
func deliveriesPerSecond(b *testing.B, st *store.Store, n int) float64 {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				j, _, err := st.CreateJob(ctx, newJob(func(j *dispatch.Job) { j.Metadata = map[string]string{"tenantId": "tenant-1"} }))
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				c, err := st.ClaimJob(ctx, j.ID, now, lease)
				if err != nil || c.State != dispatch.Claimed {
					b.Errorf("claim: %v %v", c.State, err)
					return
				}
				if _, err := st.FinishAttempt(ctx, dispatch.Attempt{JobID: j.ID, AttemptNumber: 1, AttemptedAt: now,
					CompletedAt: time.Now(), Status: dispatch.AttemptSuccess, ResponseCode: 200},
					dispatch.Transition{Status: dispatch.StatusCompleted}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(t0).Seconds()
}
