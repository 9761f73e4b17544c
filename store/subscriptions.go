package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

const subscriptionColumns = `id, name, url, event_types, filter, credentials_id, headers, max_retries,
	retry_strategy, ordering_key, rate_limit_per_second, status, disabled_reason, verify_required,
	COALESCE(verified_url, ''), enabled_at, created_at, updated_at, queue_url, pool_code`

func scanSubscription(row pgx.Row) (dispatch.Subscription, error) {
	var (
		s                   dispatch.Subscription
		credID              *int64
		orderingKey, reason *string
		queueURL, poolCode  *string
		rate                *int32
		filter, headers     map[string]string
		eventTypes          []string
	)
	err := row.Scan(&s.ID, &s.Name, &s.URL, &eventTypes, &filter, &credID, &headers, &s.MaxRetries,
		&s.RetryStrategy, &orderingKey, &rate, &s.Status, &reason, &s.VerifyRequired, &s.VerifiedURL, &s.EnabledAt,
		&s.CreatedAt, &s.UpdatedAt, &queueURL, &poolCode)
	if err != nil {
		return s, err
	}
	s.EventTypes, s.Filter, s.Headers = eventTypes, filter, headers
	s.QueueURL, s.PoolCode = deref(queueURL), deref(poolCode)
	s.CredentialsID, s.OrderingKey, s.DisabledReason = derefInt(credID), deref(orderingKey), deref(reason)
	if rate != nil {
		s.RateLimitPerSecond = int(*rate)
	}
	return s, nil
}

func nullRate(n int) *int32 {
	if n == 0 {
		return nil
	}
	v := int32(n)
	return &v
}

func emptyIfNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// CreateSubscription stores a new subscription in the status it carries,
// and whether it requires verification. No url is verified yet, so one
// that requires verification cannot start ACTIVE.
func (s *Store) CreateSubscription(ctx context.Context, sub *dispatch.Subscription) (dispatch.Subscription, error) {
	if sub.Status == dispatch.SubscriptionActive && sub.VerifyRequired {
		return dispatch.Subscription{}, dispatch.ErrUnverified
	}
	if err := s.checkCredentials(ctx, sub.CredentialsID, sub.URL); err != nil {
		return dispatch.Subscription{}, err
	}
	now := time.Now().UTC()
	var out dispatch.Subscription
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = scanSubscription(tx.QueryRow(ctx, `
		INSERT INTO dispatch_subscription (id, name, url, event_types, filter, credentials_id, headers,
			max_retries, retry_strategy, ordering_key, rate_limit_per_second, status, disabled_reason,
			verify_required, enabled_at, created_at, updated_at, queue_url, pool_code)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$15,$14,$14,$14,$16,$17)
		RETURNING `+subscriptionColumns,
			s.NewID(), sub.Name, sub.URL, sub.EventTypes, emptyIfNil(sub.Filter), nullInt(sub.CredentialsID),
			emptyIfNil(sub.Headers), sub.MaxRetries, string(sub.RetryStrategy), nullStr(sub.OrderingKey),
			nullRate(sub.RateLimitPerSecond), string(sub.Status), nullStr(sub.DisabledReason), now, sub.VerifyRequired,
			nullStr(sub.QueueURL), nullStr(sub.PoolCode)))
		if err != nil {
			return err
		}
		return ensureSlots(ctx, tx, out)
	})
	if err != nil {
		return out, fmt.Errorf("store: create subscription: %w", interpret(err))
	}
	return out, nil
}

// GetSubscription returns a subscription by id.
func (s *Store) GetSubscription(ctx context.Context, id int64) (dispatch.Subscription, error) {
	sub, err := scanSubscription(s.pool.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM dispatch_subscription WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return sub, notFound("subscription", id)
	}
	if err != nil {
		return sub, fmt.Errorf("store: get subscription %d: %w", id, err)
	}
	return sub, nil
}

