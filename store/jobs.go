package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dispatchhq/dispatch"
)

const jobColumns = `id, external_id, created_at, updated_at, source, type, group_id, target_url,
	protocol, headers, payload, payload_content_type, credentials_id, status, max_retries,
	retry_strategy, scheduled_for, expires_at, attempt_count, last_attempt_at, completed_at,
	duration_millis, last_error, idempotency_key, metadata, replay_of, queued_at,
	next_attempt_at, claimed_until, pointer_gen, event_id, subscription_id`

func scanJob(row pgx.Row) (dispatch.Job, error) {
	var (
		j                                     dispatch.Job
		externalID, groupID, lastErr, idemKey *string
		credID, replayOf, eventID, subID      *int64
		nextAt                                time.Time
	)
	err := row.Scan(&j.ID, &externalID, &j.CreatedAt, &j.UpdatedAt, &j.Source, &j.Type, &groupID,
		&j.TargetURL, &j.Protocol, &j.Headers, &j.Payload, &j.PayloadContentType, &credID,
		&j.Status, &j.MaxRetries, &j.RetryStrategy, &j.ScheduledFor, &j.ExpiresAt, &j.AttemptCount,
		&j.LastAttemptAt, &j.CompletedAt, &j.DurationMillis, &lastErr, &idemKey, &j.Metadata,
		&replayOf, &j.QueuedAt, &nextAt, &j.ClaimedUntil, &j.PointerGen, &eventID, &subID)
	if err != nil {
		return j, err
	}
	j.ExternalID, j.GroupID, j.LastError, j.IdempotencyKey = deref(externalID), deref(groupID), deref(lastErr), deref(idemKey)
	j.CredentialsID, j.ReplayOf = derefInt(credID), derefInt(replayOf)
	j.EventID, j.SubscriptionID = derefInt(eventID), derefInt(subID)
	j.NextAttemptAt = &nextAt
	return j, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}

func nullStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullInt(n int64) *int64 {
	if n == 0 {
		return nil
	}
	return &n
}

// CreateJob stores a new PENDING job and returns it with created=true, or,
// when its idempotency key is already taken, the existing job with
// created=false and nothing written. One INSERT … ON CONFLICT statement is
// atomic by itself, so no explicit transaction is needed.
func (s *Store) CreateJob(ctx context.Context, j *dispatch.Job) (dispatch.Job, bool, error) {
	return s.insertJob(ctx, s.pool, j)
}

// CreateJobs stores a batch in one transaction: all valid jobs or none.
// Nil entries (items rejected earlier) are skipped, so that results and
// error messages keep the request's indices.
func (s *Store) CreateJobs(ctx context.Context, jobs []*dispatch.Job) ([]dispatch.Job, []bool, error) {
	out := make([]dispatch.Job, len(jobs))
	created := make([]bool, len(jobs))
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		for i, j := range jobs {
			if j == nil {
				continue
			}
			var err error
			if out[i], created[i], err = s.insertJob(ctx, tx, j); err != nil {
				var de *dispatch.Error
				if errors.As(err, &de) {
					de.Message = fmt.Sprintf("jobs[%d]: %s", i, de.Message)
				}
				return err
			}
		}
		return nil
	})
	return out, created, err
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) insertJob(ctx context.Context, tx querier, j *dispatch.Job) (dispatch.Job, bool, error) {
	if j.CredentialsID != 0 {
		// Through the credentials cache: the common case costs no query.
		if _, err := s.GetCredentials(ctx, j.CredentialsID); err != nil {
			if dispatch.ErrorCode(err) == dispatch.ENotFound {
				var p dispatch.Problems
				p.Add("credentialsId", "credentials %d do not exist", j.CredentialsID)
				return dispatch.Job{}, false, p.Err()
			}
			return dispatch.Job{}, false, fmt.Errorf("store: check credentials: %w", err)
		}
	}
	for try := 0; ; try++ {
		out, created, err := s.insertJobOnce(ctx, tx, j)
		var pgErr *pgconn.PgError
		if try < 3 && errors.As(err, &pgErr) && pgErr.ConstraintName == "dispatch_job_pkey" {
			// Two processes share a snowflake node id (DISPATCH_NODE_ID
			// unset or duplicated): take a fresh id rather than fail.
			continue
		}
		return out, created, err
	}
}

