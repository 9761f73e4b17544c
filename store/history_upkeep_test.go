package store_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// pastRetention runs a full upkeep pass at t with five minutes' retention.
func pastRetention(t *testing.T, st *store.Store, at time.Time) store.HistoryReport {
	t.Helper()
	rep, err := st.MaintainHistory(t.Context(), at, store.History{Interval: time.Minute, Retention: 5 * time.Minute})
	if err != nil {
		t.Fatalf("upkeep at %s: %v", at.Format(time.TimeOnly), err)
	}
	return rep
}

// A process migrating holds tern's lock for as long as its migrations take;
// another starting meanwhile waits for it on one connection, however long:
// the lock timeout is for the tables' locks. It used to give up after the
// timeout, try again on a new connection, and fail the start after twelve
// tries (two minutes), saying a long transaction held a table.
func TestMigrateWaitsOutAnotherProcesssMigration(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	ctx := t.Context()
	other, err := pgx.Connect(ctx, dbURL) // the process migrating
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.WithoutCancel(ctx))
	const ternLock = 9628173550095224 // tern's migration lock
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(ternLock)); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("lock_timeout", "100") // ms: the wait would have given up at once
	u.RawQuery = q.Encode()
	pool, err := store.Connect(ctx, u.String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	migrated := make(chan error, 1)
	go func() { migrated <- store.Migrate(context.WithoutCancel(ctx), pool) }()

	// For 3 s the migration waits: on one connection, never failing.
	waiters := map[int32]bool{}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		select {
		case err := <-migrated:
			t.Fatalf("the migration ended while another held the lock: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		rows, err := other.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		if err != nil {
			t.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pids {
			waiters[p] = true
		}
	}
	var still bool
	if err := other.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&still); err != nil {
		t.Fatal(err)
	}
	if len(waiters) != 1 || !still {
		t.Errorf("the migration waited on %d connections, and at 3 s waiting: %v; want one wait that does not give up", len(waiters), still)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(ternLock)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-migrated:
		if err != nil {
			t.Errorf("the migration, once the lock was free: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the migration did not end within 30 s of the lock being free")
	}
}

// reader opens a transaction that has read the jobs and holds its
// snapshot, as a backup's does, until release (or the test's end).
func reader(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	tx, err := pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `SELECT count(*) FROM dispatch_job`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }) }
	t.Cleanup(release) // should the test end first
	return release
}