// ListSubscriptions returns one page of subscriptions, newest first, and the
// total. f.EventType selects those an event of that type would reach.
func (s *Store) ListSubscriptions(ctx context.Context, f dispatch.SubscriptionFilter, page, size int) ([]dispatch.Subscription, int, error) {
	var w where
	if f.EventType != "" {
		w.add("event_types && ?", dispatch.MatchKeys(f.EventType))
	}
	if f.Status != "" {
		w.add("status = ?", string(f.Status))
	}
	if f.Before > 0 {
		w.add("id < ?", f.Before)
	}
	subs, total, err := newestPage(ctx, s, "dispatch_subscription", subscriptionColumns, w.sql(), w.args, page, size,
		func(r pgx.CollectableRow) (dispatch.Subscription, error) { return scanSubscription(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("store: list subscriptions: %w", err)
	}
	return subs, total, nil
}

// UpdateSubscription applies change to the subscription under a row lock
// and stores the result: a partial update never loses a concurrent one.
// change returns an error (a bad field) to store nothing. The lifecycle
// rules hold whatever change does (dispatch.ApplySubscriptionRules): a new
// url of a subscription that requires verification waits for a handshake,
// and an unverified one never becomes ACTIVE. Becoming ACTIVE sets
// enabled_at.
func (s *Store) UpdateSubscription(ctx context.Context, id int64, change func(*dispatch.Subscription) error) (dispatch.Subscription, error) {
	var out dispatch.Subscription
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		sub, err := scanSubscription(tx.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM dispatch_subscription WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("subscription", id)
		}
		if err != nil {
			return err
		}
		credBefore, urlBefore := sub.CredentialsID, sub.URL
		before := sub
		if err := change(&sub); err != nil {
			return err
		}
		if err := dispatch.ApplySubscriptionRules(before, &sub); err != nil {
			return err
		}
		if sub.CredentialsID != credBefore || sub.URL != urlBefore {
			if err := s.checkCredentials(ctx, sub.CredentialsID, sub.URL); err != nil {
				return err
			}
		}
		out, err = scanSubscription(tx.QueryRow(ctx, `
			UPDATE dispatch_subscription SET name = $2, url = $3, event_types = $4, filter = $5,
				credentials_id = $6, headers = $7, max_retries = $8, retry_strategy = $9, ordering_key = $10,
				rate_limit_per_second = $11, status = $12, disabled_reason = $13, updated_at = now(),
				enabled_at = CASE WHEN $12 = 'ACTIVE' AND status <> 'ACTIVE' THEN now() ELSE enabled_at END,
				queue_url = $14, pool_code = $15
			WHERE id = $1 RETURNING `+subscriptionColumns,
			id, sub.Name, sub.URL, sub.EventTypes, emptyIfNil(sub.Filter), nullInt(sub.CredentialsID),
			emptyIfNil(sub.Headers), sub.MaxRetries, string(sub.RetryStrategy), nullStr(sub.OrderingKey),
			nullRate(sub.RateLimitPerSecond), string(sub.Status), nullStr(sub.DisabledReason),
			nullStr(sub.QueueURL), nullStr(sub.PoolCode)))
		if err != nil {
			return err
		}
		return ensureSlots(ctx, tx, out)
	})
	if err != nil {
		var de *dispatch.Error
		if errors.As(err, &de) {
			return out, err
		}
		return out, fmt.Errorf("store: update subscription %d: %w", id, err)
	}
	return out, nil
}

// SetSubscriptionStatus moves a subscription to status with reason (empty
// for ACTIVE), but only from one of the states in from (none: any state). A
// subscription in another state is a conflict; ACTIVE for one that must
// pass the handshake first is dispatch.ErrUnverified.
func (s *Store) SetSubscriptionStatus(ctx context.Context, id int64, status dispatch.SubscriptionStatus, reason string, from ...dispatch.SubscriptionStatus) (dispatch.Subscription, error) {
	return s.UpdateSubscription(ctx, id, func(sub *dispatch.Subscription) error {
		if len(from) > 0 && sub.Status != status {
			ok := false
			for _, f := range from {
				ok = ok || sub.Status == f
			}
			if !ok {
				return dispatch.Errorf(dispatch.EConflict, "subscription %d is %s and cannot become %s", id, sub.Status, status)
			}
		}
		sub.Status, sub.DisabledReason = status, reason
		return nil
	})
}

