package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
)

// ClaimJob atomically takes a job for one delivery attempt: PENDING or
// FAILED (or IN_PROGRESS under a stale claim) → IN_PROGRESS with
// attemptCount+1 and a lease until now+lease. On the way it expires jobs past
// expiresAt, refuses jobs not due yet, and holds a job back while an earlier
// job of its group is unfinished, so a group is never reordered whatever
// order the queue hands pointers out in. A stale claim's lost attempt is
// recorded as TIMEOUT, since its outcome is unknown.
//
// A job this store handed over a moment ago is claimed in memory
// (Claim.Deferred; see fresh.go) when ctx carries the handle it was handed
// with (handoff.WithHandle): the proof that this pointer is the copy this
// store handed over, which nothing can have claimed before it. (The
// processor makes one of a queue message's first receive with the mark it
// was sent under.) Any other pointer from the queue has no such proof:
// another replica may have received it and claimed the job already, so it
// is claimed by statement.
func (s *Store) ClaimJob(ctx context.Context, id int64, now time.Time, lease time.Duration) (dispatch.Claim, error) {
	h, handed := handoff.HandleFrom(ctx)
	// A job offered in process has no pointer on a queue to note as due
	// back; a queue message's first receive carries a handle too, and has.
	offered := handed && h.ID == id && !handoff.FirstReceive(ctx)
	if j, ok := s.fresh.claim(id, handed && h.ID == id, h.Mark, h.Gen, now, lease); ok {
		return dispatch.Claim{State: dispatch.Claimed, Job: j, Deferred: true}, nil
	}
	// Fast path, one statement shared with the claims arriving at the same
	// time (group commit): a due PENDING/FAILED job with attempts left, not
	// expired, and no unfinished earlier job in its group.
	until := now.Add(lease)
	r, err := s.claims.do(claimReq{ctx: ctx, id: id, now: now, until: until})
	if err != nil && (nothingWritten(err) || ctx.Err() != nil) {
		if r.lost || !nothingWritten(err) { // it may have committed
			s.lost.add(id, now, until)
		}
		return dispatch.Claim{}, fmt.Errorf("store: claim job %d: %w", id, err)
	}
	if r.claimed {
		return dispatch.Claim{State: dispatch.Claimed, Job: r.job}, nil
	}
	// Anything else is decided under a row lock: why not, and what then.
	// So is a claim whose statement may have committed though its answer
	// was lost (the connection dropped, here or in a shared batch tried
	// again alone): the row then holds this very claim, which is this
	// processor's to deliver, not another's to wait for.
	lost := err != nil || r.lost
	c := dispatch.Claim{}
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobCols("dispatch_job")+` FROM dispatch_job WHERE id = $1 FOR UPDATE OF dispatch_job`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			c.State = dispatch.ClaimMissing
			return nil
		}
		if err != nil {
			return err
		}
		c.Job = j
		switch {
		case lost && ownClaim(j, now, until):
			c.State = dispatch.Claimed
			return nil
		case s.lost.take(j):
			// This process's claim, made by an earlier call that returned
			// an error: no request went out. It runs from now, unless the
			// job expired meanwhile.
			if j.ExpiresAt != nil && !now.Before(*j.ExpiresAt) {
				c.State = dispatch.ClaimTerminal
				c.Job, err = finishJob(ctx, tx, j.ID, dispatch.StatusExpired, now, "expired before delivery")
				return err
			}
			c.State = dispatch.Claimed
			c.Job, err = scanJob(tx.QueryRow(ctx, `
				UPDATE dispatch_job SET last_attempt_at = $2, claimed_until = $3, updated_at = $2, `+claimSendLease("$3")+`
				WHERE id = $1 RETURNING `+jobCols("dispatch_job"), j.ID, now, until))
			return err
		case j.Status.Terminal():
			c.State = dispatch.ClaimTerminal
			return nil
		case j.ExpiresAt != nil && !now.Before(*j.ExpiresAt) && j.Status != dispatch.StatusInProgress:
			c.State = dispatch.ClaimTerminal
			c.Job, err = finishJob(ctx, tx, j.ID, dispatch.StatusExpired, now, "expired before delivery")
			return err
		case j.Status == dispatch.StatusInProgress && j.ClaimedUntil != nil && now.Before(*j.ClaimedUntil):
			c.State, c.Until = dispatch.ClaimBusy, *j.ClaimedUntil
			return pointerDueBack(ctx, tx, j.ID, now, c.Until, offered)
		case j.NextAttemptAt != nil && j.NextAttemptAt.After(now.Add(time.Second)) && j.Status != dispatch.StatusInProgress:
			c.State, c.Until = dispatch.ClaimNotDue, *j.NextAttemptAt
			return pointerDueBack(ctx, tx, j.ID, now, c.Until, offered)
		}
		if j.GroupID != "" {
			var pred *time.Time
			err := tx.QueryRow(ctx, `
				SELECT next_attempt_at FROM dispatch_job
				WHERE group_id = $1 AND seq < $2 AND status IN ('PENDING', 'IN_PROGRESS', 'FAILED')
				ORDER BY seq LIMIT 1`, j.GroupID, j.Seq).Scan(&pred)
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
				ErrorMessage: takeoverMessage,
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
				last_attempt_at = $2, claimed_until = $3, updated_at = $2, `+claimSendLease("$3")+`
			WHERE id = $1 RETURNING `+jobCols("dispatch_job"), j.ID, now, now.Add(lease)))
		c.State = dispatch.Claimed
		return err
	})
	if err != nil {
		// A claim of the fast path, or this transaction's own (a takeover),
		// may have committed unseen.
		if lost || !nothingWritten(err) {
			s.lost.add(id, now, until)
		}
		return c, fmt.Errorf("store: claim job %d: %w", id, err)
	}
	return c, nil
}

// ownClaim reports whether j holds the claim made at now until until: a
// claim is stamped with its processor's own times, to the microsecond
// PostgreSQL keeps. Asked only after a claim's answer was lost: two copies
// of one pointer claimed in the same microsecond, one of them losing its
// answer, could both take it for theirs (a duplicate delivery, as at least
// once allows), where without it the job would wait out its lease and be
// charged an attempt never made.
func ownClaim(j dispatch.Job, now, until time.Time) bool {
	return j.Status == dispatch.StatusInProgress && j.LastAttemptAt != nil && j.ClaimedUntil != nil &&
		j.LastAttemptAt.Equal(now.Truncate(time.Microsecond)) && j.ClaimedUntil.Equal(until.Truncate(time.Microsecond))
}

// takeoverMessage is the error of the TIMEOUT attempt a stale claim's
// takeover records for the attempt whose outcome it cannot know. It marks
// the one attempt row a later record may replace (finishManySQL): the
// late holder's real outcome.
const takeoverMessage = "the processor stopped before recording the outcome (claim expired); the request may have reached the target"

// RecordClaim writes a deferred claim (Claim.Deferred) of j, as ClaimJob
// returned it: the job goes from PENDING to IN_PROGRESS under the claim's
// lease. It reports false when the job had moved on meanwhile (cancelled,
// or claimed through another copy of its pointer).
//
// A send lease still running (the pointer's send not confirmed: a job
// delivered in process never had one sent) is stretched to the claim's
// end instead of ended: should this process die mid-delivery, no message
// on a queue would bring the job back, and the sweep sends its pointer
// once the claim has gone stale. The record ends the lease as usual.
func (s *Store) RecordClaim(ctx context.Context, j dispatch.Job) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE dispatch_job SET status = 'IN_PROGRESS', attempt_count = $2,
			last_attempt_at = $3, claimed_until = $4, updated_at = $3,
			send_lease = CASE WHEN send_lease IS NOT NULL THEN greatest(send_lease, $4) END
		WHERE id = $1 AND status = 'PENDING' AND attempt_count = $2 - 1`,
		j.ID, j.AttemptCount, j.LastAttemptAt, j.ClaimedUntil)
	if err != nil {
		return false, fmt.Errorf("store: record claim of job %d: %w", j.ID, err)
	}
	s.fresh.release(j.ID)
	return tag.RowsAffected() == 1, nil
}

