package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
)

// Jobs, attempts and events are range-partitioned by time-sorted id (an id
// range is a time range; attempts by their job's id). dispatch creates the
// partitions ahead of time and, past DISPATCH_RETENTION, drops them whole:
// no DELETE of millions of rows, no vacuum debt. dispatch_partition lists
// them. See docs/decisions/history-partitions.md.

// DefaultPartitionInterval is the width of a partition when none is set.
const DefaultPartitionInterval = 24 * time.Hour

// MinPartitionInterval is the narrowest partition (for tests).
const MinPartitionInterval = time.Minute

// partitioned are the partitioned tables, each with how its rows name the
// id that places them.
var partitioned = []string{"dispatch_job", "dispatch_attempt", "dispatch_payload", "dispatch_event"}

// The advisory lock keys under which one replica at a time creates
// partitions (partitionsLock), and builds their search indexes and drops
// them past retention (historyLock). They are apart so that a drop waiting
// for an old snapshot never holds up the partitions made ahead.
const (
	historyLock    = 0x64697370_68697374 // "disphist"
	partitionsLock = 0x64697370_70617274 // "dispart"
)

// IDAt is the smallest TSID of time t: 0 before the ids' epoch (2010),
// and the largest id past the last time an id can hold (in 2079), where
// the shift would wrap around and a search bound would match nothing.
func IDAt(t time.Time) int64 {
	ms := t.UnixMilli() - snowflake.Epoch
	switch {
	case ms <= 0:
		return 0
	case ms > math.MaxInt64>>22:
		return math.MaxInt64
	}
	return ms << 22
}

// TimeOfID is the time a TSID was made at (to the millisecond).
func TimeOfID(id int64) time.Time { return time.UnixMilli(id>>22 + snowflake.Epoch).UTC() }

// ahead is how far past now partitions exist: two intervals, and at least
// ten minutes, so that upkeep that fails for a while leaves creates room.
func ahead(interval time.Duration) time.Duration { return max(2*interval, 10*time.Minute) }

// partitionStart aligns t down to a multiple of interval since the Unix
// epoch (UTC): daily partitions start at midnight UTC.
func partitionStart(t time.Time, interval time.Duration) time.Time {
	return time.UnixMilli(t.UnixMilli() - t.UnixMilli()%interval.Milliseconds()).UTC()
}

// idBounds returns, as SQL literals, bounds for a batch of job ids: its
// least and greatest ids widened to the partition intervals they fall in.
// The hot statements (claim, finish, send confirmation) are prepared once
// per connection with a generic plan; written as parameters, their bounds
// let PostgreSQL set unneeded partitions aside only when the statement
// runs, and PostgreSQL 15 first locks every partition such a plan names,
// with each of its indexes: 432 locks a statement on 32 daily partitions,
// which made each of those statements twice as slow on a month of history
// as on an empty database. Written as literals, they prune the plan
// itself; widened to the intervals, one statement text serves every batch
// of a partition, so it is still planned once. (They need not match the
// partitions' own bounds: any range that holds the batch is correct.)
func (s *Store) idBounds(ids []int64) (lo, hi string) {
	interval := s.partitionInterval
	if interval <= 0 {
		interval = DefaultPartitionInterval
	}
	from := partitionStart(TimeOfID(slices.Min(ids)), interval)
	to := partitionStart(TimeOfID(slices.Max(ids)), interval).Add(interval)
	return strconv.FormatInt(IDAt(from), 10), strconv.FormatInt(IDAt(to)-1, 10)
}

// boundedSQL is a statement with {lo} and {hi} in place of the literal
// bounds of its batch's ids (idBounds). The bounds change once a partition
// interval, so it keeps the text it made last: nearly every batch reuses
// it instead of building a few kilobytes of SQL (most of a delivery's
// allocations when batches are small).
type boundedSQL struct {
	sql  string
	last atomic.Pointer[boundedText]
}

type boundedText struct{ lo, hi, text string }

// withBounds is b's statement with the literal bounds lo and hi.
func withBounds(b *boundedSQL, lo, hi string) string {
	if t := b.last.Load(); t != nil && t.lo == lo && t.hi == hi {
		return t.text
	}
	text := strings.NewReplacer("{lo}", lo, "{hi}", hi).Replace(b.sql)
	b.last.Store(&boundedText{lo: lo, hi: hi, text: text})
	return text
}

