package store_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// partitions lists dispatch_job's partitions as the upkeep keeps them.
func partitions(t *testing.T, pool *pgxpool.Pool, parent string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT name FROM dispatch_partition WHERE parent = $1 ORDER BY hi`, parent)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func partitionOf(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var name string
	if err := pool.QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM dispatch_job WHERE id = $1`, id).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// Past retention, a partition of finished jobs goes whole, with its jobs'
// attempts, their idempotency keys and the events older than every kept
// job; a partition still holding a live job stays until it has finished.
func TestRetentionDropsFinishedPartitionsAndHoldsLiveOnes(t *testing.T) {
	t.Parallel()
	const interval = time.Minute
	base, pool, dbURL := storetest.New(t, store.Options{PartitionInterval: interval})
	ctx := t.Context()
	t0 := time.Now()
	hist := store.History{Interval: interval, Retention: 5 * time.Minute}
	if _, err := base.MaintainHistory(ctx, t0, store.History{Interval: interval}); err != nil {
		t.Fatal(err)
	}
	// Two replicas whose ids fall two and four minutes ahead: their jobs
	// land in later partitions, as jobs made then would.
	at2 := secondStore(t, dbURL, store.Options{NewID: skewedIDs(1, 2*time.Minute)})
	at4 := secondStore(t, dbURL, store.Options{NewID: skewedIDs(2, 4*time.Minute)})

	done := createJob(t, at2, func(j *dispatch.Job) { j.IdempotencyKey = "k-done" })
	failed := createJob(t, at2)
	live := createJob(t, at4, func(j *dispatch.Job) { j.IdempotencyKey = "k-live" })
	finished4 := createJob(t, at4)
	if partitionOf(t, pool, done.ID) == partitionOf(t, pool, live.ID) {
		t.Fatal("the two replicas' jobs share a partition: the test's clocks are not apart")
	}
	tc := now()
	completeJob(t, base, done.ID, tc)
	errorJob(t, base, failed.ID, tc)
	completeJob(t, base, finished4.ID, tc)
	ev, _, err := base.PublishEvent(ctx, &dispatch.Event{Source: "s", Type: "t", Data: `{}`, IdempotencyKey: "e-1"}, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}

	// Twenty minutes on, with five minutes' retention.
	rep, err := base.MaintainHistory(ctx, t0.Add(20*time.Minute), hist)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Dropped == 0 || len(rep.Held) != 1 || rep.Held[0] != partitionOf(t, pool, live.ID) {
		t.Fatalf("upkeep dropped %d and held %v, want drops and only %s held", rep.Dropped, rep.Held, partitionOf(t, pool, live.ID))
	}
	for _, id := range []int64{done.ID, failed.ID} {
		if _, err := base.GetJob(ctx, id); dispatch.ErrorCode(err) != dispatch.ENotFound {
			t.Errorf("job %d past retention: %v, want not found", id, err)
		}
	}
	if n := countRows(t, pool, "dispatch_attempt"); n != 1 {
		t.Errorf("%d attempts kept, want 1 (the finished job beside the live one)", n)
	}
	if got := getJob(t, base, live.ID); got.Status != dispatch.StatusPending {
		t.Errorf("the live job is %s, want it kept PENDING", got.Status)
	}
	if _, err := base.GetEvent(ctx, ev.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Errorf("event past retention: %v, want not found", err)
	}
	// A removed job's key is forgotten with it; a kept job's key holds.
	// (Creates from a replica whose clock is at the simulated time.)
	later := secondStore(t, dbURL, store.Options{NewID: skewedIDs(3, 20*time.Minute)})
	again, created, err := later.CreateJob(ctx, newJob(func(j *dispatch.Job) { j.IdempotencyKey = "k-done" }))
	if err != nil || !created || again.ID == done.ID {
		t.Errorf("create with a removed job's key: created %v, id %d, err %v; want a new job", created, again.ID, err)
	}
	same, created, err := later.CreateJob(ctx, newJob(func(j *dispatch.Job) { j.IdempotencyKey = "k-live" }))
	if err != nil || created || same.ID != live.ID {
		t.Errorf("create with a kept job's key: created %v, id %d, err %v; want job %d", created, same.ID, err, live.ID)
	}
	if _, created, err := later.PublishEvent(ctx, &dispatch.Event{Source: "s", Type: "t", Data: `{}`, IdempotencyKey: "e-1"}, map[string]any{}); err != nil || !created {
		t.Errorf("publish with a removed event's key: created %v, %v; want a new event", created, err)
	}

	// Once the live job has finished, its partition goes too.
	completeJob(t, base, live.ID, now())
	rep, err = base.MaintainHistory(ctx, t0.Add(21*time.Minute), hist)
	if err != nil || len(rep.Held) != 0 {
		t.Fatalf("second upkeep: held %v, %v", rep.Held, err)
	}
	if _, err := base.GetJob(ctx, live.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Errorf("the finished job's partition is kept: %v", err)
	}
	if slices.Contains(partitions(t, pool, "dispatch_job"), "dispatch_job_legacy") {
		t.Error("the legacy partition is kept although it is past retention and empty")
	}
}