// expiredPartitions lists the partitions of parents whose time is past
// cutoff.
func expiredPartitions(t *testing.T, pool *pgxpool.Pool, cutoff time.Time, parents ...string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT name FROM dispatch_partition WHERE parent = ANY ($1) AND to_time <= $2 ORDER BY name`, parents, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// A live job in the legacy partition (an installation upgraded with jobs
// scheduled ahead, or created in the hour after the upgrade) keeps its
// payload and the room for its attempts while the partitions after it go.
func TestALiveLegacyJobKeepsItsPayloadAndAttempts(t *testing.T) {
	t.Parallel()
	base, pool, dbURL := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	t0 := time.Now()
	var bound time.Time // where the legacy partition ends: the first migration's time
	if err := pool.QueryRow(t.Context(), `SELECT to_time FROM dispatch_legacy_bound`).Scan(&bound); err != nil {
		t.Fatal(err)
	}
	before := secondStore(t, dbURL, store.Options{NewID: skewedIDs(1, bound.Add(-time.Minute).Sub(t0))})
	live := createJob(t, before)
	if p := partitionOf(t, pool, live.ID); p != "dispatch_job_legacy" {
		t.Fatalf("the job went into %s, want the legacy partition", p)
	}
	next := createJob(t, base)
	completeJob(t, base, next.ID, now())

	pastRetention(t, base, t0.Add(20*time.Minute))
	if _, err := base.GetJob(t.Context(), next.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Fatalf("the finished job past retention: %v, want it gone", err)
	}
	if got := getJob(t, base, live.ID); got.Payload != live.Payload {
		t.Errorf("the live legacy job's payload reads %q, want %q", got.Payload, live.Payload)
	}
	completeJob(t, base, live.ID, now())
	if a := attempts(t, base, live.ID); len(a) != 1 {
		t.Errorf("the live legacy job has %d attempts after its delivery, want 1", len(a))
	}
}

// A drop that stopped after the partition's table was dropped, before it
// was forgotten, does not stop later passes: the partition is forgotten.
func TestAPartitionDroppedButNotForgottenIsForgotten(t *testing.T) {
	t.Parallel()
	base, pool, _ := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	t0 := time.Now()
	done := createJob(t, base)
	completeJob(t, base, done.ID, now())
	gone := partitionOf(t, pool, done.ID)
	if _, err := pool.Exec(t.Context(), `DROP TABLE `+pgx.Identifier{gone}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pastRetention(t, base, t0.Add(20*time.Minute))
	if got := expiredPartitions(t, pool, t0.Add(15*time.Minute), "dispatch_job"); len(got) != 0 {
		t.Errorf("partitions past retention still known: %v", got)
	}
}

// The upkeep's statements wait for what they must (here DETACH …
// CONCURRENTLY for an older snapshot) whatever statement timeout the
// service's connections have; the connection gets its timeout back.
func TestUpkeepOutwaitsTheStatementTimeout(t *testing.T) {
	t.Parallel()
	_, pool, dbURL := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("statement_timeout", "500")
	q.Set("pool_max_conns", "1") // the connection the upkeep ran on is the one asked after
	u.RawQuery = q.Encode()
	short, err := store.Connect(t.Context(), u.String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(short.Close)
	sealer, _ := store.NewSealer(make([]byte, 32), nil)
	st, err := store.New(short, store.Options{PartitionInterval: time.Minute, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	done := createJob(t, st)
	completeJob(t, st, done.ID, now())

	// A reader of the jobs, as a backup is, for 1.5 s.
	time.AfterFunc(1500*time.Millisecond, reader(t, pool))

	pastRetention(t, st, t0.Add(20*time.Minute))
	if _, err := st.GetJob(t.Context(), done.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Errorf("the finished job past retention: %v, want it gone", err)
	}
	var timeout string
	if err := short.QueryRow(t.Context(), `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "500ms" {
		t.Errorf("the connection's statement timeout is %q after the upkeep (%v), want 500ms", timeout, err)
	}
}

// A drop that waits for a reader's old snapshot (a backup, a report, a
// session left open) does not keep another replica from making the
// partitions ahead: creates go on however long the drop waits.
func TestADropWaitingForAReaderDoesNotHoldUpNewPartitions(t *testing.T) {
	t.Parallel()
	st, pool, dbURL := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	t0 := time.Now()
	done := createJob(t, st)
	completeJob(t, st, done.ID, now())

	release := reader(t, pool)
	dropped := make(chan error, 1)
	go func() {
		_, err := st.MaintainHistory(context.WithoutCancel(t.Context()), t0.Add(20*time.Minute),
			store.History{Interval: time.Minute, Retention: 5 * time.Minute})
		dropped <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for waiting := 0; waiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the drop never waited for the reader")
		}
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE query LIKE '%DETACH PARTITION%' AND wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}

	other := secondStore(t, dbURL, store.Options{})
	rep, err := other.EnsurePartitions(t.Context(), t0.Add(40*time.Minute), time.Minute)
	if err != nil || rep.Skipped {
		t.Errorf("partitions made while a drop waits: %+v, %v; want made, not skipped", rep, err)
	}
	var aheadTo time.Time
	if err := pool.QueryRow(t.Context(), `SELECT max(to_time) FROM dispatch_partition WHERE parent = 'dispatch_job'`).Scan(&aheadTo); err != nil {
		t.Fatal(err)
	}
	if aheadTo.Before(t0.Add(40 * time.Minute)) {
		t.Errorf("partitions reach %s, want past %s", aheadTo.Format(time.TimeOnly), t0.Add(40*time.Minute).Format(time.TimeOnly))
	}
	release()
	select {
	case err := <-dropped:
		if err != nil {
			t.Errorf("the drop, once the reader ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drop did not end within 30 s of the reader")
	}
	if _, err := st.GetJob(t.Context(), done.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Errorf("the finished job past retention: %v, want it gone", err)
	}
}

