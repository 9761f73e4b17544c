package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// ClaimJob atomically takes a job for one delivery attempt: PENDING or
// FAILED (or IN_PROGRESS under a stale claim) → IN_PROGRESS with
// attemptCount+1 and a lease until now+lease. On the way it expires jobs past
// expiresAt, refuses jobs not due yet, and holds a job back while an earlier
// job of its group is unfinished, so a group is never reordered whatever
// order the queue hands pointers out in. A stale claim's lost attempt is
// recorded as TIMEOUT, since its outcome is unknown.
func (s *Store) ClaimJob(ctx context.Context, id int64, now time.Time, lease time.Duration) (dispatch.Claim, error) {
	// Fast path, one statement: a due PENDING/FAILED job with attempts left,
	// not expired, and no unfinished earlier job in its group.
	c := dispatch.Claim{State: dispatch.Claimed}
	var err error
	c.Job, err = scanJob(s.pool.QueryRow(ctx, `
		UPDATE dispatch_job j SET status = 'IN_PROGRESS', attempt_count = attempt_count + 1,
			last_attempt_at = $2, claimed_until = $3, updated_at = $2
		WHERE id = $1 AND status IN ('PENDING', 'FAILED') AND attempt_count < max_retries
			AND (expires_at IS NULL OR expires_at > $2) AND next_attempt_at <= $4
			AND (group_id IS NULL OR NOT EXISTS (
				SELECT 1 FROM dispatch_job p WHERE p.group_id = j.group_id AND p.id < j.id
					AND p.status IN ('PENDING', 'IN_PROGRESS', 'FAILED')))
		RETURNING `+jobColumns, id, now, now.Add(lease), now.Add(time.Second)))
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("store: claim job %d: %w", id, err)
	}
	// Anything else is decided under a row lock: why not, and what then.
	c = dispatch.Claim{}
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM dispatch_job WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			c.State = dispatch.ClaimMissing
			return nil
		}
		if err != nil {
			return err
		}
		c.Job = j
		switch {
		case j.Status.Terminal():
			c.State = dispatch.ClaimTerminal
			return nil
		case j.ExpiresAt != nil && !now.Before(*j.ExpiresAt) && j.Status != dispatch.StatusInProgress:
			c.State = dispatch.ClaimTerminal
			c.Job, err = finishJob(ctx, tx, j.ID, dispatch.StatusExpired, now, "expired before delivery")
			return err
		case j.Status == dispatch.StatusInProgress && j.ClaimedUntil != nil && now.Before(*j.ClaimedUntil):
			c.State, c.Until = dispatch.ClaimBusy, *j.ClaimedUntil
			return pointerDueBack(ctx, tx, j.ID, now, c.Until)
		case j.NextAttemptAt != nil && j.NextAttemptAt.After(now.Add(time.Second)) && j.Status != dispatch.StatusInProgress:
			c.State, c.Until = dispatch.ClaimNotDue, *j.NextAttemptAt
			return pointerDueBack(ctx, tx, j.ID, now, c.Until)
		}
		if j.GroupID != "" {
			var pred *time.Time
			err := tx.QueryRow(ctx, `
				SELECT next_attempt_at FROM dispatch_job
				WHERE group_id = $1 AND id < $2 AND status IN ('PENDING', 'IN_PROGRESS', 'FAILED')
				ORDER BY id LIMIT 1`, j.GroupID, j.ID).Scan(&pred)
			if err == nil {
				c.State, c.Until = dispatch.ClaimBlocked, now.Add(time.Second)
				if pred != nil && pred.After(c.Until) {
					c.Until = *pred
				}
				return stepAside(ctx, tx, j.ID)
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		if j.Status == dispatch.StatusInProgress {
			// The previous holder died mid-attempt: its outcome is unknown.
			if err := insertAttempt(ctx, tx, s.NewID(), dispatch.Attempt{
				JobID: j.ID, AttemptNumber: j.AttemptCount, AttemptedAt: derefTime(j.LastAttemptAt, now),
				CompletedAt: now, Status: dispatch.AttemptTimeout,
				ErrorMessage: "the processor stopped before recording the outcome (claim expired); the request may have reached the target",
			}, false); err != nil {
				return err
			}
			if j.ExpiresAt != nil && !now.Before(*j.ExpiresAt) {
				c.State = dispatch.ClaimTerminal
				c.Job, err = finishJob(ctx, tx, j.ID, dispatch.StatusExpired, now, "expired before a delivery could be confirmed")
				return err
			}
			if j.AttemptCount >= j.MaxRetries {
				c.State = dispatch.ClaimTerminal
				c.Job, err = finishJob(ctx, tx, j.ID, dispatch.StatusError, now,
					fmt.Sprintf("retries exhausted after %d attempts; the last one's outcome is unknown", j.AttemptCount))
				return err
			}
		}
		c.Job, err = scanJob(tx.QueryRow(ctx, `
			UPDATE dispatch_job SET status = 'IN_PROGRESS', attempt_count = attempt_count + 1,
				last_attempt_at = $2, claimed_until = $3, updated_at = $2
			WHERE id = $1 RETURNING `+jobColumns, j.ID, now, now.Add(lease)))
		c.State = dispatch.Claimed
		return err
	})
	if err != nil {
		return c, fmt.Errorf("store: claim job %d: %w", id, err)
	}
	return c, nil
}