// Partitions are created ahead, at the configured width, by one replica at
// a time; a store whose upkeep has not run yet makes room at its first
// create rather than fail.
func TestPartitionsAreCreatedAheadByOneReplica(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	st := secondStore(t, dbURL, store.Options{PartitionInterval: time.Minute})
	createJob(t, st) // no upkeep ran: the create makes its own room
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	other := secondStore(t, dbURL, store.Options{})
	var (
		wg      sync.WaitGroup
		skipped int
		mu      sync.Mutex
	)
	t0 := time.Now()
	for _, s := range []*store.Store{st, other, st, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := s.MaintainHistory(context.Background(), t0, store.History{Interval: time.Minute})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if rep.Skipped {
				skipped++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	var aheadTo time.Time
	if err := pool.QueryRow(t.Context(), `SELECT max(to_time) FROM dispatch_partition WHERE parent = 'dispatch_job'`).Scan(&aheadTo); err != nil {
		t.Fatal(err)
	}
	if aheadTo.Before(t0.Add(10 * time.Minute)) {
		t.Errorf("partitions reach %s, want at least ten minutes past %s", aheadTo, t0)
	}
	for _, parent := range []string{"dispatch_job", "dispatch_attempt", "dispatch_event"} {
		if n := len(partitions(t, pool, parent)); n < 10 {
			t.Errorf("%s has %d partitions, want one a minute ahead", parent, n)
		}
	}
	_ = skipped // a pass may skip (another held the lock) or find nothing to do: either way no partition twice
}

// Two replicas creating a job with the same idempotency key at the same
// instant make one job: both answer with it.
func TestTwoReplicasCreatingTheSameKeyMakeOneJob(t *testing.T) {
	t.Parallel()
	a, pool, dbURL := storetest.New(t, store.Options{NodeID: 1})
	b := secondStore(t, dbURL, store.Options{NodeID: 2})
	for i := range 20 {
		key := "same-" + string(rune('a'+i))
		start := make(chan struct{})
		type res struct {
			j       dispatch.Job
			created bool
			err     error
		}
		out := make(chan res, 2)
		for _, s := range []*store.Store{a, b} {
			go func() {
				<-start
				j, created, err := s.CreateJob(context.Background(), newJob(func(j *dispatch.Job) { j.IdempotencyKey = key }))
				out <- res{j, created, err}
			}()
		}
		close(start)
		r1, r2 := <-out, <-out
		if r1.err != nil || r2.err != nil {
			t.Fatalf("creates: %v, %v", r1.err, r2.err)
		}
		if r1.created == r2.created || r1.j.ID != r2.j.ID {
			t.Fatalf("key %s: created %v and %v, ids %d and %d; want one job, made once", key, r1.created, r2.created, r1.j.ID, r2.j.ID)
		}
	}
	if n := countRows(t, pool, "dispatch_job"); n != 20 {
		t.Errorf("%d jobs for 20 keys", n)
	}
}

// beforePartitions is a new database at schema version 9, the last before
// partitions, and a pool on it.
func beforePartitions(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url := storetest.NewEmptyDatabase(t)
	if err := store.MigrateTo(t.Context(), url, 9); err != nil {
		t.Fatal(err)
	}
	pool, err := store.Connect(t.Context(), url, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}

// An installation made before partitions upgrades by migrating: every job,
// attempt, event and key stays readable and in force, and live jobs go on.
func TestUpgradeToPartitionsKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, pool := beforePartitions(t)
	// Rows as the previous version wrote them.
	old := time.Now().Add(-48 * time.Hour)
	oldID := store.IDAt(old)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, payload, payload_content_type,
			status, max_retries, retry_strategy, next_attempt_at, idempotency_key, completed_at, attempt_count)
		VALUES ($1, $3, $3, 's', 't', 'https://example.com/a', '{}', 'application/json', 'COMPLETED', 3, 'exponential', $3, 'old-key', $3, 1),
			($2, $3, $3, 's', 't', 'https://example.com/b', '{}', 'application/json', 'PENDING', 3, 'exponential', $3, NULL, NULL, 0)`,
			[]any{oldID, oldID + 1, old}},
		{`INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at, duration_millis, status, response_code)
		VALUES ($1::bigint + 5, $1, 1, $2, $2, 12, 'SUCCESS', 200)`, []any{oldID, old}},
		{`INSERT INTO dispatch_event (id, source, type, data, idempotency_key, created_at) VALUES ($1::bigint + 7, 's', 't', '{}', 'old-event', $2)`,
			[]any{oldID, old}},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	sealer, _ := store.NewSealer(make([]byte, 32), nil)
	st, err := store.New(pool, store.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, st, oldID); j.Status != dispatch.StatusCompleted {
		t.Errorf("the finished job reads as %s", j.Status)
	}
	if a := attempts(t, st, oldID); len(a) != 1 || a[0].ResponseCode != 200 {
		t.Errorf("its attempts read as %+v", a)
	}
	if _, err := st.GetEvent(ctx, oldID+7); err != nil {
		t.Errorf("the event: %v", err)
	}
	same, created, err := st.CreateJob(ctx, newJob(func(j *dispatch.Job) { j.IdempotencyKey = "old-key" }))
	if err != nil || created || same.ID != oldID {
		t.Errorf("a create with the old job's key: created %v, id %d, %v; want the old job", created, same.ID, err)
	}
	ev, created, err := st.PublishEvent(ctx, &dispatch.Event{Source: "s", Type: "t", Data: `{}`, IdempotencyKey: "old-event"}, map[string]any{})
	if err != nil || created || ev.ID != oldID+7 {
		t.Errorf("a publish with the old event's key: created %v, id %d, %v; want the old event", created, ev.ID, err)
	}
	claim(t, st, oldID+1, now(), dispatch.Claimed) // the live job goes on
	// The legacy table takes the jobs of the next hour (replicas of the
	// previous version may still be creating); partitions follow it.
	if _, err := st.MaintainHistory(ctx, time.Now(), store.History{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := partitions(t, pool, "dispatch_job"); len(got) < 2 || got[0] != "dispatch_job_legacy" {
		t.Errorf("job partitions %v, want the legacy table first and new ones after", got)
	}
	later := secondStore(t, url, store.Options{NewID: skewedIDs(1, 2*time.Hour)})
	fresh := createJob(t, later)
	if p := partitionOf(t, pool, fresh.ID); p == "dispatch_job_legacy" {
		t.Errorf("a job of two hours on went into the legacy partition")
	}
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM dispatch_job_key WHERE idempotency_key = 'old-key')`).Scan(&ok); err != nil || !ok {
		t.Errorf("the old key is not in dispatch_job_key (%v)", err)
	}
}

// Ids past every partition makeRoom can make (their clock an hour ahead of
// this one's) fail the create with an error saying so, with an
// idempotency key (a transaction) or without; nothing is answered as
// stored.
func TestACreateWhoseIdsArePastEveryPartitionFails(t *testing.T) {
	t.Parallel()
	_, pool, dbURL := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	ahead := secondStore(t, dbURL, store.Options{PartitionInterval: time.Minute, NewID: skewedIDs(1, time.Hour)})
	for _, key := range []string{"k-ahead", ""} {
		got, created, err := ahead.CreateJobs(t.Context(), []*dispatch.Job{newJob(func(j *dispatch.Job) { j.IdempotencyKey = key })})
		if err == nil || !strings.Contains(err.Error(), "past every partition") {
			t.Errorf("key %q: %d jobs, created %v, err %v; want an error naming the ids past every partition", key, len(got), created, err)
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM dispatch_job`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d jobs stored (%v), want none", n, err)
	}
}
