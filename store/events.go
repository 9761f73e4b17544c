package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// PublishEvent stores an event and one PENDING job per matching ACTIVE
// subscription in one transaction, one statement per table: the event row,
// the matching subscriptions (a GIN lookup on their patterns plus the
// metadata filter), and all the jobs (INSERT … SELECT over unnest). data is
// the event's data decoded, for the ordering keys. When the idempotency key
// is taken it returns the existing event and its jobs with created=false
// and writes nothing.
func (s *Store) PublishEvent(ctx context.Context, e *dispatch.Event, data any) (dispatch.Event, bool, error) {
	for try := 0; ; try++ {
		out, created, err := s.publishEventOnce(ctx, e, data)
		if try < 10 && noPartition(err) {
			if err := s.makeRoom(ctx); err != nil {
				return out, false, fmt.Errorf("store: publish event: %w", err)
			}
			continue
		}
		if try < 10 && (keyClash(err, "dispatch_job") || keyClash(err, "dispatch_event")) {
			// Two processes share a snowflake node id and made the same ids
			// in the same millisecond: fresh ids, after a moment of jitter so
			// that the two do not meet again in step.
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			continue
		}
		if err != nil {
			return out, false, fmt.Errorf("store: publish event: %w", interpret(err))
		}
		if created && len(out.Jobs) > 0 {
			s.notify() // the fan-out's jobs go out through the outbox
		}
		return out, created, nil
	}
}

