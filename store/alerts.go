package store

import (
	"context"
	"fmt"
	"slices"
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

// HoldAlert has holder (one process) hold the condition key on until
// lease from now: a new hold, or the renewal of its own. It records e
// (nothing when e.Kind is empty) when no unexpired hold of key was left,
// its own included: the condition turns on. It reports whether it did.
// Holds of one key change one at a time, so processes holding a key at
// once record e once.
func (s *Store) HoldAlert(ctx context.Context, key, holder string, lease time.Duration, e dispatch.AlertEvent) (bool, error) {
	changed, err := s.setAlertHold(ctx, key, holder, lease, e)
	if err != nil {
		return false, fmt.Errorf("store: hold alert %s: %w", key, err)
	}
	return changed, nil
}

// ReleaseAlert ends holder's hold of the condition key and records e
// (nothing when e.Kind is empty) when that leaves no unexpired hold where
// one was: the condition turns off. It reports whether it did.
func (s *Store) ReleaseAlert(ctx context.Context, key, holder string, e dispatch.AlertEvent) (bool, error) {
	changed, err := s.setAlertHold(ctx, key, holder, 0, e)
	if err != nil {
		return false, fmt.Errorf("store: release alert %s: %w", key, err)
	}
	return changed, nil
}

// setAlertHold holds key for holder until lease from now, or releases
// holder's hold (lease 0), and records e if the condition changes.
func (s *Store) setAlertHold(ctx context.Context, key, holder string, lease time.Duration, e dispatch.AlertEvent) (bool, error) {
	var changed bool
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// The key's state row, made if new and locked either way: changes
		// of one key's holds take turns, so two processes whose breakers
		// open at once do not both find no hold and record two events.
		if _, err := tx.Exec(ctx, `INSERT INTO dispatch_alert_state AS st (key, active, changed_at) VALUES ($1, false, now())
			ON CONFLICT (key) DO UPDATE SET active = st.active`, key); err != nil {
			return err
		}
		// A hold that ran out counts as released: its process stopped, or
		// stopped renewing it.
		if _, err := tx.Exec(ctx, `DELETE FROM dispatch_alert_hold WHERE key = $1 AND expires_at <= now()`, key); err != nil {
			return err
		}
		var was, is bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM dispatch_alert_hold WHERE key = $1)`, key).Scan(&was); err != nil {
			return err
		}
		if lease > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO dispatch_alert_hold (key, holder, expires_at)
				VALUES ($1, $2, now() + make_interval(secs => $3::float8))
				ON CONFLICT (key, holder) DO UPDATE SET expires_at = EXCLUDED.expires_at`, key, holder, lease.Seconds()); err != nil {
				return err
			}
			is = true
		} else if err := tx.QueryRow(ctx, `
			WITH gone AS (DELETE FROM dispatch_alert_hold WHERE key = $1 AND holder = $2)
			SELECT EXISTS (SELECT 1 FROM dispatch_alert_hold WHERE key = $1 AND holder <> $2)`, key, holder).Scan(&is); err != nil {
			return err
		}
		if was == is {
			return nil
		}
		changed = true
		// The event is the last statement: its insert waits for a flush
		// under way (FlushAlerts), and holds nothing the flush takes.
		_, err := tx.Exec(ctx, `
			WITH st AS (UPDATE dispatch_alert_state SET active = $2, changed_at = now() WHERE key = $1)
			INSERT INTO dispatch_alert_event (kind, subject, detail) SELECT $3, $4, $5 WHERE $3 <> ''`,
			key, is, e.Kind, e.Subject, e.Detail)
		return err
	})
	return changed, err
}

// RenewAlertHolds moves holder's unexpired holds of keys to lease from
// now, in one statement. It returns the keys whose holds it did not find
// (they ran out, or were never made): HoldAlert makes those again, and
// records their events if no other process held them meanwhile.
func (s *Store) RenewAlertHolds(ctx context.Context, holder string, keys []string, lease time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE dispatch_alert_hold SET expires_at = now() + make_interval(secs => $3::float8)
		WHERE key = ANY($1) AND holder = $2 AND expires_at > now()
		RETURNING key`, keys, holder, lease.Seconds())
	if err != nil {
		return nil, fmt.Errorf("store: renew alert holds: %w", err)
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: renew alert holds: %w", err)
	}
	var lapsed []string
	for _, k := range keys {
		if !slices.Contains(renewed, k) {
			lapsed = append(lapsed, k)
		}
	}
	return lapsed, nil
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

// PruneAlerts forgets events older than before that every destination
// has been sent (each destination's window of the event's kind is past
// it: a kind that stays quiet holds back no other kind's events),
// exhausted counts of windows before it, and holds that ran out before it
// (of processes gone, for hosts no breaker opened for since).
func (s *Store) PruneAlerts(ctx context.Context, before time.Time) error {
	_, err := s.pool.Exec(ctx, `
		WITH c AS (DELETE FROM dispatch_alert_count WHERE window_start < $1),
			h AS (DELETE FROM dispatch_alert_hold WHERE expires_at < $1)
		DELETE FROM dispatch_alert_event e WHERE e.created_at < $1
			AND NOT EXISTS (SELECT 1 FROM dispatch_alert_window w WHERE w.kind = e.kind AND w.last_event_id < e.id)`, before)
	if err != nil {
		return fmt.Errorf("store: prune alerts: %w", err)
	}
	return nil
}
