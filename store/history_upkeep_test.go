package store_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
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
	st := storeOn(t, short, store.Options{PartitionInterval: time.Minute})
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

// A drop interrupted while it waited for a reader (the service stopped, or
// DATABASE_URL's lock_timeout ran out) is finished by a later pass. While
// the reader (a backup) goes on, finishing it must not hold up the
// partitions ahead either: waiting with the parent locked, it would fail
// every create of a partition after 10 s for as long as the backup ran.
// The pass says what it waits for, and the pass after the reader drops it.
func TestAnInterruptedDropWaitingForAReaderDoesNotHoldUpNewPartitions(t *testing.T) {
	t.Parallel()
	st, pool, dbURL := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	t0 := time.Now()
	done := createJob(t, st)
	completeJob(t, st, done.ID, now())
	history := store.History{Interval: time.Minute, Retention: 5 * time.Minute}

	release := reader(t, pool)
	ctx, stop := context.WithCancel(t.Context())
	interrupted := make(chan error, 1)
	go func() {
		_, err := st.MaintainHistory(ctx, t0.Add(20*time.Minute), history)
		interrupted <- err
	}()
	waitForStatement(t, pool, "%DETACH PARTITION%CONCURRENTLY%")
	stop()
	if err := <-interrupted; err == nil {
		t.Fatal("the pass stopped while its drop waited ended without an error")
	}
	var pending int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_inherits WHERE inhdetachpending`).Scan(&pending); err != nil || pending != 1 {
		t.Fatalf("%d partitions pending detach (%v), want the interrupted one", pending, err)
	}

	finishing := make(chan error, 1)
	go func() {
		_, err := st.MaintainHistory(t.Context(), t0.Add(21*time.Minute), history)
		finishing <- err
	}()
	waitForStatement(t, pool, "%DETACH PARTITION%FINALIZE%")
	other := secondStore(t, dbURL, store.Options{})
	if rep, err := other.EnsurePartitions(t.Context(), t0.Add(40*time.Minute), time.Minute); err != nil || rep.Skipped {
		t.Errorf("partitions made while an interrupted drop is finished: %+v, %v; want made", rep, err)
	}
	select {
	case err := <-finishing:
		if err == nil || !strings.Contains(err.Error(), "waits for a transaction that still reads it") {
			t.Errorf("the pass while the reader goes on: %v, want it to say the drop waits for a reader", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pass waited for the reader")
	}
	storage, err := st.Storage(t.Context())
	if err != nil || !strings.Contains(storage.LastError, "waits for a transaction") {
		t.Errorf("the storage report's last upkeep error %q (%v), want the waiting drop", storage.LastError, err)
	}

	release()
	pastRetention(t, st, t0.Add(22*time.Minute))
	if _, err := st.GetJob(t.Context(), done.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Errorf("the finished job past retention, once the reader ended: %v, want it gone", err)
	}
}

// Another application's table in the same database, left pending detach,
// is not dispatch's to finish: it stopped every drop of dispatch's.
func TestAnotherTablesPendingDetachDoesNotStopRetention(t *testing.T) {
	t.Parallel()
	st, pool, _ := storetest.New(t, store.Options{PartitionInterval: time.Minute})
	t0 := time.Now()
	done := createJob(t, st)
	completeJob(t, st, done.ID, now())
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA other_app;
		CREATE TABLE other_app.m (id int) PARTITION BY RANGE (id);
		CREATE TABLE other_app.m1 PARTITION OF other_app.m FOR VALUES FROM (0) TO (10)`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM other_app.m`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET lock_timeout = '200ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE other_app.m DETACH PARTITION other_app.m1 CONCURRENTLY`); !strings.Contains(fmt.Sprint(err), "55P03") {
		t.Fatalf("the other application's detach: %v, want it stopped by its lock_timeout", err)
	}
	conn.Release()
	_ = tx.Rollback(ctx)

	rep := pastRetention(t, st, t0.Add(20*time.Minute))
	if rep.Dropped == 0 {
		t.Errorf("upkeep %+v: want dispatch's partitions past retention dropped", rep)
	}
	var pending bool
	if err := pool.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = 'other_app.m1'::regclass`).Scan(&pending); err != nil || !pending {
		t.Errorf("the other application's partition: pending %v (%v), want it left as it was", pending, err)
	}
}

// waitForStatement waits until a statement like pattern waits for a lock
// in the test's database.
func waitForStatement(t *testing.T, pool *pgxpool.Pool, pattern string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for waiting := 0; waiting == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no statement like %q waited for a lock", pattern)
		}
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE query LIKE $1 AND wait_event_type = 'Lock' AND datname = current_database()`, pattern).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
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

