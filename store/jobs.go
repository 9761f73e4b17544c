package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
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
	next_attempt_at, claimed_until, pointer_gen, event_id, subscription_id, seq, queue_url, pool_code`

// jobCols is jobColumns read through alias (a table name or alias of
// dispatch_job), with the payload taken from dispatch_payload: a job's
// payload is written there once, so that the updates of its row do not
// copy it. Jobs stored before that keep it in their row.
func jobCols(alias string) string { return jobColsIn(alias, "", "") }

// jobColsIn is jobCols for a statement whose jobs all have ids between the
// parameters lo and hi: the payload's look-up then reads only the payload
// partitions of those ids (PostgreSQL prunes the others when the statement
// starts, not row by row).
func jobColsIn(alias, lo, hi string) string {
	cols := qualified(alias, jobColumns)
	within := ""
	if lo != "" {
		within = " AND p.job_id BETWEEN " + lo + " AND " + hi
	}
	return strings.Replace(cols, alias+".payload,",
		alias+".payload, (SELECT p.body FROM dispatch_payload p WHERE p.job_id = "+alias+".id"+within+"),", 1)
}

func scanJob(row pgx.Row) (dispatch.Job, error) {
	var (
		j                                     dispatch.Job
		externalID, groupID, lastErr, idemKey *string
		credID, replayOf, eventID, subID, seq *int64
		nextAt                                time.Time
		inRow                                 *string // a payload stored before dispatch_payload
		body                                  []byte
		queueURL, poolCode                    *string
	)
	err := row.Scan(&j.ID, &externalID, &j.CreatedAt, &j.UpdatedAt, &j.Source, &j.Type, &groupID,
		&j.TargetURL, &j.Protocol, &j.Headers, &inRow, &body, &j.PayloadContentType, &credID,
		&j.Status, &j.MaxRetries, &j.RetryStrategy, &j.ScheduledFor, &j.ExpiresAt, &j.AttemptCount,
		&j.LastAttemptAt, &j.CompletedAt, &j.DurationMillis, &lastErr, &idemKey, &j.Metadata,
		&replayOf, &j.QueuedAt, &nextAt, &j.ClaimedUntil, &j.PointerGen, &eventID, &subID, &seq, &queueURL, &poolCode)
	if err != nil {
		return j, err
	}
	if inRow != nil {
		j.Payload = *inRow
	} else if j.Payload, err = openPayload(body); err != nil {
		return j, fmt.Errorf("job %d: %w", j.ID, err)
	}
	j.ExternalID, j.GroupID, j.LastError, j.IdempotencyKey = deref(externalID), deref(groupID), deref(lastErr), deref(idemKey)
	j.CredentialsID, j.ReplayOf = derefInt(credID), derefInt(replayOf)
	j.EventID, j.SubscriptionID, j.Seq = derefInt(eventID), derefInt(subID), derefInt(seq)
	j.QueueURL, j.PoolCode = deref(queueURL), deref(poolCode)
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

// storedJob is the row insertJobsOnce wrote for in: in's fields with the
// id, times and state the insert gave it, times at PostgreSQL's microsecond
// precision, so that it reads as GetJob would return it.
func storedJob(in *dispatch.Job, id, seq int64, now, next time.Time, queuedAt *time.Time) dispatch.Job {
	j := *in
	now = pgTime(now)
	next = pgTime(next)
	j.ID, j.CreatedAt, j.UpdatedAt, j.Status = id, now, now, dispatch.StatusPending
	j.ScheduledFor, j.ExpiresAt = pgTimePtr(in.ScheduledFor), pgTimePtr(in.ExpiresAt)
	j.AttemptCount, j.LastAttemptAt, j.CompletedAt, j.DurationMillis, j.LastError = 0, nil, nil, nil, ""
	j.QueuedAt, j.NextAttemptAt, j.ClaimedUntil, j.PointerGen, j.Seq = pgTimePtr(queuedAt), &next, nil, 0, seq
	j.Headers, j.Metadata = orEmpty(in.Headers), orEmpty(in.Metadata) // jsonb '{}' reads back as an empty map
	return j
}

// pgTime is t as a timestamptz column returns it: microseconds, UTC.
func pgTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

func pgTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := pgTime(*t)
	return &v
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// CreateJob stores a new PENDING job and returns it with created=true, or,
// when its idempotency key is already taken, the existing job with
// created=false and nothing written.
//
// Creates that arrive together are written together (group commit): one
// INSERT … SELECT FROM unnest(…) statement, one transaction and one WAL
// flush for all of them, each caller returning only once its own row is
// committed. Should the server refuse that statement, each job is tried
// alone, so one bad row cannot fail the others; a create is stored once or
// not at all.
func (s *Store) CreateJob(ctx context.Context, j *dispatch.Job) (dispatch.Job, bool, error) {
	if err := s.checkCredentials(ctx, j.CredentialsID, j.TargetURL); err != nil {
		return dispatch.Job{}, false, err
	}
	r, err := s.creates.do(createReq{ctx: ctx, job: j})
	return r.job, r.created, err
}

type createReq struct {
	ctx context.Context
	job *dispatch.Job
}

type createRes struct {
	job     dispatch.Job
	created bool
}

func (s *Store) createBatch(batch []*pending[createReq, createRes]) {
	jobs := make([]*dispatch.Job, len(batch))
	for i, p := range batch {
		jobs[i] = p.req.job
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].req.ctx), 30*time.Second)
	defer cancel()
	out, created, hand, err := s.insertAndHand(ctx, s.pool, jobs)
	var after *afterInsertError
	hand(err == nil || errors.As(err, &after))
	if err == nil || errors.As(err, &after) {
		// Stored: each job that was created has its answer. A job whose
		// key another job holds was not written; should the look-up of
		// that holder have failed, it gets the error (its retry finds
		// the holder).
		for i, p := range batch {
			if created[i] || err == nil {
				p.res = createRes{job: out[i], created: created[i]}
			} else {
				p.err = err
			}
		}
		return
	}
	if len(batch) == 1 || !nothingWritten(err) {
		// The statement may have committed (the connection was lost
		// after sending it): trying each again could store them twice.
		for _, p := range batch {
			p.err = err
		}
		return
	}
	// The server refused the statement, so nothing was written: try each
	// alone, so that one bad row cannot fail the others.
	for _, p := range batch {
		out, created, hand, err := s.insertAndHand(p.req.ctx, s.pool, []*dispatch.Job{p.req.job})
		hand(err == nil || errors.As(err, &after))
		if err != nil && !errors.As(err, &after) {
			p.err = err
			continue
		}
		if !created[0] && err != nil {
			p.err = err
			continue
		}
		p.res = createRes{job: out[0], created: created[0]}
	}
}

// afterInsertError is a failure after a create's insert committed: the
// look-up of the jobs holding idempotency keys the insert found taken. The
// jobs it created are stored; they must not be written again.
type afterInsertError struct{ err error }

func (e *afterInsertError) Error() string { return e.err.Error() }
func (e *afterInsertError) Unwrap() error { return e.err }

// nothingWritten reports whether err proves that its statement wrote
// nothing: the server refused it (a statement outside a transaction is
// rolled back whole), or it failed before it was sent.
func nothingWritten(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
}

// CreateJobs stores a batch in one transaction (one statement when no job
// has an idempotency key): all valid jobs or none.
// Nil entries (items rejected earlier) are skipped, so that results and
// error messages keep the request's indices.
func (s *Store) CreateJobs(ctx context.Context, jobs []*dispatch.Job) ([]dispatch.Job, []bool, error) {
	var valid []*dispatch.Job
	var index []int
	var refused *dispatch.Error // every item the credentials refuse, named
	nRefused := 0
	for i, j := range jobs {
		if j == nil {
			continue
		}
		if err := s.checkCredentials(ctx, j.CredentialsID, j.TargetURL); err != nil {
			var de *dispatch.Error
			if !errors.As(err, &de) {
				return nil, nil, err
			}
			refused = refuseItem(refused, i, de)
			nRefused++
			continue
		}
		valid = append(valid, j)
		index = append(index, i)
	}
	if refused != nil {
		if nRefused > 1 {
			refused.Message += fmt.Sprintf(" (and %d more items: see details)", nRefused-1)
		}
		refused.Details = dispatch.Problems(refused.Details).Capped()
		return nil, nil, refused
	}
	if len(valid) == 0 {
		return make([]dispatch.Job, len(jobs)), make([]bool, len(jobs)), nil
	}
	var (
		got  []dispatch.Job
		made []bool
		err  error
	)
	if slices.ContainsFunc(valid, func(j *dispatch.Job) bool { return j.IdempotencyKey != "" }) {
		got, made, err = s.createInTx(ctx, valid)
	} else {
		// One statement is all or nothing by itself, and with no
		// idempotency key nothing follows it: no BEGIN and COMMIT round
		// trips (insertJobs retries a clash of ids or a missing partition).
		var hand func(bool)
		got, made, hand, err = s.insertAndHand(ctx, s.pool, valid)
		hand(err == nil)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(valid) == len(jobs) {
		return got, made, nil // every item stored, in order: no copy
	}
	out := make([]dispatch.Job, len(jobs))
	created := make([]bool, len(jobs))
	for k, i := range index {
		out[i], created[i] = got[k], made[k]
	}
	return out, created, nil
}

// refuseItem adds item i's refusal de to the batch's refusal so far (nil:
// none yet): the first refusal's code and message, prefixed with jobs[i],
// and every item's details, each field prefixed (jobs[i].credentialsId).
func refuseItem(so *dispatch.Error, i int, de *dispatch.Error) *dispatch.Error {
	if so == nil {
		so = &dispatch.Error{Code: de.Code, Message: fmt.Sprintf("jobs[%d]: %s", i, de.Message)}
	}
	(*dispatch.Problems)(&so.Details).AddItem(i, de)
	return so
}

// createInTx stores jobs in one transaction, so that a failure after the
// insert (the look-up of keys other jobs hold) takes the inserted jobs back
// with it: the caller's retry cannot store them twice.
func (s *Store) createInTx(ctx context.Context, jobs []*dispatch.Job) ([]dispatch.Job, []bool, error) {
	var (
		got  []dispatch.Job
		made []bool
		hand = func(bool) {}
		err  error
	)
	for try := 0; try < 3; try++ {
		err = s.withTx(ctx, func(tx pgx.Tx) error {
			var err error
			got, made, hand, err = s.insertAndHand(ctx, tx, jobs)
			return err
		})
		hand(err == nil)
		if noPartition(err) && try < 2 {
			if err = s.makeRoom(ctx); err == nil {
				continue
			}
		}
		if !idClash(err) {
			break
		}
	}
	if noPartition(err) {
		// Ids past every partition makeRoom makes (from this machine's
		// clock): the ids' clock is ahead of it.
		return nil, nil, fmt.Errorf("store: insert jobs: the new ids are past every partition, though partitions were made for now: is this clock behind the ids' (DISPATCH_NODE_ID, clock steps)? %w", err)
	}
	return got, made, err
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// insertAndHand inserts jobs in a statement of its own (q is the pool) or
// in a transaction and, when a Handoff has room for them, marks the ones
// due now as queued in the same statement. The caller calls hand once the
// insert has committed, or not (hand(false)): it hands their pointers over,
// or only gives the room back.
//
// Jobs with a groupId are not handed over: hand-offs go out in commit
// order, and two creates running side by side can commit in the opposite
// order of their places in the group. A group's later job would then reach
// the queue first, be refused and step aside, costing an outbox pass per
// job. The outbox query sends them in group order instead.
func (s *Store) insertAndHand(ctx context.Context, q querier, jobs []*dispatch.Job) (out []dispatch.Job, created []bool, hand func(committed bool), err error) {
	handoff := s.handoff != nil && s.handoff.Reserve(len(jobs))
	out, created, err = s.insertJobs(ctx, q, jobs, handoff)
	var us []dispatch.Unsent
	unsent := false // a created job no hand-off took: the outbox sends it
	for i, j := range out {
		switch {
		case !created[i]:
		case j.QueuedAt != nil:
			us = append(us, dispatch.Unsent{ID: j.ID, GroupID: j.GroupID, Seq: j.Seq, Mark: *j.QueuedAt, TraceContext: j.TraceContext,
				QueueURL: j.QueueURL, PoolCode: j.PoolCode})
		default:
			unsent = true
		}
	}
	return out, created, func(committed bool) {
		if handoff {
			if !committed {
				us = nil
			}
			// Remembered before the hand-off, which may bring the
			// pointer back at once.
			if len(us) > 0 {
				handed := make([]dispatch.Job, 0, len(us))
				for i, j := range out {
					if created[i] && j.QueuedAt != nil {
						handed = append(handed, j)
					}
				}
				s.fresh.put(handed, time.Now())
			}
			s.handoff.Hand(us, len(jobs))
		}
		if committed && unsent {
			s.notify()
		}
	}, err
}

// insertJobs stores jobs with one statement and returns each stored job
// (or, where its idempotency key was taken, by an earlier job or by an
// earlier one of these, the job holding the key) in the order given.
// With markQueued, the jobs due now are stored as queued already: their
// pointers are handed to the publisher by the caller.
func (s *Store) insertJobs(ctx context.Context, q querier, jobs []*dispatch.Job, markQueued bool) ([]dispatch.Job, []bool, error) {
	_, inTx := q.(pgx.Tx)
	for try := 0; ; try++ {
		out, created, err := s.insertJobsOnce(ctx, q, jobs, markQueued)
		if try < 3 && !inTx && idClash(err) {
			// Two processes share a snowflake node id (DISPATCH_NODE_ID
			// unset or duplicated): take fresh ids rather than fail. In a
			// transaction, which the error has ended, the caller retries.
			continue
		}
		if try < 3 && !inTx && noPartition(err) {
			if err := s.makeRoom(ctx); err != nil {
				return nil, nil, fmt.Errorf("store: insert jobs: %w", err)
			}
			continue
		}
		if !inTx && noPartition(err) {
			return nil, nil, fmt.Errorf("store: insert jobs: the new ids are past every partition, though partitions were made for now: is this clock behind the ids' (DISPATCH_NODE_ID, clock steps)? %w", err)
		}
		return out, created, err
	}
}

// idClash reports whether err is an insert's clash on a job id: another
// process generated the same id (they share a snowflake node id).
func idClash(err error) bool { return keyClash(err, "dispatch_job") }

// keyClash reports whether err is a clash on the primary key of table (or
// of one of its partitions, whose key constraints are named after them).
func keyClash(err error, table string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" &&
		strings.HasPrefix(pgErr.ConstraintName, table+"_") && strings.HasSuffix(pgErr.ConstraintName, "_pkey")
}

// insertJobsSource is the new jobs' columns, the parameters of
// insertJobsFrom's row source ($1, $23 and $24 are the statement's own).
var insertJobsSource = []string{
	"$2::bigint", "$3::text", "$4::text", "$5::text", "$6::text", "$7::text",
	"$8::text", "$9::text", "$10::bytea", "$11::text", "$12::bigint", "$13::int",
	"$14::text", "$15::timestamptz", "$16::timestamptz", "$17::text", "$18::text", "$19::bigint",
	"$20::timestamptz", "$21::bigint", "$22::bigint", "$25::text", "$26::text", "$27::text",
}

// insertJobsSQL inserts several jobs from arrays, one a column; insertJobSQL
// inserts one from a row of scalars. A create at a low rate stores one job,
// and binding and unpacking two dozen one-element arrays costs both sides
// more than the scalars (docs/benchmarks.md, "One job, one row").
var (
	insertJobsSQL = fmt.Sprintf(insertJobsFrom, "unnest("+strings.Join(insertJobsSource, "[], ")+"[])")
	insertJobSQL  = fmt.Sprintf(insertJobsFrom, "(VALUES ("+strings.Join(insertJobsSource, ", ")+"))")
)

// insertJobsFrom stores new jobs from a row source (%s), their payloads,
// and the idempotency keys not held yet (a job whose key another holds is
// not inserted); it returns each stored job's id, queued_at and seq.
//
// A job's place in its group (seq) is drawn as it is inserted, but the
// group is delivered in that order only if the inserts commit in it too: a
// create that drew a later place and committed first could have its job
// delivered, and fail, while the earlier one, committed later, went ahead
// of its retry. So the statement first takes a transaction lock on each of
// its groups (lockGroups), in order, and creates of one group are written
// one after another.
var insertJobsFrom = `
		WITH i AS (
			SELECT * FROM %s
			AS i(id, external_id, source, type, group_id, target_url, protocol, headers, payload,
				payload_content_type, credentials_id, max_retries, retry_strategy, scheduled_for, expires_at,
				idempotency_key, metadata, replay_of, next_attempt_at, event_id, subscription_id, trace_context,
				queue_url, pool_code)
		), g AS (
			` + lockGroups("i") + `
		), k AS (
			INSERT INTO dispatch_job_key (idempotency_key, job_id)
			SELECT idempotency_key, id FROM i WHERE idempotency_key IS NOT NULL
			ON CONFLICT DO NOTHING
			RETURNING job_id
		), j AS (
			INSERT INTO dispatch_job (id, external_id, created_at, updated_at, source, type, group_id,
				target_url, protocol, headers, payload_content_type, credentials_id, status,
				max_retries, retry_strategy, scheduled_for, expires_at, idempotency_key, metadata,
				replay_of, next_attempt_at, event_id, subscription_id, queued_at, send_lease, trace_context,
				queue_url, pool_code)
			SELECT id, external_id, $1, $1, source, type, group_id,
				target_url, protocol, headers::jsonb, payload_content_type, credentials_id, 'PENDING',
				max_retries, retry_strategy, scheduled_for, expires_at, idempotency_key, metadata::jsonb,
				replay_of, next_attempt_at, event_id, subscription_id,
				CASE WHEN $23::boolean AND next_attempt_at <= $1 AND group_id IS NULL THEN $1::timestamptz END,
				CASE WHEN $23::boolean AND next_attempt_at <= $1 AND group_id IS NULL THEN $24::timestamptz END,
			trace_context, queue_url, pool_code
			FROM i WHERE (idempotency_key IS NULL OR id IN (SELECT job_id FROM k)) AND (SELECT n FROM g) >= 0
			RETURNING id, queued_at, seq
		), p AS (
			-- the payload, written once (see jobCols)
			INSERT INTO dispatch_payload (job_id, body) SELECT i.id, i.payload FROM i JOIN j ON j.id = i.id
		)
		SELECT id, queued_at, seq FROM j`

// lockGroups is a query that takes the transaction lock of each group_id
// of the rows of from, in the groups' order (so two statements cannot wait
// on each other), and counts them (n); an insert of jobs waits for it
// before it draws their places.
func lockGroups(from string) string {
	return `SELECT count(pg_advisory_xact_lock(` + groupLockSpace + `, hashtext(group_id))) AS n
			FROM (SELECT DISTINCT group_id FROM ` + from + ` WHERE group_id IS NOT NULL ORDER BY group_id) groups`
}

// groupLockSpace is the first key of the groups' advisory locks ("grup").
const groupLockSpace = "1735554416"

// onlyElements replaces each slice argument (but a []byte) with its only
// element: insertJobsSQL's arguments for insertJobSQL.
func onlyElements(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		v := reflect.ValueOf(a)
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() != reflect.Uint8 {
			out[i] = v.Index(0).Interface()
		} else {
			out[i] = a
		}
	}
	return out
}

func (s *Store) insertJobsOnce(ctx context.Context, q querier, jobs []*dispatch.Job, markQueued bool) ([]dispatch.Job, []bool, error) {
	n := len(jobs)
	// Time and ids are taken together, so that statements running side by
	// side never pair an earlier creation time with later ids: the outbox
	// sends by (next_attempt_at, id), and a group sent out of id order
	// makes its later jobs step aside one outbox pass at a time.
	s.idMu.Lock()
	now := time.Now().UTC()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = s.NewID()
	}
	s.idMu.Unlock()
	var (
		externalIDs, groupIDs, idemKeys      = make([]*string, n), make([]*string, n), make([]*string, n)
		sources, types, targets, protocols   = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		headers, contentTypes, metadata      = make([]string, n), make([]string, n), make([]string, n)
		bodies                               = make([][]byte, n)
		strategies                           = make([]string, n)
		credIDs, replayOfs, eventIDs, subIDs = make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n)
		maxRetries                           = make([]int32, n)
		scheduled, expires                   = make([]*time.Time, n), make([]*time.Time, n)
		nexts                                = make([]time.Time, n)
	)
	traceCtxs := make([]*string, n)
	queueURLs, poolCodes := make([]*string, n), make([]*string, n)
	for i, j := range jobs {
		traceCtxs[i] = nullStr(j.TraceContext)
		queueURLs[i], poolCodes[i] = nullStr(j.QueueURL), nullStr(j.PoolCode)
		externalIDs[i], groupIDs[i], idemKeys[i] = nullStr(j.ExternalID), nullStr(j.GroupID), nullStr(j.IdempotencyKey)
		sources[i], types[i], targets[i], protocols[i] = j.Source, j.Type, j.TargetURL, j.Protocol
		bodies[i], contentTypes[i], strategies[i] = packPayload(j.Payload), j.PayloadContentType, string(j.RetryStrategy)
		credIDs[i], replayOfs[i] = nullInt(j.CredentialsID), nullInt(j.ReplayOf)
		eventIDs[i], subIDs[i] = nullInt(j.EventID), nullInt(j.SubscriptionID)
		maxRetries[i] = int32(j.MaxRetries)
		scheduled[i], expires[i] = j.ScheduledFor, j.ExpiresAt
		nexts[i] = now
		if j.ScheduledFor != nil && j.ScheduledFor.After(now) {
			nexts[i] = *j.ScheduledFor
		}
		var err error
		if headers[i], err = jsonObject(j.Headers); err != nil {
			return nil, nil, fmt.Errorf("store: insert jobs: headers: %w", err)
		}
		if metadata[i], err = jsonObject(j.Metadata); err != nil {
			return nil, nil, fmt.Errorf("store: insert jobs: metadata: %w", err)
		}
	}
	// An idempotency key is taken in dispatch_job_key, in the same
	// statement: a job whose key is held already is not inserted.
	args := []any{now, ids, externalIDs, sources, types, groupIDs, targets, protocols, headers, bodies, contentTypes,
		credIDs, maxRetries, strategies, scheduled, expires, idemKeys, metadata, replayOfs, nexts, eventIDs, subIDs,
		markQueued, now.Add(s.sendLease), traceCtxs, queueURLs, poolCodes}
	query := insertJobsSQL
	if n == 1 {
		query, args = insertJobSQL, onlyElements(args)
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("store: insert jobs: %w", interpret(err))
	}
	// Only the id, queued_at and seq come back: the rest of each stored
	// row is what was sent (storedJob). Decoding every column of every new
	// job was half of a create's allocations.
	type inserted struct {
		queuedAt *time.Time
		seq      int64
	}
	stored := make(map[int64]inserted, n)
	var (
		id  int64
		row inserted
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &row.queuedAt, &row.seq}, func() error {
		stored[id] = row
		return nil
	})
	if err != nil {
		if idClash(err) || noPartition(err) {
			return nil, nil, err // insertJobs retries
		}
		return nil, nil, fmt.Errorf("store: insert jobs: %w", interpret(err))
	}
	out := make([]dispatch.Job, n)
	created := make([]bool, n)
	var taken []string // idempotency keys held by other jobs
	for i, j := range jobs {
		if r, ok := stored[ids[i]]; ok {
			out[i], created[i] = storedJob(j, ids[i], r.seq, now, nexts[i], r.queuedAt), true
		} else {
			taken = append(taken, j.IdempotencyKey)
		}
	}
	if len(taken) == 0 {
		return out, created, nil
	}
	holders, err := s.jobsByKey(ctx, q, taken)
	if err != nil {
		return out, created, &afterInsertError{fmt.Errorf("store: jobs by idempotency key: %w", err)}
	}
	byKey := make(map[string]dispatch.Job, len(holders))
	for _, j := range holders {
		byKey[j.IdempotencyKey] = j
	}
	for i, j := range jobs {
		if created[i] {
			continue
		}
		h, ok := byKey[j.IdempotencyKey]
		if !ok {
			return nil, nil, fmt.Errorf("store: insert jobs: job %d was neither stored nor found by its idempotency key", i)
		}
		out[i] = h
	}
	return out, created, nil
}

// JobByKey returns the job holding idempotency key, if one does.
func (s *Store) JobByKey(ctx context.Context, key string) (dispatch.Job, bool, error) {
	jobs, err := s.jobsByKey(ctx, s.pool, []string{key})
	if err != nil || len(jobs) == 0 {
		return dispatch.Job{}, false, err
	}
	return jobs[0], true, nil
}

func (s *Store) jobsByKey(ctx context.Context, q querier, keys []string) ([]dispatch.Job, error) {
	if s.beforeKeyLookup != nil {
		if err := s.beforeKeyLookup(); err != nil {
			return nil, err
		}
	}
	rows, err := q.Query(ctx, `SELECT `+jobCols("j")+`
		FROM dispatch_job_key k JOIN dispatch_job j ON j.id = k.job_id WHERE k.idempotency_key = ANY($1)`, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.Job, error) { return scanJob(r) })
}

// jsonObject renders a string map as a JSON object ({} for nil).
func jsonObject(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// GetJob returns a job by id.
func (s *Store) GetJob(ctx context.Context, id int64) (dispatch.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobCols("dispatch_job")+` FROM dispatch_job WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return j, notFound("job", id)
	}
	if err != nil {
		return j, fmt.Errorf("store: get job %d: %w", id, err)
	}
	return j, nil
}

