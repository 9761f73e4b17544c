package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
// the budget is stated for 1,000,000; seedBeforePartitions) with their
// attempts, while a client keeps creating jobs the way the previous
// version did. It reports each migration step's time, from 010 to 013 one at a time and then the rest
// to the latest version in one step (s-to-latest), then the first upkeep
// pass of the new version (s-first-upkeep: the partitions ahead, and the
// indexes of finished jobs built on the legacy partition with CREATE INDEX
// CONCURRENTLY), and the longest a create took meanwhile: over the
// migrations, during 014 to the latest, and during that pass. That is the
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
		seedBeforePartitions(b, pool, time.Now().Add(-30*24*time.Hour), n)
		// The previous version's creates, one at a time, during the upgrade.
		// longest[k] is the longest create that began during step k: 0-3
		// migrations 010-013, 4 the rest, 5 the first upkeep pass.
		const steps, toLatest, upkeep = 6, 4, 5
		var (
			stop    atomic.Bool
			step    atomic.Int32
			wg      sync.WaitGroup
			longest [steps]time.Duration
			creates int
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := step.Load()
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
				longest[k] = max(longest[k], time.Since(t0))
				creates++
			}
		}()
		// 010 to 013, then the rest (014 to the latest: columns, tables,
		// the indexes of finished jobs) as the last step, each migration
		// timed on its own.
		var (
			took    [steps]time.Duration
			slowest int32
			each    = map[int32]time.Duration{}
		)
		for v := int32(10); v <= store.MigrationsVersion(); v++ {
			k := min(v-10, toLatest)
			step.Store(k)
			t0 := time.Now()
			if err := store.MigrateTo(ctx, url, v); err != nil {
				b.Fatal(err)
			}
			each[v] = time.Since(t0)
			took[k] += each[v]
			if k == toLatest && each[v] > each[slowest] {
				slowest = v
			}
		}
		// The new version starts: its first upkeep pass.
		step.Store(upkeep)
		spool, err := store.Connect(ctx, url, 0)
		if err != nil {
			b.Fatal(err)
		}
		sealer, _ := store.NewSealer(make([]byte, 32), nil)
		st, err := store.New(spool, store.Options{Sealer: sealer})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := st.MaintainHistory(ctx, time.Now(), store.History{Interval: store.DefaultPartitionInterval}); err != nil {
			b.Fatal(err)
		}
		took[upkeep] = time.Since(t0)
		stop.Store(true)
		wg.Wait()
		spool.Close()
		pool.Close()
		b.ReportMetric(took[0].Seconds(), "s-prepare")
		b.ReportMetric(took[1].Seconds(), "s-validate")
		b.ReportMetric(took[2].Seconds(), "s-swap")
		b.ReportMetric(took[3].Seconds(), "s-payloads")
		b.ReportMetric(took[toLatest].Seconds(), "s-to-latest")
		b.ReportMetric(took[upkeep].Seconds(), "s-first-upkeep")
		b.ReportMetric(slices.Max(longest[:upkeep]).Seconds(), "s-longest-create")
		b.ReportMetric(longest[toLatest].Seconds(), "s-longest-create-to-latest")
		b.ReportMetric(longest[upkeep].Seconds(), "s-longest-create-upkeep")
		b.Logf("%d jobs: %d creates during the upgrade, the longest took %s (%s during 014-%03d, which took %s; the slowest of them, %03d, %s); "+
			"the first upkeep pass took %s, the longest create meanwhile %s",
			n, creates, slices.Max(longest[:upkeep]).Round(time.Millisecond), longest[toLatest].Round(time.Millisecond),
			store.MigrationsVersion(), took[toLatest].Round(time.Millisecond), slowest, each[slowest].Round(time.Millisecond),
			took[upkeep].Round(time.Millisecond), longest[upkeep].Round(time.Millisecond))
		var line []string
		for v := int32(14); v <= store.MigrationsVersion(); v++ {
			line = append(line, fmt.Sprintf("%03d %s", v, each[v].Round(time.Millisecond)))
		}
		b.Logf("014-%03d one by one: %s", store.MigrationsVersion(), strings.Join(line, ", "))
	}
}

// seedBeforePartitions fills a database at schema version 9 with n jobs as
// the version before partitions wrote them, two seconds apart from start
// on: 5 % ERROR, one in a thousand PENDING, the rest delivered, a quarter
// with an idempotency key, each finished one with its attempt. Then
// VACUUM ANALYZE, as autovacuum would have by then.
func seedBeforePartitions(tb testing.TB, pool *pgxpool.Pool, start time.Time, n int) {
	tb.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, payload, payload_content_type,
			status, max_retries, retry_strategy, attempt_count, completed_at, next_attempt_at, metadata, idempotency_key)
		SELECT (((extract(epoch FROM ts) * 1000)::bigint - 1288834974657) << 22) + (g % 4096), ts, ts,
			'source-' || (g % 20), 'type-' || (g % 50), 'https://example.com/hook', '{"order":' || g || '}', 'application/json',
			CASE WHEN g % 1000 = 0 THEN 'PENDING' WHEN g % 20 = 7 THEN 'ERROR' ELSE 'COMPLETED' END, 5, 'exponential',
			CASE WHEN g % 1000 = 0 THEN 0 ELSE 1 END, CASE WHEN g % 1000 = 0 THEN NULL ELSE ts END, ts,
			jsonb_build_object('tenantId', 'tenant-' || (g % 1000)), CASE WHEN g % 4 = 0 THEN 'key-' || g END
		FROM (SELECT g, $1::timestamptz + g * interval '2 seconds' AS ts FROM generate_series(0, $2::int - 1) g) s`,
		start, n); err != nil {
		tb.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at, duration_millis, status, response_code)
		SELECT id + 1, id, 1, created_at, created_at, 12, CASE status WHEN 'ERROR' THEN 'FAILURE' ELSE 'SUCCESS' END,
			CASE status WHEN 'ERROR' THEN 500 ELSE 200 END
		FROM dispatch_job WHERE status IN ('COMPLETED', 'ERROR')`); err != nil {
		tb.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		tb.Fatal(err)
	}
}