// ApplyHandshake stores the outcome of a verification handshake that ran
// on url while the subscription was in status from. Passed (reason "")
// makes it ACTIVE with url verified; failed makes it PENDING_VERIFICATION
// with the reason and no verified url. The outcome applies only if url and
// status are still those (compare-and-set): a handshake never decides for
// a url changed while it ran, nor undoes a disable. It returns the
// subscription as it now is and whether the outcome applied.
func (s *Store) ApplyHandshake(ctx context.Context, id int64, url string, from dispatch.SubscriptionStatus, reason string) (dispatch.Subscription, bool, error) {
	status, verified := dispatch.SubscriptionActive, &url
	if reason != "" {
		status, verified = dispatch.SubscriptionPendingVerification, nil
	}
	sub, err := scanSubscription(s.pool.QueryRow(ctx, `
		UPDATE dispatch_subscription SET status = $4, disabled_reason = $5, verified_url = $6, updated_at = now(),
			enabled_at = CASE WHEN $4 = 'ACTIVE' AND status <> 'ACTIVE' THEN now() ELSE enabled_at END
		WHERE id = $1 AND url = $2 AND status = $3
		RETURNING `+subscriptionColumns, id, url, string(from), string(status), nullStr(reason), verified))
	if errors.Is(err, pgx.ErrNoRows) {
		sub, err = s.GetSubscription(ctx, id)
		return sub, false, err
	}
	if err != nil {
		return sub, false, fmt.Errorf("store: apply handshake of subscription %d: %w", id, err)
	}
	return sub, true, nil
}

// DeleteSubscription removes a subscription. Jobs already made for it go on.
func (s *Store) DeleteSubscription(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `
		WITH slots AS (DELETE FROM dispatch_subscription_slot WHERE subscription_id = $1)
		DELETE FROM dispatch_subscription WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("store: delete subscription %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("subscription", id)
	}
	return nil
}

// AcquireSlot takes one of a rate-limited subscription's delivery slots
// (rateLimitPerSecond of them, shared by every processor through
// PostgreSQL, on the database's clock). A slot is held from now until
// ReleaseSlot frees it one second after the response, or, should the holder
// die, until hold has passed. So a request never reaches the receiver less
// than a second after the request that held its slot before: no one-second
// window ever sees more than rateLimitPerSecond requests arrive.
//
// It returns the slot and ok=true; slot −1 and ok=true when the
// subscription has no limit (or was deleted); or ok=false and when the
// first slot is due to be free.
func (s *Store) AcquireSlot(ctx context.Context, subscriptionID int64, hold time.Duration) (int, bool, time.Time, error) {
	var slot int
	err := s.pool.QueryRow(ctx, `
		UPDATE dispatch_subscription_slot SET free_at = clock_timestamp() + make_interval(secs => $2::float8)
		WHERE (subscription_id, slot) = (
			SELECT k.subscription_id, k.slot FROM dispatch_subscription_slot k
			JOIN dispatch_subscription s ON s.id = k.subscription_id
			WHERE k.subscription_id = $1 AND k.slot < s.rate_limit_per_second AND k.free_at <= clock_timestamp()
			ORDER BY k.free_at LIMIT 1
			FOR UPDATE OF k SKIP LOCKED)
		RETURNING slot`, subscriptionID, hold.Seconds()).Scan(&slot)
	if err == nil {
		return slot, true, time.Time{}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, time.Time{}, fmt.Errorf("store: acquire slot of subscription %d: %w", subscriptionID, err)
	}
	var (
		limit *int32
		free  *time.Time
		dbNow time.Time
	)
	err = s.pool.QueryRow(ctx, `
		SELECT s.rate_limit_per_second, (SELECT GREATEST(min(k.free_at), clock_timestamp()) FROM dispatch_subscription_slot k
			WHERE k.subscription_id = s.id AND k.slot < s.rate_limit_per_second), clock_timestamp()
		FROM dispatch_subscription s WHERE s.id = $1`, subscriptionID).Scan(&limit, &free, &dbNow)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && limit == nil) {
		return -1, true, time.Time{}, nil
	}
	if err != nil {
		return 0, false, time.Time{}, fmt.Errorf("store: acquire slot of subscription %d: %w", subscriptionID, err)
	}
	// Due again when the first slot frees (on this process's clock), or in
	// a moment when a slot is free but another processor had it locked.
	wait := 20 * time.Millisecond
	if free != nil && free.Sub(dbNow) > wait {
		wait = free.Sub(dbNow)
	}
	return 0, false, time.Now().Add(wait), nil
}

// ReleaseSlot frees a slot one second after now (the response is in).
func (s *Store) ReleaseSlot(ctx context.Context, subscriptionID int64, slot int) error {
	if slot < 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
		UPDATE dispatch_subscription_slot SET free_at = clock_timestamp() + interval '1 second'
		WHERE subscription_id = $1 AND slot = $2`, subscriptionID, slot)
	if err != nil {
		return fmt.Errorf("store: release slot %d of subscription %d: %w", slot, subscriptionID, err)
	}
	return nil
}