// stepAside takes a blocked job's pointer out of the queue: the job is
// marked unsent with a new pointer generation, and the publisher sends it
// again once no earlier job of its group is live, so it lands behind them.
// A FIFO queue holds a group behind its first message: a pointer that waited
// at the head of its group for an earlier job whose own pointer is behind it
// (re-sent after an outage or a loss) would block that group for good.
func stepAside(ctx context.Context, tx pgx.Tx, id int64) error {
	_, err := tx.Exec(ctx, `UPDATE dispatch_job SET queued_at = NULL, pointer_gen = pointer_gen + 1 WHERE id = $1`, id)
	return err
}

// pointerDueBack notes that the job's pointer is alive and due back when
// the processor asked for it (until), so the sweep does not take a job that
// is only waiting (for its group, its lease or its time) for a lost one and
// send copies. The processor's answer sets the message's visibility, which
// SQS caps at 12 h: that, not a far-future until (a predecessor scheduled
// months ahead), is when a lost message is known to be missing.
func pointerDueBack(ctx context.Context, tx pgx.Tx, id int64, now, until time.Time) error {
	if latest := now.Add(dispatch.MaxVisibilityDelay); until.After(latest) {
		until = latest
	}
	_, err := tx.Exec(ctx, `UPDATE dispatch_job SET queued_at = $2 WHERE id = $1 AND queued_at IS NOT NULL`, id, until)
	return err
}

func derefTime(t *time.Time, def time.Time) time.Time {
	if t == nil {
		return def
	}
	return *t
}

func finishJob(ctx context.Context, tx pgx.Tx, id int64, st dispatch.Status, now time.Time, lastErr string) (dispatch.Job, error) {
	return scanJob(tx.QueryRow(ctx, `
		UPDATE dispatch_job SET status = $2, completed_at = $3, updated_at = $3, last_error = $4,
			claimed_until = NULL
		WHERE id = $1 RETURNING `+jobColumns, id, string(st), now, lastErr))
}