// claimSendLease is a claim's SET of the send lease, the claim ending at
// until. A lease still running means the pointer's send is not confirmed:
// a job handed over in process, or offered to a router, had none sent, and
// one claimed through the database (its payload too large to remember, its
// offer's request at another replica) is on no queue. The lease then runs
// to the claim's end, so that should the holder die mid-delivery the sweep
// sends a pointer once the claim has gone stale, as for RecordClaim. With
// no lease (the send confirmed) there stays none: the queue brings the
// message back. The record ends the lease as usual.
func claimSendLease(until string) string {
	return "send_lease = CASE WHEN send_lease IS NOT NULL THEN greatest(send_lease, " + until + ") END"
}

type claimReq struct {
	ctx        context.Context
	id         int64
	now, until time.Time
}

type claimRes struct {
	job     dispatch.Job
	claimed bool
	// lost: a statement that may have claimed the job failed before its
	// answer was read (claimBatch tried the job alone after it).
	lost bool
}

// claimBatch runs the fast path for a batch of claims. A job claimed twice
// in one batch (two copies of its pointer) goes alone, after the others: the
// second then finds it taken. Should the statement fail, each is tried alone.
func (s *Store) claimBatch(batch []*pending[claimReq, claimRes]) {
	seen := make(map[int64]bool, len(batch))
	var together, alone []*pending[claimReq, claimRes]
	for _, p := range batch {
		if seen[p.req.id] {
			alone = append(alone, p)
			continue
		}
		seen[p.req.id] = true
		together = append(together, p)
	}
	if err := s.claimMany(together); err != nil {
		if len(together) == 1 {
			together[0].err = err
		} else {
			for _, p := range together {
				p.res.lost = !nothingWritten(err)
			}
			alone = append(together, alone...)
		}
	}
	for _, p := range alone {
		if p.err == nil && !p.res.claimed {
			p.err = s.claimMany([]*pending[claimReq, claimRes]{p})
		}
	}
}

