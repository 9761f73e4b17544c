package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// Unmark clears the queued mark of jobs whose pointers were not sent after
// all, so that the outbox sends them. Only rows still carrying this mark
// change: a sweep or a processor may have moved them on. It runs even when
// ctx has ended (shutdown), or they would wait for the sweep.
func (s *Store) Unmark(ctx context.Context, ids []int64, mark time.Time) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `UPDATE dispatch_job SET queued_at = NULL, send_lease = NULL WHERE id = ANY($1) AND queued_at = $2`, ids, mark); err != nil {
		return fmt.Errorf("store: unmark unsent jobs: %w", err)
	}
	return nil
}

// ConfirmSent records that the pointers of sent went onto the queue: their
// send leases end, so the sweep leaves them to the queue. Only rows still
// carrying the mark they were sent under change. The publisher confirms in
// batches, about once a second; a claim confirms too, so most rows have
// nothing left to confirm by then. A job locked by another transaction
// meanwhile is skipped, not waited for. It runs even when ctx has ended
// (shutdown), or the sweep would send them again.
func (s *Store) ConfirmSent(ctx context.Context, sent []dispatch.Unsent) error {
	if len(sent) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ids, marks := make([]int64, len(sent)), make([]time.Time, len(sent))
	for i, u := range sent {
		ids[i], marks[i] = u.ID, u.Mark
	}
	// The rows are locked in id order and a locked one is skipped, so a
	// confirmation never waits on, or deadlocks with, a claim or finish
	// batch locking the same jobs in its own order (PostgreSQL found such a
	// deadlock only after deadlock_timeout, stalling both for a second). A
	// skipped job is being claimed, which ends its lease too, or re-marked;
	// at worst its lease runs out and the sweep sends a spare pointer,
	// which the processor drops.
	lo, hi := s.idBounds(ids)
	_, err := s.pool.Exec(ctx, withBounds(confirmSentSQL, lo, hi), ids, marks)
	if err != nil {
		return fmt.Errorf("store: confirm sent jobs: %w", err)
	}
	return nil
}

// confirmSentSQL ends the send leases of the jobs $1 still marked with the
// marks $2 (one per job); {lo} and {hi} are literal bounds of the ids
// (idBounds).
// The jobs are found by primary key (id = ANY), each compared with its own
// mark by its place in the arrays, and the batch is an array, not a join:
// joined with unnest, the generic plan walked every job in the id range
// against the whole batch, 1.2 s a call on a table of 5,000,000 jobs.
var confirmSentSQL = &boundedSQL{sql: `
	UPDATE dispatch_job SET send_lease = NULL
	WHERE id = ANY (ARRAY(
		SELECT l.id FROM dispatch_job l
		WHERE l.id = ANY ($1::bigint[]) AND l.id BETWEEN {lo} AND {hi} AND l.send_lease IS NOT NULL
			AND l.queued_at = ($2::timestamptz[])[array_position($1::bigint[], l.id)]
		ORDER BY l.id
		FOR UPDATE OF l SKIP LOCKED))
		AND id BETWEEN {lo} AND {hi}`}

// PublishDue takes up to limit due jobs whose pointer is not on the queue,
// hands them to send, and returns how many send reports as sent
// (PublishDueExcept, skipping no queue).
func (s *Store) PublishDue(ctx context.Context, now time.Time, limit int, send func([]dispatch.Unsent) ([]int64, error)) (int, error) {
	return s.PublishDueExcept(ctx, now, limit, nil, send)
}

// PublishDueExcept takes up to limit due jobs whose pointer is not on the
// queue, hands them to send, and returns how many send reports as sent.
// Jobs whose queue is in skip (a queue's key, "" for the default queue)
// are left for a later pass: their queue is failing, and they must not fill
// every batch and hold up the other queues' jobs.
//
// No row lock or transaction is held while send talks to the queue: one
// statement marks the jobs queued under a send lease (FOR UPDATE SKIP
// LOCKED inside it, so replicas share the work) and commits, send runs, and
// the jobs send did not report as sent are marked unsent again. The caller
// confirms the sent ones (ConfirmSent). A job cancelled meanwhile is
// cancelled at once; its pointer, if it went out, is dropped by the
// processor. Should the process die between the mark and the send, the
// lease runs out and the sweep sends those jobs again: at least once,
// never never.
func (s *Store) PublishDueExcept(ctx context.Context, now time.Time, limit int, skip []string, send func([]dispatch.Unsent) ([]int64, error)) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("store: publish: limit %d, want at least 1", limit)
	}
	// The pool's plans are generic (see deliveryPlans), made once per
	// connection, so the statement leaves the planner no choice that
	// depends on the table's size then. The batch is an array (= ANY), not
	// a join: as `id IN (SELECT …)` the plan hashed the batch against a read
	// of the whole primary key, on a table of a few thousand jobs and, with
	// LIMIT $2 (reckoned at a tenth of the rows), on one of any size. The
	// limit is written into the statement; the publisher's batch size is
	// fixed, so this is still one prepared statement.
	rows, err := s.pool.Query(ctx, `
		UPDATE dispatch_job SET queued_at = $1, send_lease = $2
		WHERE id = ANY (ARRAY(
			SELECT id FROM dispatch_job j
			WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS') AND next_attempt_at <= $1
				AND COALESCE(queue_url, '') <> ALL ($3::text[])
				-- A pointer sent again (stepped aside, or replacing a lost
				-- one) waits until no earlier job of its group is live.
				AND (pointer_gen = 0 OR group_id IS NULL OR NOT dispatch_live_predecessor(j.group_id, j.seq))
			ORDER BY next_attempt_at, id LIMIT `+strconv.Itoa(limit)+`
			FOR UPDATE SKIP LOCKED))
		RETURNING id, COALESCE(group_id, ''), pointer_gen, COALESCE(seq, id), COALESCE(trace_context, ''),
			COALESCE(queue_url, ''), COALESCE(pool_code, '')`, now, now.Add(s.sendLease), skipList(skip))
	if err != nil {
		return 0, fmt.Errorf("store: publish: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.Unsent, error) {
		u := dispatch.Unsent{Mark: now}
		return u, r.Scan(&u.ID, &u.GroupID, &u.Gen, &u.Seq, &u.TraceContext, &u.QueueURL, &u.PoolCode)
	})
	if err != nil {
		return 0, fmt.Errorf("store: publish: %w", err)
	}
	if len(due) == 0 {
		return 0, nil
	}
	// RETURNING has no order: send in group order (the order the creates
	// committed), so a group's pointers go out in that order whatever the
	// clocks of the replicas that created them.
	slices.SortFunc(due, func(a, b dispatch.Unsent) int { return cmp.Compare(a.Seq, b.Seq) })
	sent, sendErr := send(due)
	if len(sent) < len(due) {
		ok := make(map[int64]bool, len(sent))
		for _, id := range sent {
			ok[id] = true
		}
		var unsent []int64
		for _, u := range due {
			if !ok[u.ID] {
				unsent = append(unsent, u.ID)
			}
		}
		if err := s.Unmark(ctx, unsent, now); err != nil {
			return len(sent), fmt.Errorf("store: publish: %w", errors.Join(err, sendErr))
		}
	}
	if sendErr != nil {
		return len(sent), fmt.Errorf("store: publish: %w", sendErr)
	}
	return len(sent), nil
}