func (s *Store) insertJobOnce(ctx context.Context, tx querier, j *dispatch.Job) (dispatch.Job, bool, error) {
	now := time.Now().UTC()
	id := s.NewID()
	next := now
	if j.ScheduledFor != nil && j.ScheduledFor.After(now) {
		next = *j.ScheduledFor
	}
	headers, metadata := j.Headers, j.Metadata
	if headers == nil {
		headers = map[string]string{}
	}
	if metadata == nil {
		metadata = map[string]string{}
	}
	row := tx.QueryRow(ctx, `
		INSERT INTO dispatch_job (id, external_id, created_at, updated_at, source, type, group_id,
			target_url, protocol, headers, payload, payload_content_type, credentials_id, status,
			max_retries, retry_strategy, scheduled_for, expires_at, idempotency_key, metadata,
			replay_of, next_attempt_at, event_id, subscription_id)
		VALUES ($1,$2,$3,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,'PENDING',$13,$14,$15,$16,$17,$18,$19,$20,$21,$22)
		ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
		RETURNING `+jobColumns,
		id, nullStr(j.ExternalID), now, j.Source, j.Type, nullStr(j.GroupID), j.TargetURL, j.Protocol,
		headers, j.Payload, j.PayloadContentType, nullInt(j.CredentialsID), j.MaxRetries,
		string(j.RetryStrategy), j.ScheduledFor, j.ExpiresAt, nullStr(j.IdempotencyKey), metadata,
		nullInt(j.ReplayOf), next, nullInt(j.EventID), nullInt(j.SubscriptionID))
	out, err := scanJob(row)
	if err == nil {
		return out, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.ConstraintName == "dispatch_job_pkey" {
			return out, false, err // insertJob retries with a new id
		}
		return out, false, fmt.Errorf("store: insert job: %w", interpret(err))
	}
	// The idempotency key is taken: answer with the job that holds it.
	out, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM dispatch_job WHERE idempotency_key = $1`, j.IdempotencyKey))
	if err != nil {
		return out, false, fmt.Errorf("store: job by idempotency key: %w", err)
	}
	return out, false, nil
}

// GetJob returns a job by id.
func (s *Store) GetJob(ctx context.Context, id int64) (dispatch.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM dispatch_job WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return j, notFound("job", id)
	}
	if err != nil {
		return j, fmt.Errorf("store: get job %d: %w", id, err)
	}
	return j, nil
}

func filterWhere(f dispatch.JobFilter) (string, []any) {
	var (
		conds []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if len(f.Statuses) > 0 {
		ss := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			ss[i] = string(st)
		}
		add("status = ANY(?)", ss)
	}
	if f.Source != "" {
		add("source = ?", f.Source)
	}
	if f.Type != "" {
		add("type = ?", f.Type)
	}
	if f.GroupID != "" {
		add("group_id = ?", f.GroupID)
	}
	if f.CreatedAfter != nil {
		add("created_at >= ?", *f.CreatedAfter)
	}
	if f.CreatedBefore != nil {
		add("created_at < ?", *f.CreatedBefore)
	}
	if len(f.Metadata) > 0 {
		add("metadata @> ?", f.Metadata)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// SearchJobs returns one page of matching jobs, newest first, and the total.
func (s *Store) SearchJobs(ctx context.Context, f dispatch.JobFilter, page, size int) ([]dispatch.Job, int, error) {
	where, args := filterWhere(f)
	var total int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dispatch_job`+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("store: count jobs: %w", err)
	}
	args = append(args, size, page*size)
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM dispatch_job`+where+
		fmt.Sprintf(` ORDER BY id DESC LIMIT $%d OFFSET $%d`, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("store: search jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.Job, error) { return scanJob(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("store: search jobs: %w", err)
	}
	return jobs, total, nil
}

// ListAttempts returns a job's attempts, oldest first.
func (s *Store) ListAttempts(ctx context.Context, jobID int64) ([]dispatch.Attempt, error) {
	if _, err := s.GetJob(ctx, jobID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, job_id, attempt_number, attempted_at, completed_at, duration_millis, status,
			COALESCE(response_code, 0), COALESCE(response_body, ''), COALESCE(error_message, '')
		FROM dispatch_attempt WHERE job_id = $1 ORDER BY attempt_number`, jobID)
	if err != nil {
		return nil, fmt.Errorf("store: list attempts: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.Attempt, error) {
		var a dispatch.Attempt
		err := r.Scan(&a.ID, &a.JobID, &a.AttemptNumber, &a.AttemptedAt, &a.CompletedAt,
			&a.DurationMillis, &a.Status, &a.ResponseCode, &a.ResponseBody, &a.ErrorMessage)
		return a, err
	})
}

// CancelJob moves a PENDING or FAILED job to CANCELLED. A job in progress
// or already terminal is a conflict.
func (s *Store) CancelJob(ctx context.Context, id int64) (dispatch.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `
		UPDATE dispatch_job SET status = 'CANCELLED', updated_at = now(), completed_at = now(),
			last_error = 'cancelled', claimed_until = NULL
		WHERE id = $1 AND status IN ('PENDING', 'FAILED')
		RETURNING `+jobColumns, id))
	if err == nil {
		return j, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return j, fmt.Errorf("store: cancel job %d: %w", id, err)
	}
	cur, err := s.GetJob(ctx, id)
	if err != nil {
		return cur, err
	}
	return cur, dispatch.Errorf(dispatch.EConflict, "job %d is %s and cannot be cancelled", id, cur.Status)
}

// ReplayJob creates a new PENDING job from a terminal one (replayOf set).
func (s *Store) ReplayJob(ctx context.Context, id int64) (dispatch.Job, error) {
	var out dispatch.Job
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.replay(ctx, tx, id)
		return err
	})
	return out, err
}