// HistoryReport is what one upkeep pass did.
type HistoryReport struct {
	Created int      // partitions created
	Dropped int      // partitions dropped
	Held    []string // partitions past retention kept for their live jobs
	Skipped bool     // another replica held the lock of this pass's work (a full pass: the drops')
}

// History configures partition upkeep.
type History struct {
	Interval  time.Duration // partition width
	Retention time.Duration // 0: keep everything
}

// MaintainHistory creates the partitions due by now plus ahead and drops
// those past retention, on one replica at a time (the others skip). A
// partition past retention that still holds a live job (PENDING, FAILED,
// IN_PROGRESS: retrying, or scheduled far ahead) is kept until none is left;
// its jobs keep their ids and their place in it.
func (s *Store) MaintainHistory(ctx context.Context, now time.Time, h History) (HistoryReport, error) {
	return s.upkeep(ctx, now, h, true)
}

// EnsurePartitions creates the partitions due by now plus ahead and does
// nothing else: what a start, or an insert that found no partition, needs
// before its create, without a pass's slower work (index builds, drops) in
// the way, and leaving the record of the last pass as it was.
func (s *Store) EnsurePartitions(ctx context.Context, now time.Time, interval time.Duration) (HistoryReport, error) {
	return s.upkeep(ctx, now, History{Interval: interval}, false)
}

// upkeep runs a pass (full: all of MaintainHistory; else the creates only)
// on one connection. The creates run under partitionsLock and the rest
// under historyLock, each held by one replica at a time: the rest may wait
// long (a DETACH … CONCURRENTLY behind a backup's snapshot), and a replica,
// or an insert that found no partition, still makes partitions meanwhile.
// Creating a partition (CREATE TABLE, then ATTACH) does not wait for a
// pending detach.
func (s *Store) upkeep(ctx context.Context, now time.Time, h History, full bool) (HistoryReport, error) {
	var rep HistoryReport
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return rep, fmt.Errorf("store: history: %w", err)
	}
	defer conn.Release()
	err = withSessionLock(ctx, conn, partitionsLock, func() (err error) {
		rep.Created, err = ensurePartitions(ctx, conn.Conn(), now, h.Interval)
		return err
	})
	if errors.Is(err, errLockHeld) {
		// Another replica is creating them. A full pass goes on with the
		// rest, and is Skipped only if that is held too.
		rep.Skipped, err = !full, nil
	}
	if !full {
		if err != nil {
			return rep, fmt.Errorf("store: history: %w", err)
		}
		return rep, nil
	}
	created := err
	err = withSessionLock(ctx, conn, historyLock, func() error { return s.maintain(ctx, conn, now, h, &rep, created) })
	if errors.Is(err, errLockHeld) {
		rep.Skipped, err = true, created
	}
	if err != nil {
		return rep, fmt.Errorf("store: history: %w", err)
	}
	return rep, nil
}

// errLockHeld: another replica holds the lock.
var errLockHeld = errors.New("held by another replica")

// withSessionLock runs fn holding the session advisory lock key on conn,
// or answers errLockHeld at once when another session holds it.
func withSessionLock(ctx context.Context, conn *pgxpool.Conn, key int64, fn func() error) error {
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&locked); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if !locked {
		return errLockHeld
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, key)
	}()
	return fn()
}

