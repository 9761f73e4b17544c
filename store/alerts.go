package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// alertEventsShown is how many events one alert lists; the rest are
// counted.
const alertEventsShown = 10

// CreateAlertDestination stores an alert destination. A webhook's
// credentials must exist and allow its url. It starts with the events
// recorded from now on: history is not sent to a new destination.
func (s *Store) CreateAlertDestination(ctx context.Context, d *dispatch.AlertDestination) error {
	if err := s.checkCredentials(ctx, d.CredentialsID, d.URL); err != nil {
		return err
	}
	d.ID, d.CreatedAt = s.NewID(), pgTime(time.Now())
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO dispatch_alert_destination (id, name, kind, url, credentials_id, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, d.ID, d.Name, d.Kind, d.URL, nullInt(d.CredentialsID), d.CreatedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO dispatch_alert_window (destination_id, kind, last_event_id)
			SELECT $1, k, (SELECT COALESCE(max(id), 0) FROM dispatch_alert_event) FROM unnest($2::text[]) k`,
			d.ID, dispatch.AlertKinds)
		return err
	})
	if pgCode(err) == foreignKeyViolation { // its credentials were deleted since the check
		var p dispatch.Problems
		p.Add("credentialsId", "credentials %d do not exist", d.CredentialsID)
		return p.Err()
	}
	if err != nil {
		return fmt.Errorf("store: create alert destination: %w", err)
	}
	return nil
}

// ListAlertDestinations lists the alert destinations, oldest first.
func (s *Store) ListAlertDestinations(ctx context.Context) ([]dispatch.AlertDestination, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, kind, url, COALESCE(credentials_id, 0), created_at
		FROM dispatch_alert_destination ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list alert destinations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dispatch.AlertDestination, error) {
		var d dispatch.AlertDestination
		err := row.Scan(&d.ID, &d.Name, &d.Kind, &d.URL, &d.CredentialsID, &d.CreatedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list alert destinations: %w", err)
	}
	return out, nil
}

// DeleteAlertDestination removes an alert destination. Alert jobs already
// made for it go on.
func (s *Store) DeleteAlertDestination(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM dispatch_alert_destination WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("store: delete alert destination %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("alert destination", id)
	}
	return nil
}

// RecordAlert records an event for the alert destinations.
func (s *Store) RecordAlert(ctx context.Context, e dispatch.AlertEvent) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO dispatch_alert_event (kind, subject, detail) VALUES ($1, $2, $3)`,
		e.Kind, e.Subject, e.Detail)
	if err != nil {
		return fmt.Errorf("store: record alert: %w", err)
	}
	return nil
}

// SetAlertState turns the condition key on or off for every replica and,
// only when that changes it, records e (nothing when e.Kind is empty). A
// condition never seen before is off. It reports whether it changed.
func (s *Store) SetAlertState(ctx context.Context, key string, active bool, e dispatch.AlertEvent) (bool, error) {
	var changed bool
	err := s.pool.QueryRow(ctx, `
		WITH c AS (
			INSERT INTO dispatch_alert_state AS st (key, active, changed_at) VALUES ($1, $2, now())
			ON CONFLICT (key) DO UPDATE SET active = EXCLUDED.active, changed_at = EXCLUDED.changed_at
				WHERE st.active <> EXCLUDED.active
			RETURNING (xmax <> 0 OR active) AS changed
		), e AS (
			INSERT INTO dispatch_alert_event (kind, subject, detail)
			SELECT $3, $4, $5 FROM c WHERE c.changed AND $3 <> ''
		)
		SELECT COALESCE((SELECT changed FROM c), false)`, key, active, e.Kind, e.Subject, e.Detail).Scan(&changed)
	if err != nil {
		return false, fmt.Errorf("store: set alert state %s: %w", key, err)
	}
	return changed, nil
}

// CountExhausted adds n jobs of source and type that exhausted their
// retries in the window starting at windowStart, and records e when the
// count reaches threshold with these. It reports whether it did.
func (s *Store) CountExhausted(ctx context.Context, source, typ string, windowStart time.Time, n, threshold int, e dispatch.AlertEvent) (bool, error) {
	var crossed bool
	err := s.pool.QueryRow(ctx, `
		WITH c AS (
			INSERT INTO dispatch_alert_count AS c (source, type, window_start, count) VALUES ($1, $2, $3, $4)
			ON CONFLICT (source, type, window_start) DO UPDATE SET count = c.count + EXCLUDED.count
			RETURNING count
		), e AS (
			INSERT INTO dispatch_alert_event (kind, subject, detail)
			SELECT $6, $7, $8 FROM c WHERE c.count >= $5 AND c.count - $4 < $5
		)
		SELECT count >= $5 AND count - $4 < $5 FROM c`,
		source, typ, windowStart, n, threshold, e.Kind, e.Subject, e.Detail).Scan(&crossed)
	if err != nil {
		return false, fmt.Errorf("store: count exhausted jobs: %w", err)
	}
	return crossed, nil
}

