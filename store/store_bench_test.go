package store_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
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

// BenchmarkCreateJobParallel is single creates arriving together, as from
// many API clients: group commit writes them with shared statements.
func BenchmarkCreateJobParallel(b *testing.B) {
	st, _, _ := storetest.New(b, store.Options{NodeID: 1})
	b.ReportAllocs()
	b.SetParallelism(8) // 8×GOMAXPROCS concurrent creates
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, created, err := st.CreateJob(b.Context(), newJob()); err != nil || !created {
				b.Errorf("CreateJob: created %v, err %v", created, err)
				return
			}
		}
	})
}

// BenchmarkCreateJobs100 is the batch endpoint's store call: 100 jobs, one
// statement. ns/op is per batch.
func BenchmarkCreateJobs100(b *testing.B) {
	st, _, _ := storetest.New(b, store.Options{NodeID: 1})
	jobs := make([]*dispatch.Job, 100)
	for i := range jobs {
		jobs[i] = newJob()
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := st.CreateJobs(b.Context(), jobs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimAndFinishParallel is the processing endpoint's two writes
// for deliveries running side by side (claim, then attempt + state), on
// jobs created beforehand: ns/op is per delivery.
func BenchmarkClaimAndFinishParallel(b *testing.B) {
	st, _, _ := storetest.New(b, store.Options{NodeID: 1})
	ctx := b.Context()
	n := b.N // RunParallel runs exactly b.N iterations in all
	ids := make(chan int64, n+100)
	for i := 0; i < n; i += 100 {
		for _, j := range createJobs(b, st, 100) {
			ids <- j.ID
		}
	}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var id int64
			select {
			case id = <-ids:
			default:
				b.Error("more iterations than prepared jobs")
				return
			}
			t0 := time.Now()
			c, err := st.ClaimJob(ctx, id, t0, lease)
			if err != nil || c.State != dispatch.Claimed {
				b.Errorf("ClaimJob: state %v, err %v", c.State, err)
				return
			}
			if _, err := st.FinishAttempt(ctx, dispatch.Attempt{
				JobID: id, AttemptNumber: c.Job.AttemptCount, AttemptedAt: t0, CompletedAt: time.Now(),
				Status: dispatch.AttemptSuccess, ResponseCode: 200,
			}, dispatch.Transition{Status: dispatch.StatusCompleted}); err != nil {
				b.Errorf("FinishAttempt: %v", err)
				return
			}
		}
	})
}

// BenchmarkPublishDue is the outbox query for a batch of 100 unsent jobs
// (mark queued, hand to send); ns/op is per batch.
func BenchmarkPublishDue(b *testing.B) {
	st, _, _ := storetest.New(b, store.Options{NodeID: 1})
	ctx := b.Context()
	batch := make([]*dispatch.Job, 100)
	for k := range batch {
		batch[k] = newJob()
	}
	send := func(us []dispatch.Unsent) ([]int64, error) {
		ids := make([]int64, len(us))
		for i, u := range us {
			ids[i] = u.ID
		}
		return ids, nil
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, _, err := st.CreateJobs(ctx, batch); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		n, err := st.PublishDue(ctx, time.Now(), 100, send)
		if err != nil || n != 100 {
			b.Fatalf("PublishDue: %d, %v", n, err)
		}
	}
}

// BenchmarkBytesPerDelivery is what one delivery leaves in PostgreSQL:
// a job with a 1 KiB payload created (marked queued, as a hand-off does)
// and completed with its attempt. claim=deferred is the first attempt in
// the process that created the job (its claim written with the outcome);
// claim=written writes the claim first, as for any other pointer. It
// reports the growth of every dispatch table with its indexes and TOAST
// (table-B/delivery) and the WAL written (wal-B/delivery; the server's, so
// run it alone). Whether autovacuum runs changes the first: `make bench`
// prints the setting.
func BenchmarkBytesPerDelivery(b *testing.B) {
	for _, deferred := range []bool{true, false} {
		name := "claim=written"
		if deferred {
			name = "claim=deferred"
		}
		b.Run(name, func(b *testing.B) { bytesPerDelivery(b, deferred) })
	}
}

