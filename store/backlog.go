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
// idx_dispatch_unsent and from the live jobs on the queue (through
// idx_dispatch_status). Nothing reads the finished history, so its cost
// follows the backlog, not the table.
//
// A job held back by its group is not behind: the claim refuses it while
// an earlier job of its group is live (dispatch_live_predecessor), and the
// queue holds the group behind that job's pointer. So the count of unsent
// jobs takes the publisher's own test (PublishDueExcept): a pointer sent
// again (stepped aside for its group, pointer_gen above 0) waits in the
// outbox, unsent on purpose, until its predecessor finishes, while a first
// pointer goes out at once. The earliest due time takes the claim's: only
// a job that could be delivered now waits, or one failing target's backoff
// would age the backlog of every job queued behind it in its group.
//
// The earliest due time is read in due order and stops at the first job
// without a live predecessor (the subquery's OFFSET 0 keeps the planner
// from testing every row before it sorts): with a healthy backlog that is
// the first row, and only the rows of a held group due before it cost a
// look-up each.
const backlogQuery = `
SELECT
	(SELECT count(*) FROM dispatch_job WHERE status = 'PENDING'),
	(SELECT count(*) FROM dispatch_job WHERE status = 'IN_PROGRESS'),
	(SELECT count(*) FROM dispatch_job WHERE status = 'FAILED'),
	(SELECT count(*) FROM dispatch_job
		WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS') AND next_attempt_at <= $1
			AND (pointer_gen = 0 OR group_id IS NULL OR NOT dispatch_live_predecessor(group_id, seq))),
	LEAST(
		(SELECT due FROM (
			SELECT next_attempt_at AS due, group_id, seq FROM dispatch_job
			WHERE queued_at IS NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS')
				AND (status || '') IN ('PENDING', 'FAILED') AND next_attempt_at <= $1
			ORDER BY next_attempt_at OFFSET 0) unsent
		WHERE group_id IS NULL OR NOT dispatch_live_predecessor(group_id, seq) LIMIT 1),
		(SELECT due FROM (
			SELECT next_attempt_at AS due, group_id, seq FROM dispatch_job
			WHERE queued_at IS NOT NULL AND status IN ('PENDING', 'FAILED', 'IN_PROGRESS')
				AND (status || '') IN ('PENDING', 'FAILED') AND next_attempt_at <= $1
			ORDER BY next_attempt_at OFFSET 0) queued
		WHERE group_id IS NULL OR NOT dispatch_live_predecessor(group_id, seq) LIMIT 1))`

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