// maintain runs the slow part of a pass: the search indexes, the metadata
// index's pending lists, the drops past retention, and the pass's record.
// A pass whose creates failed (created) records that and does no more.
func (s *Store) maintain(ctx context.Context, conn *pgxpool.Conn, now time.Time, h History, rep *HistoryReport, created error) error {
	// The pool's statement timeout is for requests. The upkeep's statements
	// wait by design: DETACH … CONCURRENTLY for every older snapshot (a
	// pg_dump's, say), CREATE INDEX CONCURRENTLY over a whole partition.
	// Cut short, they would fail on every pass, and retention with them.
	restore, err := noStatementTimeout(ctx, conn)
	if err != nil {
		return err
	}
	defer restore()
	err = created
	for _, ix := range partitionIndexes {
		if err == nil {
			err = ensurePartitionIndexes(ctx, conn.Conn(), ix)
		}
	}
	if err == nil {
		err = cleanMetadataPendingLists(ctx, conn.Conn(), now)
	}
	if err == nil && h.Retention > 0 {
		rep.Dropped, rep.Held, err = dropExpired(ctx, conn.Conn(), now.Add(-h.Retention))
	}
	next := now.Add(UpkeepEvery(h.Interval))
	var msg *string
	if err != nil {
		m := err.Error()
		msg = &m
	}
	if _, rerr := conn.Exec(context.WithoutCancel(ctx), `
		INSERT INTO dispatch_history_run (id, ran_at, next_at, dropped, held, error) VALUES (1, $1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET ran_at = $1, next_at = $2, dropped = $3, held = $4, error = $5`,
		now, next, rep.Dropped, len(rep.Held), msg); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// noStatementTimeout lifts conn's statement timeout; restore puts back the
// one it had (or closes conn, which the pool then drops, if it cannot).
func noStatementTimeout(ctx context.Context, conn *pgxpool.Conn) (restore func(), err error) {
	var was string
	if err := conn.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&was); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SET statement_timeout = 0`); err != nil {
		return nil, err
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := conn.Exec(ctx, `SELECT set_config('statement_timeout', $1, false)`, was); err != nil {
			_ = conn.Conn().Close(ctx)
		}
	}, nil
}

// UpkeepEvery is how often partition upkeep runs for interval: often
// enough that partitions are always there ahead, at most every ten minutes.
func UpkeepEvery(interval time.Duration) time.Duration {
	return min(max(interval/4, 10*time.Second), 10*time.Minute)
}

// ensurePartitions creates, for each partitioned table, the partitions
// from the end of its last one to now+ahead. Each is created empty and
// then attached, which locks the parent only against other schema changes:
// creates and deliveries go on.
func ensurePartitions(ctx context.Context, conn *pgx.Conn, now time.Time, interval time.Duration) (int, error) {
	if interval < MinPartitionInterval {
		return 0, fmt.Errorf("partition interval %s is below %s", interval, MinPartitionInterval)
	}
	until := IDAt(now.Add(ahead(interval)))
	created := 0
	for _, parent := range partitioned {
		var hi int64
		if err := conn.QueryRow(ctx, `SELECT COALESCE(max(hi), 0) FROM dispatch_partition WHERE parent = $1`, parent).Scan(&hi); err != nil {
			return created, err
		}
		for hi < until {
			from := TimeOfID(hi)
			to := partitionStart(from, interval).Add(interval)
			if cur := partitionStart(now, interval); to.Before(cur) {
				// The upkeep has not run for a while (the service was
				// stopped): one partition covers the gap up to now's.
				to = cur.Add(interval)
			}
			if parent != "dispatch_job" {
				// The other tables take the jobs' bounds, which are made
				// first: a job's attempts and payload are then in
				// partitions within its own's range, and go with it, even
				// when a pass stopped between the tables and the next one
				// covers a gap.
				var jobTo *time.Time
				if err := conn.QueryRow(ctx, `SELECT min(to_time) FROM dispatch_partition WHERE parent = 'dispatch_job' AND hi > $1`,
					hi).Scan(&jobTo); err != nil {
					return created, err
				}
				if jobTo != nil {
					to = *jobTo
				}
			}
			lo, next := hi, IDAt(to)
			name := fmt.Sprintf("%s_p%s", parent, from.Format("20060102t150405"))
			if err := createPartition(ctx, conn, parent, name, lo, next, from, to); err != nil {
				return created, fmt.Errorf("create partition %s: %w", name, err)
			}
			created++
			hi = next
		}
	}
	return created, nil
}

func createPartition(ctx context.Context, conn *pgx.Conn, parent, name string, lo, hi int64, from, to time.Time) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		ident := pgx.Identifier{name}.Sanitize()
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '10s';
			CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
			ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`,
			ident, parent, parent, ident, lo, hi)); err != nil {
			return err
		}
		// ATTACH has created the partition's part of every index the
		// parent declares (idx_dispatch_failed_done among them, valid or
		// not yet: PostgreSQL builds and attaches one for a partitioned
		// index declared ON ONLY too); the searches' are its own.
		if parent == "dispatch_job" {
			ddl := strings.NewReplacer("$p", ident, "$m", pgx.Identifier{metadataIndexName(name)}.Sanitize()).Replace(jobSearchIndexes)
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO dispatch_partition (name, parent, lo, hi, from_time, to_time) VALUES ($1,$2,$3,$4,$5,$6)`,
			name, parent, lo, hi, from, to)
		return err
	})
}

// dropExpired drops the job partitions (with their attempts) that end
// before cutoff and hold no live job, the idempotency keys of their jobs,
// and then the event partitions no kept job can be younger than.
func dropExpired(ctx context.Context, conn *pgx.Conn, cutoff time.Time) (int, []string, error) {
	waiting, err := finishPendingDetaches(ctx, conn)
	if err != nil {
		return 0, nil, err
	}
	if len(waiting) > 0 {
		// Readers still see a partition being detached: a long
		// transaction or a backup. The next pass goes on from here.
		return 0, nil, &detachWaitError{partitions: waiting}
	}
	type part struct {
		name   string
		lo, hi *int64
	}
	rows, err := conn.Query(ctx, `
		SELECT name, lo, hi FROM dispatch_partition
		WHERE parent = 'dispatch_job' AND to_time <= $1 ORDER BY hi`, cutoff)
	if err != nil {
		return 0, nil, err
	}
	jobParts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (part, error) {
		var p part
		return p, r.Scan(&p.name, &p.lo, &p.hi)
	})
	if err != nil {
		return 0, nil, err
	}
	dropped := 0
	var held []string
	for _, p := range jobParts {
		var live bool
		if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED'))`,
			pgx.Identifier{p.name}.Sanitize())).Scan(&live); err != nil && pgCode(err) != undefinedTable {
			// (A table already gone is a drop that stopped before it
			// forgot the partition: it is forgotten below.)
			return dropped, held, err
		}
		if live {
			held = append(held, p.name)
			continue
		}
		lo := int64(-1 << 63)
		if p.lo != nil {
			lo = *p.lo
		}
		// The keys go first: a create that reuses one meanwhile makes a new
		// job, as it would a moment later.
		if err := deleteInChunks(ctx, conn, `DELETE FROM dispatch_job_key WHERE ctid = ANY (ARRAY(
			SELECT ctid FROM dispatch_job_key WHERE job_id >= $1 AND job_id < $2 LIMIT 5000))`, lo, *p.hi); err != nil {
			return dropped, held, err
		}
		if err := dropPartition(ctx, conn, "dispatch_job", p.name); err != nil {
			return dropped, held, err
		}
		dropped++
	}
	// The jobs' attempts and payloads are partitioned by job id: a
	// partition of them goes once no job partition its range overlaps is
	// left (a legacy partition, from the beginning of time, once the
	// legacy jobs have gone).
	rows, err = conn.Query(ctx, `
		SELECT d.parent, d.name FROM dispatch_partition d
		WHERE d.parent IN ('dispatch_attempt', 'dispatch_payload') AND d.to_time <= $1
			AND NOT EXISTS (SELECT 1 FROM dispatch_partition j WHERE j.parent = 'dispatch_job'
				AND `+overlaps("j", "d")+`)
		ORDER BY d.hi`, cutoff)
	if err != nil {
		return dropped, held, err
	}
	type withPart struct{ parent, name string }
	with, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (withPart, error) {
		var x withPart
		return x, r.Scan(&x.parent, &x.name)
	})
	if err != nil {
		return dropped, held, err
	}
	for _, w := range with {
		if err := dropPartition(ctx, conn, w.parent, w.name); err != nil {
			return dropped, held, err
		}
		dropped++
	}
	// Events: a partition goes once its time is past retention and no job
	// partition of its time range is kept (an event's jobs are made with
	// it). A job partition held for a live job holds only the events of its
	// own time: older jobs cannot be an event's.
	rows, err = conn.Query(ctx, `
		SELECT e.name, e.lo, e.hi FROM dispatch_partition e
		WHERE e.parent = 'dispatch_event' AND e.to_time <= $1
			AND NOT EXISTS (SELECT 1 FROM dispatch_partition j WHERE j.parent = 'dispatch_job'
				AND `+overlaps("j", "e")+`)
		ORDER BY e.hi`, cutoff)
	if err != nil {
		return dropped, held, err
	}
	eventParts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (part, error) {
		var p part
		return p, r.Scan(&p.name, &p.lo, &p.hi)
	})
	if err != nil {
		return dropped, held, err
	}
	for _, p := range eventParts {
		lo := int64(-1 << 63)
		if p.lo != nil {
			lo = *p.lo
		}
		if err := deleteInChunks(ctx, conn, `DELETE FROM dispatch_event_key WHERE ctid = ANY (ARRAY(
			SELECT ctid FROM dispatch_event_key WHERE event_id >= $1 AND event_id < $2 LIMIT 5000))`, lo, *p.hi); err != nil {
			return dropped, held, err
		}
		if err := dropPartition(ctx, conn, "dispatch_event", p.name); err != nil {
			return dropped, held, err
		}
		dropped++
	}
	return dropped, held, nil
}