// claimManySQL claims the jobs $1 with, per job, the claim time $2, the
// lease end $3 and the latest due time $4; {lo} and {hi} are literal
// bounds of the ids (idBounds), which set aside the other partitions when
// the statement is planned, and $5 and $6 their least and greatest, which
// set aside the rest of the interval's when it runs (with the literal
// bounds alone, claims and finishes on a new database took half as long
// again).
var claimManySQL = &boundedSQL{sql: `
	UPDATE dispatch_job j SET status = 'IN_PROGRESS', attempt_count = attempt_count + 1,
		last_attempt_at = i.cnow, claimed_until = i.cuntil, updated_at = i.cnow, ` + claimSendLease("i.cuntil") + `
	FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[]) AS i(cid, cnow, cuntil, cdue)
	-- (j.status || '') rather than j.status: see claimMany.
	WHERE j.id = i.cid AND j.id BETWEEN {lo} AND {hi} AND j.id BETWEEN $5 AND $6 AND (j.status || '') IN ('PENDING', 'FAILED') AND j.attempt_count < j.max_retries
		AND (j.expires_at IS NULL OR j.expires_at > i.cnow) AND j.next_attempt_at <= i.cdue
		AND (j.group_id IS NULL OR NOT dispatch_live_predecessor(j.group_id, j.seq))
	RETURNING ` + jobColsIn("j", "{lo}", "{hi}")}

// claimMany is the fast-path statement for a batch of distinct jobs.
//
// It and finishMany find their rows by id and test the status on the row
// found. They write the status test as a concatenation that no index
// serves,
//
//	(j.status || '') IN ('PENDING', 'FAILED')
//
// so the planner cannot choose idx_dispatch_status (or a partial index on
// status) instead of the primary key. With statistics taken while few
// jobs were PENDING and a backlog of PENDING jobs since, a plan through
// idx_dispatch_status scans every PENDING job into a hash join with the
// ids, many times slower than the primary key's look-ups, until the next
// autoanalyze (docs/decisions/plans-made-once.md).
func (s *Store) claimMany(batch []*pending[claimReq, claimRes]) error {
	n := len(batch)
	ids := make([]int64, n)
	nows, untils, dues := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	for i, p := range batch {
		ids[i], nows[i], untils[i], dues[i] = p.req.id, p.req.now, p.req.until, p.req.now.Add(time.Second)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].req.ctx), 30*time.Second)
	defer cancel()
	// The batch's id range sets aside every partition but the ones these
	// jobs are in (idBounds).
	lo, hi := s.idBounds(ids)
	rows, err := s.pool.Query(ctx, withBounds(claimManySQL, lo, hi), ids, nows, untils, dues, slices.Min(ids), slices.Max(ids))
	if err != nil {
		return err
	}
	claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.Job, error) { return scanJob(r) })
	if err != nil {
		return err
	}
	byID := make(map[int64]dispatch.Job, len(claimed))
	for _, j := range claimed {
		byID[j.ID] = j
	}
	for _, p := range batch {
		p.res.job, p.res.claimed = byID[p.req.id]
	}
	return nil
}