// A job partition held for its live job holds only the events of its own
// time: later events past retention go.
func TestAHeldPartitionHoldsOnlyTheEventsOfItsTime(t *testing.T) {
	t.Parallel()
	base, pool, dbURL := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	t0 := time.Now()
	at4 := secondStore(t, dbURL, store.Options{NewID: skewedIDs(1, 4*time.Minute)})
	at10 := secondStore(t, dbURL, store.Options{NewID: skewedIDs(2, 10*time.Minute)})
	live := createJob(t, at4)
	ev, _, err := at10.PublishEvent(t.Context(), &dispatch.Event{Source: "s", Type: "t", Data: `{}`}, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	rep := pastRetention(t, base, t0.Add(30*time.Minute))
	if len(rep.Held) != 1 || rep.Held[0] != partitionOf(t, pool, live.ID) {
		t.Fatalf("held %v, want only the live job's partition", rep.Held)
	}
	if _, err := base.GetEvent(t.Context(), ev.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Errorf("an event of a later time past retention: %v, want it gone", err)
	}
}

// The attempts' and payloads' partitions go past retention even when a
// pass stopped after the jobs' partitions were made and the service was
// then down for a while: they follow the jobs' bounds.
func TestPartitionsMadeAfterAStoppedPassStillGo(t *testing.T) {
	t.Parallel()
	base, pool, _ := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	t0 := time.Now()
	// A pass that stopped after the jobs' last three partitions: the
	// attempts' and payloads' are not there.
	for _, parent := range []string{"dispatch_attempt", "dispatch_payload"} {
		rows, err := pool.Query(t.Context(), `SELECT name FROM dispatch_partition WHERE parent = $1 ORDER BY hi DESC LIMIT 3`, parent)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, err := pool.Exec(t.Context(), `DROP TABLE `+pgx.Identifier{n}.Sanitize()+`; DELETE FROM dispatch_partition WHERE name = '`+strings.ReplaceAll(n, "'", "")+`'`); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An hour later the service is back; twenty minutes on, everything
	// of then is past retention.
	if _, err := base.MaintainHistory(t.Context(), t0.Add(time.Hour), store.History{Interval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	pastRetention(t, base, t0.Add(80*time.Minute))
	if got := expiredPartitions(t, pool, t0.Add(75*time.Minute), "dispatch_job", "dispatch_attempt", "dispatch_payload"); len(got) != 0 {
		t.Errorf("partitions past retention kept: %v", got)
	}
}

// An upgrade whose migration waits for a table's lock behind a long
// transaction (a report, a pg_dump) holds the creates queued behind it
// only as long as it waits, a few seconds at a time, and migrates once the
// transaction has ended.
func TestAMigrationBehindALongTransactionHoldsCreatesOnlyBriefly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, pool := beforePartitions(t)
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	endReader := func() { once.Do(func() { _ = reader.Rollback(context.WithoutCancel(ctx)) }) }
	t.Cleanup(endReader)
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM dispatch_job`); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- store.Migrate(context.WithoutCancel(ctx), pool) }()
	deadline := time.Now().Add(20 * time.Second)
	for waiting := 0; waiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the migration never waited for a lock")
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	// A create as the previous version makes it, queued behind the
	// migration's lock.
	start := time.Now()
	insertCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := pool.Exec(insertCtx, `INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, payload,
			payload_content_type, status, max_retries, retry_strategy, next_attempt_at)
		VALUES ($1, now(), now(), 's', 't', 'https://example.com/a', '{}', 'application/json', 'PENDING', 3, 'exponential', now())`,
		store.IDAt(time.Now())); err != nil || time.Since(start) > 8*time.Second {
		t.Errorf("a create waited %s behind the migration (%v), want a few seconds at most", time.Since(start).Round(time.Millisecond), err)
	}
	endReader()
	select {
	case err := <-migrated:
		if err != nil {
			t.Fatalf("Migrate after the long transaction ended: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the migration did not finish once the long transaction had ended")
	}
	if err := store.CheckSchema(ctx, pool); err != nil {
		t.Error(err)
	}
}