// overlaps is SQL for whether the id ranges of dispatch_partition rows a
// and b overlap; a legacy partition's range (no lo) begins at the
// beginning of time.
func overlaps(a, b string) string {
	const first = "(-9223372036854775807 - 1)"
	return "COALESCE(" + a + ".lo, " + first + ") < " + b + ".hi AND " + a + ".hi > COALESCE(" + b + ".lo, " + first + ")"
}

// pgCode is the SQLSTATE of a PostgreSQL error err wraps ("" for another
// error).
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// undefinedTable is 42P01, "relation does not exist".
const undefinedTable = "42P01"

// foreignKeyViolation is 23503.
const foreignKeyViolation = "23503"

// deleteInChunks runs a chunked DELETE until it deletes nothing.
func deleteInChunks(ctx context.Context, conn *pgx.Conn, sql string, args ...any) error {
	for {
		tag, err := conn.Exec(ctx, sql, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
	}
}

// dropPartition detaches a partition without blocking reads or writes of
// its parent (DETACH … CONCURRENTLY waits for the transactions that may
// see it instead), then drops it, and forgets it.
func dropPartition(ctx context.Context, conn *pgx.Conn, parent, name string) error {
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY`, parent, ident)); err != nil {
		// Already detached (a pass that stopped between detach and drop).
		if code := pgCode(err); code != undefinedTable && code != "42809" {
			return fmt.Errorf("detach %s: %w", name, err)
		}
	}
	// Dropped and forgotten together: a partition forgotten but not
	// dropped would be kept for ever, one dropped but not forgotten would
	// be looked for.
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, ident)); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
		_, err := tx.Exec(ctx, `DELETE FROM dispatch_partition WHERE name = $1`, name)
		return err
	})
}

// finishPendingDetaches completes a DETACH … CONCURRENTLY of one of
// dispatch's partitions that was interrupted (the process stopped during
// it, or a lock_timeout of DATABASE_URL's ended it): the partition is then
// neither attached nor free to drop until it is finalized. Another
// application's tables in the database are not dispatch's to finish.
//
// FINALIZE holds its parent's SHARE UPDATE EXCLUSIVE lock while it waits
// for the partition's readers, and making a partition needs that lock:
// waiting for a backup that reads for hours, it would hold up every create
// of a partition (the upkeep's, a start-up's, makeRoom's) for as long. So
// it waits finalizeWait at most; a partition whose readers outlast that is
// returned, left pending, and tried again on the next pass.
func finishPendingDetaches(ctx context.Context, conn *pgx.Conn) (waiting []string, err error) {
	rows, err := conn.Query(ctx, `
		SELECT i.inhparent::regclass::text, i.inhrelid::regclass::text, c.relname
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhdetachpending
			AND i.inhparent = ANY (ARRAY['dispatch_job', 'dispatch_attempt', 'dispatch_payload', 'dispatch_event']::regclass[])`)
	if err != nil {
		return nil, err
	}
	type pending struct{ parent, child, name string }
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pending, error) {
		var p pending
		return p, r.Scan(&p.parent, &p.child, &p.name)
	})
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = `+strconv.Itoa(int(finalizeWait.Milliseconds()))); err != nil {
				return err
			}
			// Both names come from regclass: quoted and qualified as needed.
			_, err := tx.Exec(ctx, `ALTER TABLE `+p.parent+` DETACH PARTITION `+p.child+` FINALIZE`)
			return err
		})
		switch {
		case pgCode(err) == lockNotAvailable:
			waiting = append(waiting, p.name)
		case err != nil:
			return waiting, fmt.Errorf("finalize detach of %s: %w", p.name, err)
		}
	}
	return waiting, nil
}

