package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// backlogQuery reads the backlog in one statement, each part through a
// partial or status index: the counts by live state from
// idx_dispatch_status (index-only), the unsent due jobs from
// idx_dispatch_unsent, and the earliest due time from the front of
// idx_dispatch_unsent and idx_dispatch_live (one index entry each, per
// partition). Nothing reads the finished history, so its cost follows the
// backlog, not the table.
const backlogQuery = `
SELECT
	(SELECT count(*) FROM dispatch_job WHERE status = 'PENDING'),
	(SELECT count(*) FROM dispatch_job WHERE status = 'IN_PROGRESS'),
	(SELECT count(*) FROM dispatch_job WHERE status = 'FAILED'),
	(SELECT count(*) FROM dispatch_job
		WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS') AND next_attempt_at <= $1),
	LEAST(
		(SELECT min(next_attempt_at) FROM dispatch_job
			WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS')
				AND (status || '') IN ('PENDING', 'FAILED') AND next_attempt_at <= $1),
		(SELECT min(next_attempt_at) FROM dispatch_job
			WHERE queued_at IS NOT NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS')
				AND (status || '') IN ('PENDING', 'FAILED') AND next_attempt_at <= $1))`

// Backlog reads how far delivery is behind at now (dispatch.Backlog).
func (s *Store) Backlog(ctx context.Context, now time.Time) (dispatch.Backlog, error) {
	var b dispatch.Backlog
	err := s.browse(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, backlogQuery, now).Scan(&b.Pending, &b.InProgress, &b.Failed, &b.Unsent, &b.OldestDue)
	})
	if err != nil {
		return dispatch.Backlog{}, fmt.Errorf("store: backlog: %w", err)
	}
	return b, nil
}