// finishManySQL records a batch of attempts and their jobs' new states:
// one row of each array per job, $1 the job ids; {lo} and {hi} are
// literal bounds of the ids (idBounds), $17 and $18 their least and
// greatest (see claimManySQL); $19 whether each attempt's claim was
// deferred (dispatch.Claim.Deferred): such a job may still be PENDING at
// the attempt before, and takes the claim here with the outcome.
var finishManySQL = &boundedSQL{sql: `
	WITH input AS (
		SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::timestamptz[], $5::timestamptz[],
			$6::bigint[], $7::text[], $8::int[], $9::text[], $10::text[], $11::text[], $12::text[],
			$13::timestamptz[], $14::timestamptz[], $15::text[], $16::text[], $19::bool[], $20::bool[])
			AS t(job_id, attempt_number, attempt_id, attempted_at, completed_at, duration_millis,
				attempt_status, response_code, response_body, error_message, status, last_error,
				next_attempt_at, job_completed_at, request_headers, response_headers, claim_deferred, handed)
	), attempt AS (
		INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at,
			duration_millis, status, response_code, response_body, error_message,
			request_headers, response_headers)
		SELECT attempt_id, job_id, attempt_number, attempted_at, completed_at, duration_millis,
			attempt_status, response_code, response_body, error_message,
			request_headers::jsonb, response_headers::jsonb FROM input
		ON CONFLICT (job_id, attempt_number) DO UPDATE SET attempted_at = EXCLUDED.attempted_at,
			completed_at = EXCLUDED.completed_at, duration_millis = EXCLUDED.duration_millis,
			status = EXCLUDED.status, response_code = EXCLUDED.response_code,
			response_body = EXCLUDED.response_body, error_message = EXCLUDED.error_message,
			request_headers = EXCLUDED.request_headers, response_headers = EXCLUDED.response_headers
		-- Only a takeover's placeholder gives way: an attempt recorded by
		-- its own holder is never overwritten.
		WHERE dispatch_attempt.status = 'TIMEOUT' AND dispatch_attempt.error_message = '` + takeoverMessage + `'
	)
	UPDATE dispatch_job j SET status = i.status, last_error = i.last_error,
		next_attempt_at = COALESCE(i.next_attempt_at, j.next_attempt_at),
		completed_at = i.job_completed_at,
		duration_millis = (extract(epoch FROM (i.job_completed_at - j.created_at)) * 1000)::bigint,
		claimed_until = NULL, updated_at = i.completed_at,
		-- A deferred claim's job takes the claim here, with the outcome.
		attempt_count = i.attempt_number, send_lease = NULL,
		-- A job handed over (in process, or offered) whose send lease still
		-- runs is on no queue. A retry goes back to the outbox with its
		-- outcome, which sends it when due from any replica; the give-back
		-- that follows (Unmark) then finds nothing left to do, and a process
		-- dying in between leaves no job waiting for the sweep.
		queued_at = CASE WHEN i.handed AND j.send_lease IS NOT NULL AND i.status NOT IN (` + finishedStatuses + `)
			THEN NULL ELSE j.queued_at END,
		last_attempt_at = CASE WHEN j.attempt_count < i.attempt_number THEN i.attempted_at ELSE j.last_attempt_at END
	FROM input i
	-- (j.status || '') rather than j.status: see claimMany.
	WHERE j.id = i.job_id AND j.id BETWEEN {lo} AND {hi} AND j.id BETWEEN $17 AND $18
		AND ((j.status || '') = 'IN_PROGRESS' AND j.attempt_count = i.attempt_number
			OR i.claim_deferred AND (j.status || '') = 'PENDING' AND j.attempt_count = i.attempt_number - 1)
	RETURNING j.id, j.group_id IS NOT NULL AND i.status IN (` + finishedStatuses + `)`}