func insertAttempt(ctx context.Context, tx pgx.Tx, id int64, a dispatch.Attempt, replace bool) error {
	conflict := `DO NOTHING`
	if replace {
		conflict = `DO UPDATE SET attempted_at = EXCLUDED.attempted_at, completed_at = EXCLUDED.completed_at,
			duration_millis = EXCLUDED.duration_millis, status = EXCLUDED.status,
			response_code = EXCLUDED.response_code, response_body = EXCLUDED.response_body,
			error_message = EXCLUDED.error_message`
	}
	var code *int
	if a.ResponseCode != 0 {
		code = &a.ResponseCode
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at,
			duration_millis, status, response_code, response_body, error_message)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)
		ON CONFLICT (job_id, attempt_number) `+conflict,
		id, a.JobID, a.AttemptNumber, a.AttemptedAt, a.CompletedAt, a.CompletedAt.Sub(a.AttemptedAt).Milliseconds(),
		string(a.Status), code, nullStr(a.ResponseBody), nullStr(a.ErrorMessage))
	return err
}

// FinishAttempt records an attempt and the job's new state in one
// transaction. The job changes only while this attempt's claim still holds
// (status IN_PROGRESS, same attempt number); the attempt row is written
// either way, replacing a stale-claim placeholder, so no attempt is lost.
// It reports whether the job took the new state.
func (s *Store) FinishAttempt(ctx context.Context, a dispatch.Attempt, o dispatch.Transition) (bool, error) {
	var completedAt *time.Time
	if o.Status.Terminal() {
		completedAt = &a.CompletedAt
	}
	var code *int
	if a.ResponseCode != 0 {
		code = &a.ResponseCode
	}
	// One statement, so one implicit transaction: the attempt row (replacing
	// a stale-claim placeholder) and the job's transition commit together.
	tag, err := s.pool.Exec(ctx, `
		WITH attempt AS (
			INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at,
				duration_millis, status, response_code, response_body, error_message)
			VALUES ($8, $1, $2, $9, $7, $10, $11, $12, $13, $14)
			ON CONFLICT (job_id, attempt_number) DO UPDATE SET attempted_at = EXCLUDED.attempted_at,
				completed_at = EXCLUDED.completed_at, duration_millis = EXCLUDED.duration_millis,
				status = EXCLUDED.status, response_code = EXCLUDED.response_code,
				response_body = EXCLUDED.response_body, error_message = EXCLUDED.error_message
		)
		UPDATE dispatch_job SET status = $3, last_error = $4, next_attempt_at = $5,
			completed_at = $6::timestamptz,
			duration_millis = (extract(epoch FROM ($6::timestamptz - created_at)) * 1000)::bigint,
			claimed_until = NULL, updated_at = $7
		WHERE id = $1 AND status = 'IN_PROGRESS' AND attempt_count = $2`,
		a.JobID, a.AttemptNumber, string(o.Status), nullStr(o.LastError), o.NextAttemptAt,
		completedAt, a.CompletedAt, s.NewID(), a.AttemptedAt, a.CompletedAt.Sub(a.AttemptedAt).Milliseconds(),
		string(a.Status), code, nullStr(a.ResponseBody), nullStr(a.ErrorMessage))
	applied := err == nil && tag.RowsAffected() == 1
	if err != nil {
		return false, fmt.Errorf("store: finish attempt %d of job %d: %w", a.AttemptNumber, a.JobID, err)
	}
	return applied, nil
}

// Unclaim gives back a claim without spending an attempt (the circuit
// breaker was open): the job returns to FAILED, due again at next.
func (s *Store) Unclaim(ctx context.Context, j dispatch.Job, next time.Time, reason string) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE dispatch_job SET attempt_count = attempt_count - 1,
			status = 'FAILED',
			claimed_until = NULL, next_attempt_at = $3, last_error = $4, updated_at = now()
		WHERE id = $1 AND status = 'IN_PROGRESS' AND attempt_count = $2`,
		j.ID, j.AttemptCount, next, reason)
	if err != nil {
		return fmt.Errorf("store: unclaim job %d: %w", j.ID, err)
	}
	return nil
}