func bytesPerDelivery(b *testing.B, deferred bool) {
	st, pool, _ := storetest.New(b, store.Options{NodeID: 1})
	st.HandOffTo(stuckHandoff{})
	ctx := b.Context()
	payload := orderPayload(1024)
	size := func() (tables, wal int64) {
		b.Helper()
		if err := pool.QueryRow(ctx, `
			SELECT (SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
				WHERE c.relkind = 'r' AND c.relname LIKE 'dispatch\_%'),
				pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&tables, &wal); err != nil {
			b.Fatal(err)
		}
		return tables, wal
	}
	deliver := func() {
		j, _, err := st.CreateJob(ctx, newJob(func(j *dispatch.Job) {
			j.Payload, j.Metadata = payload, map[string]string{"tenantId": "acme"}
		}))
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		// The pointer as the store handed it over (in process): claimed in memory.
		c, err := st.ClaimJob(handoff.WithHandle(ctx, handoff.Handle{ID: j.ID, Mark: *j.QueuedAt}), j.ID, t0, lease)
		if err != nil || c.State != dispatch.Claimed || !c.Deferred {
			b.Fatalf("ClaimJob: state %v, deferred %v, err %v", c.State, c.Deferred, err)
		}
		if !deferred {
			if held, err := st.RecordClaim(ctx, c.Job); err != nil || !held {
				b.Fatalf("RecordClaim: held %v, err %v", held, err)
			}
		}
		applied, err := st.FinishAttempt(ctx, dispatch.Attempt{
			JobID: j.ID, AttemptNumber: c.Job.AttemptCount, AttemptedAt: t0, CompletedAt: time.Now(),
			Status: dispatch.AttemptSuccess, ResponseCode: 200, ResponseBody: "ok",
			RequestHeaders: requestHeaders(j.ID), ResponseHeaders: responseHeaders,
		}, dispatch.Transition{Status: dispatch.StatusCompleted, ClaimDeferred: deferred})
		if err != nil || !applied {
			b.Fatalf("FinishAttempt: applied %v, err %v", applied, err)
		}
	}
	for range 200 { // past the first pages of every table and index
		deliver()
	}
	t0, w0 := size()
	n := 0
	for b.Loop() {
		deliver()
		n++
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil { // sizes as files hold them
		b.Fatal(err)
	}
	t1, w1 := size()
	if testing.Verbose() {
		rows, err := pool.Query(ctx, `SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
			WHERE c.relname LIKE 'dispatch\_%' OR c.relname LIKE 'idx\_%' OR c.relname LIKE 'pg_toast%'
			ORDER BY 2 DESC LIMIT 25`)
		if err == nil {
			for rows.Next() {
				var name string
				var sz int64
				_ = rows.Scan(&name, &sz)
				b.Logf("%-60s %10d (%d B/delivery)", name, sz, sz/int64(n+200))
			}
			rows.Close()
		}
	}
	b.ReportMetric(float64(t1-t0)/float64(n), "table-B/delivery")
	b.ReportMetric(float64(w1-w0)/float64(n), "wal-B/delivery")
}

// orderPayload is a webhook payload of about n bytes that compresses as
// real ones do: an order with line items, its field names repeating and
// its values (ids, skus, names, amounts) random.
func orderPayload(n int) string {
	rng := rand.New(rand.NewPCG(7, 11))
	word := func(k int) string {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, k)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `{"id":"evt_%s","type":"order.created","created":"2026-11-25T09:%02d:%02d.%03dZ","data":{"order":{"id":"ord_%s","customer":{"id":"cus_%s","email":"%s@%s.example","name":"%s %s"},"items":[`,
		word(24), rng.IntN(60), rng.IntN(60), rng.IntN(1000), word(20), word(14), word(10), word(8), word(7), word(9))
	for i := 0; sb.Len() < n-40; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"sku":"%s","quantity":%d,"unitPrice":%d.%02d}`, word(12), 1+rng.IntN(9), rng.IntN(500), rng.IntN(100))
	}
	fmt.Fprintf(&sb, `],"total":%d.%02d}}}`, rng.IntN(5000), rng.IntN(100))
	return sb.String()
}

// requestHeaders and responseHeaders are what a delivery's attempt keeps
// of a typical request (secrets redacted, as the sender stores them) and
// of a small receiver's answer.
func requestHeaders(jobID int64) map[string]string {
	return map[string]string{
		"Host": "hooks.example.com", "User-Agent": "dispatch/1.4.0", "Content-Type": "application/json",
		"Content-Length": "1024", "Authorization": "[redacted]", "X-Flowcatalyst-Signature": "[redacted]",
		"X-Flowcatalyst-Timestamp": "2026-11-25T10:04:28.165Z", "X-Dispatch-Job-Id": dispatch.FormatID(jobID),
		"X-Dispatch-Attempt": "1",
	}
}

var responseHeaders = map[string]string{
	"Content-Type": "application/json", "Date": "Wed, 25 Nov 2026 10:04:28 GMT", "Content-Length": "2",
}