// finalizeWait is how long finishing a detach waits for the partition's
// readers on one pass.
const finalizeWait = 2 * time.Second

// detachWaitError is a pass that dropped nothing because partitions being
// detached are still read: the last upkeep's error in the storage report
// until a pass finishes them, so that a reader holding them for days
// shows.
type detachWaitError struct{ partitions []string }

func (e *detachWaitError) Error() string {
	return fmt.Sprintf("dropping %s waits for a transaction that still reads it (a long one, or a backup); each pass tries again",
		strings.Join(e.partitions, ", "))
}

// jobSearchIndexes are the console's search indexes of one job partition
// ($p). Ascending by id: a new job's entry lands after every older entry of
// its key, where a page split leaves the left page full (a descending
// index took each new entry at the front of its key's range and split
// pages in halves). Searches read them backwards, newest first. The status
// index leaves out COMPLETED jobs, most of any history: a delivery then
// adds two entries to it, not three, and a search for COMPLETED jobs
// finds them newest first by primary key.
const jobSearchIndexes = `
	CREATE INDEX ON $p (status, id) WHERE status <> 'COMPLETED';
	CREATE INDEX ON $p (source, id);
	CREATE INDEX ON $p (type, id);
	CREATE INDEX ON $p (group_id, id) WHERE group_id IS NOT NULL;
	CREATE INDEX $m ON $p ` + metadataIndex

