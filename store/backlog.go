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
// idx_dispatch_unsent, the earliest due time from the live jobs (through
// idx_dispatch_status and idx_dispatch_live_group). Nothing reads the
// finished history, so its cost follows the live jobs, not the table.
//
// A job held back by its group is not behind: the claim refuses it while
// an earlier job of its group is live, and the queue holds the group behind
// that job's pointer. Only a group's head (its live job placed first) can
// be delivered, so the statement finds the heads once (heads: the live
// grouped jobs in group order, through idx_dispatch_live_group) instead of
// asking, for each held job, whether an earlier one is live: a look-up per
// held job would make one failing target's long group cost the read
// seconds (docs/benchmarks.md, "A long-held group").
//
// So the count of unsent jobs takes the publisher's own test
// (PublishDueExcept): a pointer sent again (stepped aside for its group,
// pointer_gen above 0) waits in the outbox, unsent on purpose, until it is
// its group's head, while a first pointer goes out at once. The earliest
// due time takes the claim's: only a job that could be delivered now (one
// without a group, or a head) waits, or one failing target's backoff would
// age the backlog of every job queued behind it in its group.
const backlogQuery = `
WITH heads AS MATERIALIZED (
	SELECT DISTINCT ON (group_id) status, next_attempt_at, queued_at, pointer_gen
	FROM dispatch_job
	WHERE status IN ('PENDING', 'IN_PROGRESS', 'FAILED') AND group_id IS NOT NULL
	ORDER BY group_id, seq)
SELECT
	(SELECT count(*) FROM dispatch_job WHERE status = 'PENDING'),
	(SELECT count(*) FROM dispatch_job WHERE status = 'IN_PROGRESS'),
	(SELECT count(*) FROM dispatch_job WHERE status = 'FAILED'),
	(SELECT count(*) FROM dispatch_job
		WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS') AND next_attempt_at <= $1
			AND (pointer_gen = 0 OR group_id IS NULL))
	+ (SELECT count(*) FROM heads WHERE queued_at IS NULL AND next_attempt_at <= $1 AND pointer_gen > 0),
	LEAST(
		(SELECT min(next_attempt_at) FROM dispatch_job
			WHERE status IN ('PENDING', 'FAILED') AND group_id IS NULL AND next_attempt_at <= $1),
		(SELECT min(next_attempt_at) FROM heads WHERE status IN ('PENDING', 'FAILED') AND next_attempt_at <= $1))`

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