// failedDoneParts maps each partition of dispatch_job to its index
// attached to idx_dispatch_failed_done ("" for none; " (invalid)" after
// the name of one that is not valid), and says whether
// idx_dispatch_failed_done itself is valid.
func failedDoneParts(t *testing.T, pool *pgxpool.Pool) (parts map[string]string, valid bool) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT c.relname, COALESCE(x.relname || CASE WHEN ix.indisvalid THEN '' ELSE ' (invalid)' END, '')
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		LEFT JOIN (pg_inherits xi JOIN pg_class x ON x.oid = xi.inhrelid JOIN pg_index ix ON ix.indexrelid = x.oid)
			ON xi.inhparent = 'idx_dispatch_failed_done'::regclass AND ix.indrelid = c.oid
		WHERE i.inhparent = 'dispatch_job'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	parts = map[string]string{}
	var part, idx string
	if _, err := pgx.ForEachRow(rows, []any{&part, &idx}, func() error { parts[part] = idx; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(t.Context(), `SELECT indisvalid FROM pg_index WHERE indexrelid = 'idx_dispatch_failed_done'::regclass`).Scan(&valid); err != nil {
		t.Fatal(err)
	}
	return parts, valid
}

// migrationCost is what a migration does to the history (jobs, attempts,
// payloads, events, their keys and partitions) within its transaction,
// which holds every lock it takes until it ends.
type migrationCost struct {
	read  int64         // rows of the history it read
	built []string      // indexes it built on tables that hold rows
	held  []string      // locks that a create waits for, "table mode"
	took  time.Duration // its statements' time
}

// historyTables matches the names of the history's tables.
const historyTables = `'^dispatch_(job|attempt|payload|event)'`

// costOf runs the migration file name in a transaction on pool, sees what
// it did, and rolls it back.
func costOf(t *testing.T, pool *pgxpool.Pool, name string) migrationCost {
	t.Helper()
	ctx := t.Context()
	sql, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // looked at, never kept
	// (Within a transaction the counts of the transaction's backend are
	// not flushed: the difference is the migration's.)
	read := func() (n int64) {
		if err := tx.QueryRow(ctx, `SELECT COALESCE(sum(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)::bigint
			FROM pg_stat_xact_all_tables WHERE relname ~ `+historyTables).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	indexes := func() map[uint32]string {
		rows, err := tx.Query(ctx, `SELECT x.oid, x.relname FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
			JOIN pg_class c ON c.oid = i.indrelid WHERE c.relkind = 'r' AND c.relname ~ `+historyTables)
		if err != nil {
			t.Fatal(err)
		}
		byOID := map[uint32]string{}
		var (
			oid  uint32
			name string
		)
		if _, err := pgx.ForEachRow(rows, []any{&oid, &name}, func() error { byOID[oid] = name; return nil }); err != nil {
			t.Fatal(err)
		}
		return byOID
	}
	var c migrationCost
	read0, before := read(), indexes()
	start := time.Now()
	if _, err := tx.Exec(ctx, string(sql)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c.took = time.Since(start)
	c.read = read() - read0
	for oid, name := range indexes() {
		if _, ok := before[oid]; !ok {
			c.built = append(c.built, name)
		}
	}
	rows, err := tx.Query(ctx, `
		SELECT c.relname || ' ' || l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE l.pid = pg_backend_pid() AND c.relkind IN ('r', 'p') AND c.relname ~ `+historyTables+`
			AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if c.held, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	return c
}

// Upgrading an installation with history holds creates only for catalog
// changes after the partitions are made: no migration from 014 on reads
// the history or builds an index of it inside its transaction, whose locks
// creates wait for. (019 and 021 built idx_dispatch_failed_done over the
// legacy partition, 021 under dispatch_job's exclusive lock.) The upkeep
// then builds that index on the legacy partition without blocking writes
// (replacing an interrupted build's invalid leftover), the partitions made
// since got theirs when attached, and, every partition's attached, the
// index is valid. The Overview's count reads the legacy partition through
// it.
func TestUpgradeBuildsTheFailedJobsIndexBesideCreates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, pool := beforePartitions(t)
	start := time.Now().Add(-72 * time.Hour)
	seedBeforePartitions(t, pool, start, 100_000)
	if err := store.MigrateTo(ctx, url, 13); err != nil {
		t.Fatal(err)
	}
	// Every migration after the partitions' own (010-013), one at a time,
	// changes the catalog only: whatever lock it holds against creates
	// (adding a column takes the table's exclusive lock), it reads no row
	// of the history and builds no index of it meanwhile, and takes well
	// under a second.
	built := false // the legacy partition's part of idx_dispatch_failed_done
	for v := int32(14); v <= store.MigrationsVersion(); v++ {
		file, err := filepath.Glob(filepath.Join("migrations", fmt.Sprintf("%03d_*.sql", v)))
		if err != nil || len(file) != 1 {
			t.Fatalf("migration %03d: %v (%v)", v, file, err)
		}
		c := costOf(t, pool, file[0])
		if c.read > 0 || len(c.built) > 0 || c.took > time.Second {
			t.Errorf("%s on 100,000 jobs read %d rows of the history and built %v in %s, holding %v against creates; "+
				"want no row read and no index built, well under a second", filepath.Base(file[0]), c.read, c.built, c.took.Round(time.Millisecond), c.held)
		}
		if err := store.MigrateTo(ctx, url, v); err != nil {
			t.Fatal(err)
		}
		if v < 19 || built {
			continue
		}
		if parts, valid := failedDoneParts(t, pool); valid || parts["dispatch_job_legacy"] != "" {
			built = true
			t.Errorf("after %s the legacy partition's part of idx_dispatch_failed_done is %q (the index is valid: %v); want none built yet",
				filepath.Base(file[0]), parts["dispatch_job_legacy"], valid)
		}
	}
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// A build of the upkeep that was interrupted left an invalid index
	// under the name the upkeep builds.
	if _, err := pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY dispatch_job_legacy_failed_done ON dispatch_job_legacy (source)`); err == nil {
		t.Fatal("the leftover's build succeeded; want it to fail and leave an invalid index")
	}
	st := storeOn(t, pool, store.Options{})
	if _, err := st.MaintainHistory(ctx, time.Now(), store.History{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	parts, valid := failedDoneParts(t, pool)
	if len(parts) < 2 {
		t.Fatalf("job partitions %v, want the legacy one and those made ahead", parts)
	}
	for part, idx := range parts {
		if idx == "" || strings.HasSuffix(idx, "(invalid)") {
			t.Errorf("partition %s: idx_dispatch_failed_done's index %q, want a valid one attached", part, idx)
		}
	}
	if parts["dispatch_job_legacy"] != "dispatch_job_legacy_failed_done" {
		t.Errorf("the legacy partition's index is %q, want the upkeep's dispatch_job_legacy_failed_done", parts["dispatch_job_legacy"])
	}
	if !valid {
		t.Error("idx_dispatch_failed_done is not valid with every partition's index attached")
	}

	if _, err := pool.Exec(ctx, `ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	from := start.Add(10 * time.Hour)
	var want int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM dispatch_job_legacy WHERE status IN ('ERROR', 'EXPIRED')
		AND completed_at >= $1 AND completed_at < $2`, from, from.Add(time.Hour)).Scan(&want); err != nil || want == 0 {
		t.Fatalf("%d failed jobs in the window (%v), want some", want, err)
	}
	e := explain(t, pool, true, store.FailedJobsQuery, from, from.Add(time.Hour))
	var read bool
	for _, v := range e.nodes {
		switch {
		case v["Relation Name"] != "dispatch_job_legacy":
		case v["Index Name"] == "dispatch_job_legacy_failed_done":
			read = true
		default:
			t.Errorf("the failed jobs' count reads the legacy partition by %v %v", v["Node Type"], v["Index Name"])
		}
	}
	if !read {
		t.Errorf("the failed jobs' count does not read the legacy partition through its index:\n%s", e.plan)
	}
}

// A development database migrated with 019's first text (never released)
// has the index of the jobs that ended undelivered built on every
// partition without its completed_at term. Migration 021 declares it again
// as 019 now does, and the upkeep builds and attaches each partition's.
func TestMigration021ReplacesTheFirstFailedJobsIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, pool := beforePartitions(t)
	if err := store.MigrateTo(ctx, url, 18); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		CREATE INDEX idx_dispatch_failed_done ON dispatch_job (completed_at) WHERE status IN ('ERROR', 'EXPIRED');
		UPDATE dispatch_schema_version SET version = 19`); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var def string
	if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef('idx_dispatch_failed_done'::regclass)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "completed_at IS NOT NULL") {
		t.Errorf("idx_dispatch_failed_done after 021: %s; want its predicate to name completed_at", def)
	}
	st := storeOn(t, pool, store.Options{})
	if _, err := st.MaintainHistory(ctx, time.Now(), store.History{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	parts, valid := failedDoneParts(t, pool)
	for part, idx := range parts {
		if idx == "" || strings.HasSuffix(idx, "(invalid)") {
			t.Errorf("partition %s: idx_dispatch_failed_done's index %q, want a valid one attached", part, idx)
		}
	}
	if !valid || parts["dispatch_job_legacy"] != "dispatch_job_legacy_failed_done" {
		t.Errorf("idx_dispatch_failed_done valid: %v, the legacy partition's %q; want it valid and built by the upkeep", valid, parts["dispatch_job_legacy"])
	}
}

// Attaching a partition's part of idx_dispatch_failed_done waits for every
// transaction that has read the partition, and every read and write of it
// waits behind the attach: it gives up after a moment, and the pass goes
// on without it (the index built serves its partition). The next pass,
// once the reader has gone, attaches it.
func TestAnAttachHeldUpByAReaderIsDoneByTheNextPass(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, pool := beforePartitions(t)
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// A pass built the legacy partition's index and did not get to
	// attach it; a transaction has read the partition since.
	if _, err := pool.Exec(ctx, `CREATE INDEX CONCURRENTLY dispatch_job_legacy_failed_done ON dispatch_job_legacy (completed_at)
		WHERE status IN ('ERROR', 'EXPIRED') AND completed_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	// (Read committed: between its statements it holds no snapshot, which
	// a build would wait for, only its locks.)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }) }
	t.Cleanup(release)
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM dispatch_job_legacy WHERE status = 'ERROR'`); err != nil {
		t.Fatal(err)
	}
	st := storeOn(t, pool, store.Options{})
	start := time.Now()
	passCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := st.MaintainHistory(passCtx, time.Now(), store.History{Interval: time.Hour}); err != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("the pass beside the reader took %s: %v; want it done within seconds", time.Since(start).Round(time.Millisecond), err)
	}
	if parts, valid := failedDoneParts(t, pool); valid || parts["dispatch_job_legacy"] != "" {
		t.Errorf("beside the reader the legacy partition's index is %q attached (the index is valid: %v); want it left for the next pass",
			parts["dispatch_job_legacy"], valid)
	}
	release()
	if _, err := st.MaintainHistory(ctx, time.Now(), store.History{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if parts, valid := failedDoneParts(t, pool); !valid || parts["dispatch_job_legacy"] != "dispatch_job_legacy_failed_done" {
		t.Errorf("after the reader the legacy partition's index is %q attached (the index is valid: %v); want the one built, and valid",
			parts["dispatch_job_legacy"], valid)
	}
}

// storeOn is a Store over pool as the tests here open it (a key of
// zeroes: nothing here is sealed).
func storeOn(t *testing.T, pool *pgxpool.Pool, opts store.Options) *store.Store {
	t.Helper()
	opts.Sealer, _ = store.NewSealer(make([]byte, 32), nil)
	st, err := store.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