// ensureSlots makes sure a rate-limited subscription has its slots.
func ensureSlots(ctx context.Context, q querier, sub dispatch.Subscription) error {
	if sub.RateLimitPerSecond == 0 {
		return nil
	}
	var n int
	return q.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO dispatch_subscription_slot (subscription_id, slot, free_at)
			SELECT $1, g, '-infinity' FROM generate_series(0, $2 - 1) g
			ON CONFLICT DO NOTHING RETURNING 1)
		SELECT count(*) FROM ins`, sub.ID, sub.RateLimitPerSecond).Scan(&n)
}

// DisableFailingSubscriptions disables ACTIVE subscriptions that have
// failed for at least after since they were last enabled: their failure
// streak (the ERROR jobs finished after the last COMPLETED one and after
// enabled_at) began at or before now−after. So an enable — by an operator,
// at creation, or by a handshake — lasts until the subscription has failed
// for a whole period again; failures from before it do not count. It
// returns how many it disabled.
func (s *Store) DisableFailingSubscriptions(ctx context.Context, now time.Time, after time.Duration) (int64, error) {
	cutoff := now.Add(-after)
	// The streak's start is one index probe per ACTIVE subscription
	// enabled before the cutoff (the last COMPLETED, then the first ERROR
	// after it and after the enable). The UPDATE re-checks status and
	// enabled_at on the row it changes, so a subscription enabled again
	// while this ran is not disabled by failures from before that enable.
	tag, err := s.pool.Exec(ctx, `
		WITH failing AS (
			SELECT id, enabled_at, since FROM (
				SELECT s.id, s.enabled_at, (
					SELECT min(e.completed_at) FROM dispatch_job e
					WHERE e.subscription_id = s.id AND e.status = 'ERROR' AND e.completed_at >= s.enabled_at
						AND e.completed_at > COALESCE((SELECT max(c.completed_at) FROM dispatch_job c
							WHERE c.subscription_id = s.id AND c.status = 'COMPLETED'), '-infinity')) AS since
				FROM dispatch_subscription s
				WHERE s.status = 'ACTIVE' AND s.enabled_at <= $2) streak
			WHERE since <= $2)
		UPDATE dispatch_subscription s SET status = 'DISABLED', updated_at = $1,
			disabled_reason = 'every delivery has failed since ' ||
				to_char(f.since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' (automatic disable after ' || $3 || ')'
		FROM failing f
		WHERE s.id = f.id AND s.status = 'ACTIVE' AND s.enabled_at = f.enabled_at`,
		now, cutoff, after.String())
	if err != nil {
		return 0, fmt.Errorf("store: disable failing subscriptions: %w", err)
	}
	return tag.RowsAffected(), nil
}