// PublishDue takes up to limit due jobs whose pointer is not on the queue,
// hands them to send, and returns how many send reports as sent.
//
// No row lock or transaction is held while send talks to the queue: one
// statement marks the jobs queued (FOR UPDATE SKIP LOCKED inside it, so
// replicas share the work) and commits, send runs, and the jobs send did not
// report as sent are marked unsent again. A job cancelled meanwhile is
// cancelled at once; its pointer, if it went out, is dropped by the
// processor. Should the process die between the mark and the send, those
// jobs look queued and the sweep sends them after DISPATCH_REQUEUE_AFTER,
// as for a lost message: at least once, never never.
func (s *Store) PublishDue(ctx context.Context, now time.Time, limit int, send func([]dispatch.Unsent) ([]int64, error)) (int, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE dispatch_job SET queued_at = $1
		WHERE id IN (
			SELECT id FROM dispatch_job j
			WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS') AND next_attempt_at <= $1
				-- A pointer sent again (stepped aside, or replacing a lost
				-- one) waits until no earlier job of its group is live.
				AND (pointer_gen = 0 OR group_id IS NULL OR NOT EXISTS (
					SELECT 1 FROM dispatch_job p WHERE p.group_id = j.group_id AND p.id < j.id
						AND p.status IN ('PENDING', 'IN_PROGRESS', 'FAILED')))
			ORDER BY next_attempt_at, id LIMIT $2
			FOR UPDATE SKIP LOCKED)
		RETURNING id, COALESCE(group_id, ''), pointer_gen, next_attempt_at`, now, limit)
	if err != nil {
		return 0, fmt.Errorf("store: publish: %w", err)
	}
	type taken struct {
		u   dispatch.Unsent
		due time.Time
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (taken, error) {
		var x taken
		return x, r.Scan(&x.u.ID, &x.u.GroupID, &x.u.Gen, &x.due)
	})
	if err != nil {
		return 0, fmt.Errorf("store: publish: %w", err)
	}
	if len(all) == 0 {
		return 0, nil
	}
	// RETURNING has no order: send in the order the jobs fell due, so a
	// group's pointers go out in creation order.
	slices.SortFunc(all, func(a, b taken) int {
		if c := a.due.Compare(b.due); c != 0 {
			return c
		}
		return cmp.Compare(a.u.ID, b.u.ID)
	})
	due := make([]dispatch.Unsent, len(all))
	for i, x := range all {
		due[i] = x.u
	}
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
		// Only rows still carrying this mark: a sweep or a processor may
		// have moved them on. Done even when ctx has ended (shutdown),
		// or they would wait for the sweep.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := s.pool.Exec(uctx, `UPDATE dispatch_job SET queued_at = NULL WHERE id = ANY($1) AND queued_at = $2`, unsent, now)
		cancel()
		if err != nil {
			return len(sent), fmt.Errorf("store: publish: unmark unsent jobs: %w", errors.Join(err, sendErr))
		}
	}
	if sendErr != nil {
		return len(sent), fmt.Errorf("store: publish: %w", sendErr)
	}
	return len(sent), nil
}

// Sweep repairs what a lost message or a dead process leaves behind: jobs
// past expiresAt become EXPIRED, and live jobs whose pointer should have come
// back long ago (requeueAfter past due, or a claim that stale) are marked
// unsent so the publisher sends them again. It returns the counts.
func (s *Store) Sweep(ctx context.Context, now time.Time, requeueAfter time.Duration) (expired, requeued int64, err error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE dispatch_job SET status = 'EXPIRED', completed_at = $1, updated_at = $1,
			last_error = 'expired before delivery'
		WHERE status IN ('PENDING', 'FAILED') AND expires_at <= $1`, now)
	if err != nil {
		return 0, 0, fmt.Errorf("store: expire jobs: %w", err)
	}
	expired = tag.RowsAffected()
	stale := now.Add(-requeueAfter)
	tag, err = s.pool.Exec(ctx, `
		UPDATE dispatch_job SET queued_at = NULL, pointer_gen = pointer_gen + 1
		WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND queued_at IS NOT NULL
			AND next_attempt_at < $1 AND queued_at < $1
			AND (claimed_until IS NULL OR claimed_until < $1)`, stale)
	if err != nil {
		return expired, 0, fmt.Errorf("store: requeue stale jobs: %w", err)
	}
	return expired, tag.RowsAffected(), nil
}