func (s *Store) replay(ctx context.Context, tx pgx.Tx, id int64) (dispatch.Job, error) {
	orig, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM dispatch_job WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return orig, notFound("job", id)
	}
	if err != nil {
		return orig, fmt.Errorf("store: replay job %d: %w", id, err)
	}
	if !orig.Status.Terminal() {
		return orig, dispatch.Errorf(dispatch.EConflict, "job %d is %s; only finished jobs can be replayed", id, orig.Status)
	}
	n := orig
	n.ReplayOf, n.IdempotencyKey, n.ScheduledFor = orig.ID, "", nil
	if n.ExpiresAt != nil && !n.ExpiresAt.After(time.Now()) {
		n.ExpiresAt = nil // an expired job's replay is meant to be delivered
	}
	out, _, err := s.insertJob(ctx, tx, &n)
	return out, err
}

// ReplayJobs replays up to limit terminal jobs matching f (dead-letter
// redrive), oldest first, in one transaction. It returns the new jobs, and
// the matching jobs it cannot replay (their credentials were deleted), each
// with its reason: those are reported, not counted against limit, and never
// stop the rest.
//
// A job replayed before, by an earlier or a concurrent redrive, is not
// replayed again. The originals are locked (FOR UPDATE SKIP LOCKED) for the
// whole transaction, and whether they were replayed is checked again once
// they are locked: under READ COMMITTED the first check runs on a snapshot
// that may predate a concurrent redrive's commit. So two overlapping
// redrives split the dead letters between them; the second answers only
// with what it replayed itself, possibly nothing.
func (s *Store) ReplayJobs(ctx context.Context, f dispatch.JobFilter, limit int) (dispatch.ReplayResult, error) {
	where, args := replayableWhere(f)
	const credsGone = "credentials_id IS NOT NULL AND NOT EXISTS (" +
		"SELECT 1 FROM dispatch_credentials c WHERE c.id = dispatch_job.credentials_id)"
	var out dispatch.ReplayResult
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		out = dispatch.ReplayResult{}
		rows, err := tx.Query(ctx, `SELECT id, credentials_id FROM dispatch_job`+where+` AND `+credsGone+
			fmt.Sprintf(` ORDER BY id LIMIT %d`, limit), args...)
		if err != nil {
			return err
		}
		type orphan struct{ id, creds int64 }
		orphans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (orphan, error) {
			var o orphan
			return o, r.Scan(&o.id, &o.creds)
		})
		if err != nil {
			return err
		}
		for _, o := range orphans {
			out.Failed = append(out.Failed, dispatch.ReplayFailure{JobID: o.id,
				Err: dispatch.Errorf(dispatch.EUnprocessable, "job %d cannot be replayed: its credentials %d were deleted", o.id, o.creds)})
		}
		rows, err = tx.Query(ctx, `SELECT id FROM dispatch_job`+where+` AND NOT (`+credsGone+`)`+
			fmt.Sprintf(` ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED`, limit), args...)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(locked) == 0 {
			return err
		}
		// A new statement, so a new snapshot: it sees every redrive that
		// held one of these locks before us, since it has committed.
		rows, err = tx.Query(ctx, `
			SELECT id FROM dispatch_job o WHERE id = ANY($1)
				AND NOT EXISTS (SELECT 1 FROM dispatch_job r WHERE r.replay_of = o.id)
			ORDER BY id`, locked)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		for _, id := range ids {
			j, err := s.replay(ctx, tx, id)
			if dispatch.ErrorCode(err) == dispatch.EInvalid {
				// Its credentials went away since the query above: the
				// check runs before any statement, so the transaction
				// is intact and the rest goes on.
				out.Failed = append(out.Failed, dispatch.ReplayFailure{JobID: id,
					Err: dispatch.Errorf(dispatch.EUnprocessable, "job %d cannot be replayed: its credentials no longer exist", id)})
				continue
			}
			if err != nil {
				return err
			}
			out.Jobs = append(out.Jobs, j)
		}
		return nil
	})
	if err != nil {
		return dispatch.ReplayResult{}, fmt.Errorf("store: bulk replay: %w", err)
	}
	return out, nil
}

// replayableWhere selects the finished jobs matching f not replayed before:
// running the same redrive twice does not deliver the same dead letters twice.
func replayableWhere(f dispatch.JobFilter) (string, []any) {
	where, args := filterWhere(f)
	terminal := "status IN ('COMPLETED','ERROR','CANCELLED','EXPIRED') AND NOT EXISTS (" +
		"SELECT 1 FROM dispatch_job r WHERE r.replay_of = dispatch_job.id)"
	if where == "" {
		return " WHERE " + terminal, args
	}
	return where + " AND " + terminal, args
}

// CountReplayable counts the jobs a ReplayJobs with f would replay (without
// its limit): the dry run of a redrive.
func (s *Store) CountReplayable(ctx context.Context, f dispatch.JobFilter) (int, error) {
	where, args := replayableWhere(f)
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dispatch_job`+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count replayable: %w", err)
	}
	return n, nil
}