// liveStatuses and finishedStatuses, as SQL lists.
const (
	liveStatuses     = `'PENDING', 'IN_PROGRESS', 'FAILED'`
	finishedStatuses = `'COMPLETED', 'ERROR', 'CANCELLED', 'EXPIRED'`
)

// metadataIndex is the metadata search's index of one job partition. A
// delivery writes its job row three times (create, claim, finish), and an
// index of every version took three GIN insertions, which wrote about 1,300
// bytes of WAL per delivery (BenchmarkBytesPerDelivery, with pg_walinspect):
// over a quarter of it. This one holds finished jobs only, so a job is
// entered once; live jobs, at most the backlog, are searched through the
// status index (filterWhere). Its entries go through GIN's pending list
// (fastupdate), which merges them into the index in bulk: about 160 bytes
// of WAL per entry instead of a posting-tree update's 440 or more. A search
// reads the pending list whole, so it is kept small (512 kB; the insert
// that fills it merges it), and the upkeep merges what is left in the
// partitions that no longer take jobs (cleanMetadataPendingLists).
const metadataIndex = `USING GIN (metadata jsonb_path_ops) WITH (fastupdate = on, gin_pending_list_limit = 512)
	WHERE status IN (` + finishedStatuses + `)`

// metadataIndexName is the name of partition's metadata index.
func metadataIndexName(partition string) string { return partition + metadataDone.suffix }

// cleanMetadataPendingLists merges the GIN pending list of the metadata
// index of each job partition that ended before now into the index, so
// that searches do not read the leftovers of every past day (autovacuum
// does it too, where it runs). A list already empty costs a page read.
func cleanMetadataPendingLists(ctx context.Context, conn *pgx.Conn, now time.Time) error {
	_, err := conn.Exec(ctx, `
		SELECT gin_clean_pending_list(x.oid)
		FROM dispatch_partition p
		JOIN pg_class x ON x.relname = p.name || $2
		JOIN pg_index ix ON ix.indexrelid = x.oid AND ix.indisvalid
		WHERE p.parent = 'dispatch_job' AND p.to_time <= $1`, now, metadataDone.suffix)
	return err
}

