package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// BenchmarkUpgradeToPartitions upgrades an installation made before time
// partitions, holding DISPATCH_BENCH_UPGRADE_JOBS jobs (default 100,000;
// the budget is stated for 1,000,000) with their attempts, while a client
// keeps creating jobs the way the previous version did. It reports each
// migration step's time and the longest a create waited meanwhile: the
// time creates are held up by the upgrade.
func BenchmarkUpgradeToPartitions(b *testing.B) {
	n := benchSize("DISPATCH_BENCH_UPGRADE_JOBS", 100_000)
	for b.Loop() {
		ctx := context.Background()
		url := storetest.NewEmptyDatabase(b)
		if err := store.MigrateTo(ctx, url, 9); err != nil {
			b.Fatal(err)
		}
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now().Add(-30 * 24 * time.Hour)
		if _, err := pool.Exec(ctx, `
			INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, payload, payload_content_type,
				status, max_retries, retry_strategy, attempt_count, completed_at, next_attempt_at, metadata, idempotency_key)
			SELECT (((extract(epoch FROM ts) * 1000)::bigint - 1288834974657) << 22) + (g % 4096), ts, ts,
				'source-' || (g % 20), 'type-' || (g % 50), 'https://example.com/hook', '{"order":' || g || '}', 'application/json',
				CASE WHEN g % 1000 = 0 THEN 'PENDING' ELSE 'COMPLETED' END, 5, 'exponential',
				CASE WHEN g % 1000 = 0 THEN 0 ELSE 1 END, CASE WHEN g % 1000 = 0 THEN NULL ELSE ts END, ts,
				jsonb_build_object('tenantId', 'tenant-' || (g % 1000)), CASE WHEN g % 4 = 0 THEN 'key-' || g END
			FROM (SELECT g, $1::timestamptz + g * interval '2 seconds' AS ts FROM generate_series(0, $2::int - 1) g) s`,
			start, n); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at, duration_millis, status, response_code)
			SELECT id + 1, id, 1, created_at, created_at, 12, 'SUCCESS', 200 FROM dispatch_job WHERE status = 'COMPLETED'`); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
			b.Fatal(err)
		}
		// The previous version's creates, one at a time, during the upgrade.
		var (
			stop    atomic.Bool
			wg      sync.WaitGroup
			longest time.Duration
			creates int
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				t0 := time.Now()
				_, err := pool.Exec(ctx, `
					INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, payload, payload_content_type,
						status, max_retries, retry_strategy, next_attempt_at)
					VALUES ((((extract(epoch FROM now()) * 1000)::bigint - 1288834974657) << 22) + 4096 + $1, now(), now(),
						's', 't', 'https://example.com/hook', '{}', 'application/json', 'PENDING', 5, 'exponential', now())`, i%4096)
				if err != nil {
					// a refused create (the table is being swapped): retried
					time.Sleep(10 * time.Millisecond)
				}
				longest = max(longest, time.Since(t0))
				creates++
			}
		}()
		var steps [4]time.Duration
		for v := range int32(4) {
			t0 := time.Now()
			if err := store.MigrateTo(ctx, url, 10+v); err != nil {
				b.Fatal(err)
			}
			steps[v] = time.Since(t0)
		}
		stop.Store(true)
		wg.Wait()
		pool.Close()
		b.ReportMetric(steps[0].Seconds(), "s-prepare")
		b.ReportMetric(steps[1].Seconds(), "s-validate")
		b.ReportMetric(steps[2].Seconds(), "s-swap")
		b.ReportMetric(steps[3].Seconds(), "s-payloads")
		b.ReportMetric(longest.Seconds(), "s-longest-create")
		b.Logf("%d jobs: %d creates during the upgrade, the longest took %s", n, creates, longest.Round(time.Millisecond))
	}
}
