package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// healthQuery reads the health of a page of subscriptions in one
// statement. Every part is a probe of idx_dispatch_subscription_done
// (subscription_id, status, completed_at), read backwards: the last
// finished jobs are the newest COMPLETED and the newest ERROR ones merged
// ($2 of each at most, then the newest $2 of those), and the last success
// and the last failure are one index entry each (the failure's row is
// read for its error). So the cost is bounded per subscription, however
// many jobs it has made.
const healthQuery = `
SELECT s.id, r.finished, r.completed, ok.at, bad.at, bad.last_error
FROM unnest($1::bigint[]) AS s(id)
CROSS JOIN LATERAL (
	SELECT count(*) AS finished, count(*) FILTER (WHERE u.ok) AS completed FROM (
		SELECT ok FROM (
			(SELECT true AS ok, completed_at FROM dispatch_job
				WHERE subscription_id = s.id AND status = 'COMPLETED' ORDER BY completed_at DESC LIMIT $2)
			UNION ALL
			(SELECT false, completed_at FROM dispatch_job
				WHERE subscription_id = s.id AND status = 'ERROR' ORDER BY completed_at DESC LIMIT $2)
		) recent ORDER BY completed_at DESC LIMIT $2) u) r
LEFT JOIN LATERAL (
	SELECT completed_at AS at FROM dispatch_job
	WHERE subscription_id = s.id AND status = 'COMPLETED' ORDER BY completed_at DESC LIMIT 1) ok ON true
LEFT JOIN LATERAL (
	SELECT completed_at AS at, last_error FROM dispatch_job
	WHERE subscription_id = s.id AND status = 'ERROR' ORDER BY completed_at DESC LIMIT 1) bad ON true`

// SubscriptionHealth reads how the deliveries of each subscription in ids
// have gone lately (dispatch.SubscriptionHealth), in one statement.
func (s *Store) SubscriptionHealth(ctx context.Context, ids []int64) (map[int64]dispatch.SubscriptionHealth, error) {
	out := make(map[int64]dispatch.SubscriptionHealth, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	err := s.browse(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, healthQuery, ids, dispatch.HealthWindow)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id      int64
				h       dispatch.SubscriptionHealth
				lastErr *string
				ok, bad *time.Time
			)
			if err := rows.Scan(&id, &h.Finished, &h.Completed, &ok, &bad, &lastErr); err != nil {
				return err
			}
			h.LastSuccess, h.LastFailure = utcPtr(ok), utcPtr(bad)
			if lastErr != nil {
				h.LastError = *lastErr
			}
			out[id] = h
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("store: subscription health: %w", err)
	}
	return out, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