// failedDoneIndex is the definition of each job partition's part of
// idx_dispatch_failed_done (migration 019), the Overview's count of the
// jobs that ended undelivered (failedJobsQuery). It must match the
// parent's, or attaching it fails.
const failedDoneIndex = `(completed_at) WHERE status IN ('ERROR', 'EXPIRED') AND completed_at IS NOT NULL`

// partitionIndex is an index of every job partition that the upkeep
// builds itself on the partitions that lack it, without blocking writes:
// CREATE INDEX CONCURRENTLY, one partition at a time. Migrations cannot:
// CONCURRENTLY runs outside a transaction, and any other build holds
// creates for as long as it reads the partition, the legacy one with the
// whole history of an upgraded installation. A build that was interrupted
// leaves an invalid index, which is dropped and built again.
type partitionIndex struct {
	suffix string // partition p's index is named p+suffix
	def    string // what follows CREATE INDEX … ON p
	// parent, if set, is a partitioned index of dispatch_job declared ON
	// ONLY the parent: each partition's index is attached to it, and once
	// every partition's is, PostgreSQL marks it valid. A partition that
	// has one attached needs no build: ATTACH PARTITION creates it on each
	// partition made after the parent's (createPartition), under its own
	// name (p_completed_at_idx).
	parent string
}

var (
	// metadataDone is the metadata search's index (migration 023): new
	// partitions get it from jobSearchIndexes.
	metadataDone = partitionIndex{suffix: "_metadata_done", def: metadataIndex}
	// failedDone is idx_dispatch_failed_done's part of each partition
	// (migration 019).
	failedDone = partitionIndex{suffix: "_failed_done", def: failedDoneIndex, parent: "idx_dispatch_failed_done"}
)

// partitionIndexes are the indexes the upkeep builds on the partitions
// that lack them, in this order: the failed jobs' first, read by every
// Overview and quick to build (it holds a few jobs of each partition).
var partitionIndexes = []partitionIndex{failedDone, metadataDone}

// ensurePartitionIndexes builds ix on every job partition that lacks it
// (those that were there before it was declared: the legacy one of an
// upgraded installation, those made before the migration that declared
// it) and attaches it to its parent index, if it has one. A partition
// being detached is left alone: it is going.
func ensurePartitionIndexes(ctx context.Context, conn *pgx.Conn, ix partitionIndex) error {
	rows, err := conn.Query(ctx, `
		SELECT c.relname, ix.indisvalid
		FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		LEFT JOIN pg_class x ON x.relname = c.relname || $1 AND x.relnamespace = c.relnamespace
		LEFT JOIN pg_index ix ON ix.indexrelid = x.oid
		WHERE i.inhparent = 'dispatch_job'::regclass AND NOT i.inhdetachpending AND CASE
			WHEN $2 = '' THEN ix.indisvalid IS NOT TRUE
			ELSE NOT EXISTS (SELECT 1 FROM pg_index px
				JOIN pg_inherits pi ON pi.inhrelid = px.indexrelid
				JOIN pg_class pc ON pc.oid = pi.inhparent
				WHERE px.indrelid = c.oid AND pc.relname = $2 AND pc.relnamespace = c.relnamespace)
			END
		ORDER BY c.relname`, ix.suffix, ix.parent)
	if err != nil {
		return err
	}
	type missing struct {
		name  string
		valid *bool // its index by name: nil, none
	}
	todo, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (missing, error) {
		var m missing
		return m, r.Scan(&m.name, &m.valid)
	})
	if err != nil {
		return err
	}
	for _, m := range todo {
		idx := pgx.Identifier{m.name + ix.suffix}.Sanitize()
		built := m.valid != nil && *m.valid // by a pass whose attach did not get its lock
		if m.valid != nil && !built {
			if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+idx); err != nil {
				return fmt.Errorf("drop invalid index %s: %w", idx, err)
			}
		}
		if !built {
			if _, err := conn.Exec(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+idx+` ON `+
				pgx.Identifier{m.name}.Sanitize()+` `+ix.def); err != nil {
				return fmt.Errorf("build index %s: %w", idx, err)
			}
		}
		if ix.parent == "" {
			continue
		}
		// Attaching changes the catalog only, but locks the partition's
		// new index against every statement that reads or writes the
		// partition: it waits at most a moment for them (and they for it).
		// Should a long transaction hold the partition, the next pass
		// attaches it; meanwhile the built index serves its partition.
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'; ALTER INDEX `+
				pgx.Identifier{ix.parent}.Sanitize()+` ATTACH PARTITION `+idx)
			return err
		})
		if pgCode(err) == lockNotAvailable {
			continue
		}
		if err != nil {
			return fmt.Errorf("attach index %s to %s: %w", idx, ix.parent, err)
		}
	}
	return nil
}