// FlushAlerts makes the alert jobs that are due at now: for each
// destination and kind with events it has not been sent, at most one per
// window. The claim, the jobs and the moved cursor commit together, and
// replicas flushing at once claim each window once. It returns how many
// jobs it made.
func (s *Store) FlushAlerts(ctx context.Context, now time.Time, window time.Duration) (int, error) {
	for try := 0; ; try++ {
		made, err := s.flushAlertsOnce(ctx, now, window)
		if try < 3 && noPartition(err) { // as CreateJobs: make the partition, then again
			if err = s.makeRoom(ctx); err == nil {
				continue
			}
		}
		if try < 3 && idClash(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("store: flush alerts: %w", err)
		}
		return made, nil
	}
}

func (s *Store) flushAlertsOnce(ctx context.Context, now time.Time, window time.Duration) (int, error) {
	var made int
	var hand = func(bool) {}
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// Each window's cursor moves to the highest event id the flush
		// sees, but ids are taken at insert, not at commit: an event whose
		// transaction commits after a flush that saw a higher id (a
		// subscription's trigger in a slower transaction, another
		// replica's breaker) would fall behind the cursor and never be
		// sent. SHARE mode conflicts with the ROW EXCLUSIVE lock an
		// insert holds until its transaction ends, so the flush first
		// waits for the inserts under way to commit (or roll back), and
		// new ones wait for the flush to commit: every id below the
		// cursor is then committed or never will be. Inserts are single
		// statements or triggers that hold nothing the flush takes, so
		// neither waits on the other in turn; flushes share the mode
		// (none writes events), and the wait lasts one flush. Taken before
		// any other statement, so each statement's snapshot (READ
		// COMMITTED) sees those commits.
		if _, err := tx.Exec(ctx, `LOCK TABLE dispatch_alert_event IN SHARE MODE`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			WITH top AS (SELECT kind, max(id) AS top FROM dispatch_alert_event GROUP BY kind)
			UPDATE dispatch_alert_window w SET prev_event_id = w.last_event_id, last_event_id = t.top, sent_at = $1
			FROM top t
			WHERE w.kind = t.kind AND t.top > w.last_event_id AND (w.sent_at IS NULL OR w.sent_at <= $2)
			RETURNING w.destination_id, w.kind, w.prev_event_id, w.last_event_id`, now, now.Add(-window))
		if err != nil {
			return err
		}
		type claim struct {
			dest       int64
			kind       string
			from, upTo int64
		}
		claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claim, error) {
			var c claim
			return c, row.Scan(&c.dest, &c.kind, &c.from, &c.upTo)
		})
		if err != nil || len(claims) == 0 {
			return err
		}
		var jobs []*dispatch.Job
		for _, c := range claims {
			due := dispatch.AlertDue{Kind: c.kind, Key: fmt.Sprintf("dispatch-alert-%d-%s-%d", c.dest, c.kind, c.upTo)}
			err := tx.QueryRow(ctx, `SELECT id, name, kind, url, COALESCE(credentials_id, 0), created_at
				FROM dispatch_alert_destination WHERE id = $1`, c.dest).Scan(&due.Destination.ID, &due.Destination.Name,
				&due.Destination.Kind, &due.Destination.URL, &due.Destination.CredentialsID, &due.Destination.CreatedAt)
			if err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT count(*), min(created_at) FROM dispatch_alert_event
				WHERE kind = $1 AND id > $2 AND id <= $3`, c.kind, c.from, c.upTo).Scan(&due.Count, &due.Since); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT kind, subject, detail, created_at FROM dispatch_alert_event
				WHERE kind = $1 AND id > $2 AND id <= $3 ORDER BY id LIMIT $4`, c.kind, c.from, c.upTo, alertEventsShown)
			if err != nil {
				return err
			}
			due.Events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (dispatch.AlertEvent, error) {
				var e dispatch.AlertEvent
				return e, row.Scan(&e.Kind, &e.Subject, &e.Detail, &e.At)
			})
			if err != nil {
				return err
			}
			if due.Count > 0 {
				jobs = append(jobs, due.Job())
			}
		}
		if len(jobs) == 0 {
			return nil
		}
		var created []bool
		_, created, hand, err = s.insertAndHand(ctx, tx, jobs)
		for _, c := range created {
			if c {
				made++
			}
		}
		return err
	})
	hand(err == nil)
	return made, err
}

// PruneAlerts forgets events every destination has been sent and that
// are older than before, and exhausted counts of windows before it.
func (s *Store) PruneAlerts(ctx context.Context, before time.Time) error {
	_, err := s.pool.Exec(ctx, `
		WITH c AS (DELETE FROM dispatch_alert_count WHERE window_start < $1)
		DELETE FROM dispatch_alert_event WHERE created_at < $1
			AND id <= COALESCE((SELECT min(last_event_id) FROM dispatch_alert_window), (SELECT max(id) FROM dispatch_alert_event))`, before)
	if err != nil {
		return fmt.Errorf("store: prune alerts: %w", err)
	}
	return nil
}