// ListAttempts returns a job's attempts, oldest first.
func (s *Store) ListAttempts(ctx context.Context, jobID int64) ([]dispatch.Attempt, error) {
	if _, err := s.GetJob(ctx, jobID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, job_id, attempt_number, attempted_at, completed_at, duration_millis, status,
			COALESCE(response_code, 0), COALESCE(response_body, ''), COALESCE(error_message, ''),
			request_headers, response_headers
		FROM dispatch_attempt WHERE job_id = $1 ORDER BY attempt_number`, jobID)
	if err != nil {
		return nil, fmt.Errorf("store: list attempts: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.Attempt, error) {
		var a dispatch.Attempt
		err := r.Scan(&a.ID, &a.JobID, &a.AttemptNumber, &a.AttemptedAt, &a.CompletedAt,
			&a.DurationMillis, &a.Status, &a.ResponseCode, &a.ResponseBody, &a.ErrorMessage,
			&a.RequestHeaders, &a.ResponseHeaders)
		return a, err
	})
}

// CancelJob moves a PENDING or FAILED job to CANCELLED. A job in progress
// or already terminal is a conflict.
func (s *Store) CancelJob(ctx context.Context, id int64) (dispatch.Job, error) {
	if s.fresh.cancel(id, time.Now()) {
		return dispatch.Job{}, dispatch.Errorf(dispatch.EConflict, "job %d is %s and cannot be cancelled", id, dispatch.StatusInProgress)
	}
	j, err := scanJob(s.pool.QueryRow(ctx, `
		UPDATE dispatch_job SET status = 'CANCELLED', updated_at = now(), completed_at = now(),
			last_error = 'cancelled', claimed_until = NULL
		WHERE id = $1 AND status IN ('PENDING', 'FAILED')
		RETURNING `+jobCols("dispatch_job"), id))
	if err == nil {
		if j.GroupID != "" {
			s.notify() // the group's next job is due now
		}
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