func (s *Store) publishEventOnce(ctx context.Context, e *dispatch.Event, data any) (dispatch.Event, bool, error) {
	var (
		out     dispatch.Event
		created bool
	)
	metadata := emptyIfNil(e.Metadata)
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		now := time.Now().UTC()
		var err error
		// The key is taken in dispatch_event_key in the same statement: an
		// event whose key is held already is not inserted.
		out, err = scanEvent(tx.QueryRow(ctx, `
			WITH k AS (
				INSERT INTO dispatch_event_key (idempotency_key, event_id) SELECT $6, $1 WHERE $6::text IS NOT NULL
				ON CONFLICT DO NOTHING RETURNING event_id
			)
			INSERT INTO dispatch_event (id, source, type, data, metadata, idempotency_key, created_at)
			SELECT $1,$2,$3,$4,$5,$6,$7 WHERE $6::text IS NULL OR EXISTS (SELECT 1 FROM k)
			RETURNING `+eventColumns,
			s.NewID(), e.Source, e.Type, e.Data, metadata, nullStr(e.IdempotencyKey), now))
		if errors.Is(err, pgx.ErrNoRows) {
			out, err = scanEvent(tx.QueryRow(ctx, `SELECT `+eventColumns+` FROM dispatch_event
				WHERE id = (SELECT event_id FROM dispatch_event_key WHERE idempotency_key = $1)`, e.IdempotencyKey))
			if err != nil {
				return err
			}
			out.Jobs, err = s.eventJobs(ctx, tx, out.ID)
			return err
		}
		if err != nil {
			return err
		}
		created = true
		// The matching subscriptions are read once, with everything their
		// jobs copy, and the jobs are written from those values: no second
		// read of dispatch_subscription, so a fan-out costs the same whether
		// there are ten subscriptions in all or ten thousand. Beyond the
		// fan-out limit, matches are counted but not kept, and the whole
		// event is refused (the transaction rolls back its row).
		var fan fanOut
		limit, matched := s.fanoutLimit(len(e.Data)), 0
		rows, err := tx.Query(ctx, `
			SELECT id, COALESCE(ordering_key, ''), url, headers::text, credentials_id, max_retries, retry_strategy,
				queue_url, pool_code
			FROM dispatch_subscription
			WHERE status = 'ACTIVE' AND event_types && $1 AND filter <@ $2
			ORDER BY id LIMIT $3`, dispatch.MatchKeys(e.Type), metadata, limit+1)
		if err != nil {
			return err
		}
		var ( // declared once: as Scan's targets they live on the heap
			id, maxRetries          int64
			key, url, hdrs, retries string
			creds                   *int64
			queue, pool             *string
		)
		for rows.Next() {
			if matched++; matched > limit {
				break // one past the limit: the event is refused
			}
			if err := rows.Scan(&id, &key, &url, &hdrs, &creds, &maxRetries, &retries, &queue, &pool); err != nil {
				rows.Close()
				return err
			}
			var g *string
			if key != "" {
				g = nullStr(dispatch.OrderingGroup(id, key, data))
			}
			fan.add(s.NewID(), id, g, url, hdrs, creds, maxRetries, retries, queue, pool)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if matched > limit {
			// Counted, not read: a refusal no longer streams every match's
			// row (ten thousand matches, ten thousand rows) to say how many.
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM dispatch_subscription
				WHERE status = 'ACTIVE' AND event_types && $1 AND filter <@ $2`,
				dispatch.MatchKeys(e.Type), metadata).Scan(&matched); err != nil {
				return err
			}
			// The count's snapshot is later than the read's: a
			// subscription disabled between them does not undo the refusal.
			return s.fanoutRefused(max(matched, limit+1), len(e.Data))
		}
		if len(fan.subIDs) == 0 {
			out.Jobs = []dispatch.EventJob{}
			return nil
		}
		if slices.ContainsFunc(fan.groups, func(g *string) bool { return g != nil }) {
			// The groups' places follow commit order (see insertJobsFrom).
			if _, err := tx.Exec(ctx, lockGroups("unnest($1::text[]) AS t(group_id)"), fan.groups); err != nil {
				return err
			}
		}
		rows, err = tx.Query(ctx, `
			WITH j AS (
				INSERT INTO dispatch_job (id, created_at, updated_at, source, type, group_id, target_url,
					protocol, headers, payload_content_type, credentials_id, status, max_retries,
					retry_strategy, idempotency_key, metadata, next_attempt_at, event_id, subscription_id, trace_context,
					queue_url, pool_code)
				SELECT m.job_id, $1, $1, $2, $3, m.group_id, m.url, 'HTTP_WEBHOOK', m.headers,
					'application/json', m.credentials_id, 'PENDING', m.max_retries, m.retry_strategy,
					$5::text || ':' || m.sub_id::text,
					$6::jsonb || jsonb_build_object('eventId', $5::text, 'subscriptionId', m.sub_id::text),
					$1, $7, m.sub_id, $16::text, m.queue_url, m.pool_code
				FROM unnest($8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::jsonb[], $13::bigint[], $14::int[], $15::text[],
					$17::text[], $18::text[])
					AS m(job_id, sub_id, group_id, url, headers, credentials_id, max_retries, retry_strategy, queue_url, pool_code)
				ORDER BY m.job_id
				RETURNING id, subscription_id, status
			), p AS (
				-- each job's payload, written once (see jobCols)
				INSERT INTO dispatch_payload (job_id, body) SELECT id, $4::bytea FROM j
			), k AS (
				-- each job's idempotency key, held as a create's is: a create
				-- naming it gets this job
				INSERT INTO dispatch_job_key (idempotency_key, job_id)
				SELECT $5::text || ':' || subscription_id::text, id FROM j
				ON CONFLICT DO NOTHING
			)
			SELECT id, subscription_id, status FROM j ORDER BY id`,
			now, e.Source, e.Type, packPayload(e.Data), dispatch.FormatID(out.ID), metadata, out.ID,
			fan.jobIDs, fan.subIDs, fan.groups, fan.urls, fan.headers, fan.creds, fan.maxRetries, fan.retries,
			nullStr(e.TraceContext), fan.queues, fan.pools)
		if err != nil {
			return err
		}
		out.Jobs, err = collectEventJobs(rows)
		return err
	})
	return out, created, err
}

// fanOut is the jobs of one event, column by column, as the subscriptions
// that matched it give them.
type fanOut struct {
	jobIDs, subIDs         []int64
	groups                 []*string
	urls, headers, retries []string
	creds                  []*int64
	maxRetries             []int64
	queues, pools          []*string
}

func (f *fanOut) add(jobID, subID int64, group *string, url, headers string, creds *int64, maxRetries int64, retries string, queue, pool *string) {
	f.queues = append(f.queues, queue)
	f.pools = append(f.pools, pool)
	f.jobIDs = append(f.jobIDs, jobID)
	f.subIDs = append(f.subIDs, subID)
	f.groups = append(f.groups, group)
	f.urls = append(f.urls, url)
	f.headers = append(f.headers, headers)
	f.creds = append(f.creds, creds)
	f.maxRetries = append(f.maxRetries, maxRetries)
	f.retries = append(f.retries, retries)
}

const eventColumns = `id, source, type, data, metadata, COALESCE(idempotency_key, ''), created_at`

func scanEvent(row pgx.Row) (dispatch.Event, error) {
	var e dispatch.Event
	err := row.Scan(&e.ID, &e.Source, &e.Type, &e.Data, &e.Metadata, &e.IdempotencyKey, &e.CreatedAt)
	return e, err
}

func collectEventJobs(rows pgx.Rows) ([]dispatch.EventJob, error) {
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dispatch.EventJob, error) {
		var j dispatch.EventJob
		return j, r.Scan(&j.ID, &j.SubscriptionID, &j.Status)
	})
	if jobs == nil && err == nil {
		jobs = []dispatch.EventJob{}
	}
	slices.SortFunc(jobs, func(a, b dispatch.EventJob) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, err
}

// eventJobsSQL lists an event's jobs. They were made with it, and their ids
// drawn after its own: {lo}, the start of the event's partition, keeps
// PostgreSQL from looking in the partitions before it (one index probe a
// partition, thirty on a month of history).
var eventJobsSQL = &boundedSQL{sql: `
		SELECT id, subscription_id, status FROM dispatch_job
		WHERE event_id = $1 AND replay_of IS NULL AND id >= {lo} ORDER BY id`}

// eventJobs lists the jobs an event made (not their replays), oldest first.
func (s *Store) eventJobs(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, eventID int64) ([]dispatch.EventJob, error) {
	lo, _ := s.idBounds([]int64{eventID})
	rows, err := q.Query(ctx, withBounds(eventJobsSQL, lo, ""), eventID)
	if err != nil {
		return nil, err
	}
	return collectEventJobs(rows)
}

// GetEvent returns an event with its jobs' current status.
func (s *Store) GetEvent(ctx context.Context, id int64) (dispatch.Event, error) {
	e, err := scanEvent(s.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM dispatch_event WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, notFound("event", id)
	}
	if err == nil {
		e.Jobs, err = s.eventJobs(ctx, s.pool, id)
	}
	if err != nil {
		return e, fmt.Errorf("store: get event %d: %w", id, err)
	}
	return e, nil
}

// SearchEvents returns one page of matching events, newest first, and the
// total. The events come without their jobs (GetEvent has them).
func (s *Store) SearchEvents(ctx context.Context, f dispatch.EventFilter, page, size int) ([]dispatch.Event, int, error) {
	var w where
	add := w.add
	if f.Type != "" {
		add("type = ?", f.Type)
	}
	if f.Source != "" {
		add("source = ?", f.Source)
	}
	timeRange(add, f.CreatedAfter, f.CreatedBefore)
	if f.Before > 0 {
		add("id < ?", f.Before)
	}
	events, total, err := newestPage(ctx, s, "dispatch_event", eventColumns, w.sql(), w.args, page, size,
		func(r pgx.CollectableRow) (dispatch.Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("store: search events: %w", err)
	}
	return events, total, nil
}