// requeueStaleSQL marks unsent the live jobs whose pointer should have
// come back before $1 and has not: a job queued, due and not claimed since
// then. A job behind a live one of its group is left alone, whatever its
// age: the queue holds its pointer behind the group's first, and it can be
// delivered only once that one is done. Sent again, each would wait in the
// outbox, to be tested for its group on every pass, so that a long outage
// of one group's target would cost every pass a look-up per held job;
// should its pointer be lost, it is sent again once it leads its group and
// has still had no news. The group heads are looked up once per group.
const requeueStaleSQL = `
		WITH stale AS (
			SELECT id, group_id, seq FROM dispatch_job
			WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND queued_at IS NOT NULL
				AND next_attempt_at < $1 AND queued_at < $1
				AND (claimed_until IS NULL OR claimed_until < $1)
		), heads AS (
			SELECT g.group_id, (SELECT h.seq FROM dispatch_job h
				WHERE h.group_id = g.group_id AND h.status IN ('PENDING', 'IN_PROGRESS', 'FAILED')
				ORDER BY h.seq LIMIT 1) AS seq
			FROM (SELECT DISTINCT group_id FROM stale WHERE group_id IS NOT NULL) g
		)
		UPDATE dispatch_job SET queued_at = NULL, pointer_gen = pointer_gen + 1
		WHERE id = ANY (ARRAY(
				SELECT s.id FROM stale s LEFT JOIN heads h ON h.group_id = s.group_id
				WHERE s.group_id IS NULL OR s.seq IS NULL OR s.seq <= h.seq))
			AND status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND queued_at IS NOT NULL
			AND next_attempt_at < $1 AND queued_at < $1
			AND (claimed_until IS NULL OR claimed_until < $1)`

// skipList is skip as the statement takes it: never NULL (<> ALL of NULL
// is NULL, which would select nothing).
func skipList(skip []string) []string {
	if skip == nil {
		return []string{}
	}
	return skip
}

// Sweep repairs what a lost message or a dead process leaves behind: jobs
// past expiresAt become EXPIRED; live jobs marked queued whose send was
// never confirmed by the end of its lease (the marking process died between
// the mark and the send), and live jobs whose pointer should have come back
// long ago (requeueAfter past due, or a claim that stale), are marked unsent
// so the publisher sends them again. It returns the counts.
func (s *Store) Sweep(ctx context.Context, now time.Time, requeueAfter time.Duration) (expired, requeued int64, err error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE dispatch_job SET status = 'EXPIRED', completed_at = $1, updated_at = $1,
			last_error = 'expired before delivery'
		WHERE status IN ('PENDING', 'FAILED') AND expires_at <= $1`, now)
	if err != nil {
		return 0, 0, fmt.Errorf("store: expire jobs: %w", err)
	}
	expired = tag.RowsAffected()
	tag, err = s.pool.Exec(ctx, `
		UPDATE dispatch_job SET queued_at = NULL, send_lease = NULL, pointer_gen = pointer_gen + 1
		WHERE send_lease < $1 AND status IN ('PENDING', 'IN_PROGRESS', 'FAILED')`, now)
	if err != nil {
		return expired, 0, fmt.Errorf("store: requeue unconfirmed sends: %w", err)
	}
	requeued = tag.RowsAffected()
	stale := now.Add(-requeueAfter)
	tag, err = s.pool.Exec(ctx, requeueStaleSQL, stale)
	if err != nil {
		return expired, requeued, fmt.Errorf("store: requeue stale jobs: %w", err)
	}
	return expired, requeued + tag.RowsAffected(), nil
}