// lockNotAvailable is 55P03, a lock_timeout that ran out.
const lockNotAvailable = "55P03"

// noPartition reports whether err is an insert's "no partition of relation
// … found for row": the upkeep has not created the partition yet (a new
// database, or upkeep that has failed for longer than it creates ahead).
func noPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == "" &&
		strings.HasPrefix(pgErr.Message, "no partition of relation")
}

// makeRoom creates the partitions due now at the store's width, for an
// insert that found none.
func (s *Store) makeRoom(ctx context.Context) error {
	for range 50 {
		rep, err := s.EnsurePartitions(ctx, time.Now(), s.partitionInterval)
		if err != nil || !rep.Skipped {
			return err
		}
		// Another replica is at it: wait for it to finish.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("store: partition upkeep is held by another replica")
}

// RunHistory keeps the partitions until ctx ends: MaintainHistory at once
// and then every UpkeepEvery(h.Interval). Every replica runs it; one at a time does the
// work.
func (s *Store) RunHistory(ctx context.Context, h History, log *slog.Logger) error {
	log = log.With("component", "history")
	tick := time.NewTicker(UpkeepEvery(h.Interval))
	defer tick.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		rep, err := s.MaintainHistory(ctx, time.Now(), h)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, new(*detachWaitError)):
			log.Warn("partition upkeep", "err", err, "created", rep.Created)
		case err != nil:
			log.Error("partition upkeep failed; creates fail once the partitions made ahead run out", "err", err)
		case rep.Created+rep.Dropped > 0 || len(rep.Held) > 0:
			log.Info("partition upkeep", "created", rep.Created, "dropped", rep.Dropped,
				"held_for_live_jobs", rep.Held, "retention", h.Retention.String())
		}
	}
}

// Storage reads what the history takes: cheap catalog reads and one
// index probe per partition, safe to call on every scrape.
func (s *Store) Storage(ctx context.Context) (dispatch.Storage, error) {
	var st dispatch.Storage
	err := s.browse(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&st.DatabaseBytes); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT t.name, COALESCE(sum(GREATEST(c.reltuples, 0)), 0)::bigint,
				COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
			FROM unnest($1::text[]) AS t(name)
			LEFT JOIN pg_class c ON c.oid = t.name::regclass
				OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = t.name::regclass)
			GROUP BY t.name ORDER BY t.name`,
			[]string{"dispatch_job", "dispatch_attempt", "dispatch_payload", "dispatch_event", "dispatch_job_key", "dispatch_event_key", "dispatch_subscription", "dispatch_credentials"})
		if err != nil {
			return err
		}
		st.Tables, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.TableStorage, error) {
			var t dispatch.TableStorage
			return t, r.Scan(&t.Name, &t.Rows, &t.Bytes)
		})
		if err != nil {
			return err
		}
		var oldest *int64
		if err := tx.QueryRow(ctx, `SELECT min(id) FROM dispatch_job`).Scan(&oldest); err != nil {
			return err
		}
		if oldest != nil {
			t := TimeOfID(*oldest)
			st.OldestJobAt = &t
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM dispatch_partition WHERE parent = 'dispatch_job'`).Scan(&st.Partitions); err != nil {
			return err
		}
		var errText *string
		err = tx.QueryRow(ctx, `SELECT ran_at, next_at, dropped, held, error FROM dispatch_history_run WHERE id = 1`).
			Scan(&st.LastUpkeep, &st.NextUpkeep, &st.LastDropped, &st.HeldPartitions, &errText)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if errText != nil {
			st.LastError = *errText
		}
		return err
	})
	if err != nil {
		return st, fmt.Errorf("store: storage: %w", err)
	}
	return st, nil
}