// headersJSON is an attempt's headers as the JSON text of a jsonb column
// (nil: none recorded).
func headersJSON(h map[string]string) *string {
	if h == nil {
		return nil
	}
	// Written directly: jsonb keeps its keys in its own order, so they need
	// no sorting, and encoding/json's reflection and sort were a tenth of
	// a delivery's allocations.
	size := 2
	for k, v := range h {
		size += len(k) + len(v) + 6
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	for k, v := range h {
		if len(b) > 1 {
			b = append(b, ',')
		}
		// Invalid UTF-8 comes out as U+FFFD, as encoding/json writes it;
		// the error only reports that.
		b, _ = jsontext.AppendQuote(b, k)
		b = append(b, ':')
		b, _ = jsontext.AppendQuote(b, v)
	}
	s := string(append(b, '}'))
	return &s
}

// qualified prefixes every column of a comma-separated list with alias.
func qualified(alias, columns string) string {
	parts := strings.Split(columns, ",")
	for i, c := range parts {
		parts[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// stepAside takes a blocked job's pointer out of the queue: the job is
// marked unsent with a new pointer generation, and the publisher sends it
// again once no earlier job of its group is live, so it lands behind them.
// A FIFO queue holds a group behind its first message: a pointer that waited
// at the head of its group for an earlier job whose own pointer is behind it
// (re-sent after an outage or a loss) would block that group for good.
func stepAside(ctx context.Context, tx pgx.Tx, id int64) error {
	_, err := tx.Exec(ctx, `UPDATE dispatch_job SET queued_at = NULL, send_lease = NULL, pointer_gen = pointer_gen + 1 WHERE id = $1`, id)
	return err
}

// pointerDueBack notes that the job's pointer is alive and due back when
// the processor asked for it (until), so the sweep does not take a job that
// is only waiting (for its group, its lease or its time) for a lost one and
// send copies. The processor's answer sets the message's visibility, which
// SQS caps at 12 h: that, not a far-future until (a predecessor scheduled
// months ahead), is when a lost message is known to be missing.
//
// A pointer handed over is no message: it comes back only when given back
// by its handle, which finds the job by the mark it was handed under
// (Unmark). That mark is left as it is, or the give-back would find
// nothing and the job would wait for the stale sweep (a replica whose
// clock is behind the creating one's finds a new job not due yet).
func pointerDueBack(ctx context.Context, tx pgx.Tx, id int64, now, until time.Time, handed bool) error {
	if handed {
		return nil
	}
	if latest := now.Add(dispatch.MaxVisibilityDelay); until.After(latest) {
		until = latest
	}
	// A pointer back again early (a grouped job's recheck each minute)
	// finds the row as the last one left it: no write then.
	_, err := tx.Exec(ctx, `UPDATE dispatch_job SET queued_at = $2, send_lease = NULL
		WHERE id = $1 AND queued_at IS NOT NULL AND (queued_at <> $2 OR send_lease IS NOT NULL)`, id, until)
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
		WHERE id = $1 RETURNING `+jobCols("dispatch_job"), id, string(st), now, lastErr))
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
//
// Concurrent calls are committed together (group commit): one statement
// and one transaction for every attempt that arrived while the previous
// batch ran, each caller still returning only once its own row is
// committed.
func (s *Store) FinishAttempt(ctx context.Context, a dispatch.Attempt, o dispatch.Transition) (bool, error) {
	return s.finishes.do(finishReq{ctx: ctx, a: a, o: o, id: s.NewID()})
}

type finishReq struct {
	ctx context.Context
	a   dispatch.Attempt
	o   dispatch.Transition
	id  int64 // the attempt row's id
}

// finishBatch writes a batch of attempts and transitions in one statement.
// Should it fail, each is tried alone, so one bad row cannot fail the rest.
func (s *Store) finishBatch(batch []*pending[finishReq, bool]) {
	// A job's attempt may appear once per statement (ON CONFLICT cannot
	// touch a row twice): repeats go alone.
	seen := make(map[[2]int64]bool, len(batch))
	var together, alone []*pending[finishReq, bool]
	for _, p := range batch {
		k := [2]int64{p.req.a.JobID, int64(p.req.a.AttemptNumber)}
		if seen[k] {
			alone = append(alone, p)
			continue
		}
		seen[k] = true
		together = append(together, p)
	}
	if len(together) == 1 {
		alone = append(alone, together[0])
	} else if err := s.finishMany(together); err != nil {
		alone = append(alone, together...)
	}
	for _, p := range alone {
		if err := s.finishMany([]*pending[finishReq, bool]{p}); err != nil {
			p.err = fmt.Errorf("store: finish attempt %d of job %d: %w", p.req.a.AttemptNumber, p.req.a.JobID, err)
		}
	}
}

// finishMany is the statement: the attempt rows (replacing stale-claim
// placeholders) and the jobs' transitions, in one implicit transaction. It
// sets each item's result: whether its job took the new state.
func (s *Store) finishMany(batch []*pending[finishReq, bool]) error {
	n := len(batch)
	var (
		jobIDs, attemptIDs, durations       = make([]int64, n), make([]int64, n), make([]int64, n)
		numbers                             = make([]int32, n)
		codes                               = make([]*int32, n)
		statuses, attemptStatuses           = make([]string, n), make([]string, n)
		lastErrors, bodies, errMsgs         = make([]*string, n), make([]*string, n), make([]*string, n)
		nextAts, attemptedAts, completedAts = make([]*time.Time, n), make([]time.Time, n), make([]time.Time, n)
		jobCompletedAts                     = make([]*time.Time, n)
		reqHeaders, respHeaders             = make([]*string, n), make([]*string, n)
		deferred, handed                    = make([]bool, n), make([]bool, n)
	)
	for i, p := range batch {
		a, o := p.req.a, p.req.o
		jobIDs[i], attemptIDs[i], numbers[i] = a.JobID, p.req.id, int32(a.AttemptNumber)
		durations[i] = a.CompletedAt.Sub(a.AttemptedAt).Milliseconds()
		if a.ResponseCode != 0 {
			c := int32(a.ResponseCode)
			codes[i] = &c
		}
		statuses[i], attemptStatuses[i] = string(o.Status), string(a.Status)
		lastErrors[i], bodies[i], errMsgs[i] = nullStr(o.LastError), nullStr(a.ResponseBody), nullStr(a.ErrorMessage)
		if !o.NextAttemptAt.IsZero() {
			t := o.NextAttemptAt
			nextAts[i] = &t
		}
		attemptedAts[i], completedAts[i] = a.AttemptedAt, a.CompletedAt
		if o.Status.Terminal() {
			t := a.CompletedAt
			jobCompletedAts[i] = &t
		}
		reqHeaders[i], respHeaders[i] = headersJSON(a.RequestHeaders), headersJSON(a.ResponseHeaders)
		deferred[i], handed[i] = o.ClaimDeferred, o.Handed
	}
	// The leader's context carries the batch, without its cancellation:
	// the others are waiting on this statement too.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].req.ctx), 30*time.Second)
	defer cancel()
	lo, hi := s.idBounds(jobIDs)
	rows, err := s.pool.Query(ctx, withBounds(finishManySQL, lo, hi),
		jobIDs, numbers, attemptIDs, attemptedAts, completedAts, durations, attemptStatuses, codes,
		bodies, errMsgs, statuses, lastErrors, nextAts, jobCompletedAts,
		reqHeaders, respHeaders, slices.Min(jobIDs), slices.Max(jobIDs), deferred, handed)
	if err != nil {
		return err
	}
	var applied []int64
	advanced := false // a grouped job finished: its group's next job is due
	var id int64
	var moved bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &moved}, func() error {
		applied = append(applied, id)
		advanced = advanced || moved
		return nil
	}); err != nil {
		return err
	}
	for _, p := range batch {
		p.res = slices.Contains(applied, p.req.a.JobID)
		if p.req.o.ClaimDeferred {
			s.fresh.release(p.req.a.JobID)
		}
	}
	if advanced {
		s.notify()
	}
	return nil
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
