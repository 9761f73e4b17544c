package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// statsQuery counts a window's attempts by outcome per bucket, with the
// latency percentiles, and (ROLLUP) the same for the whole window in one
// pass. idx_attempt_stats makes it an index-only scan of the window.
const statsQuery = `
SELECT date_bin($3::interval, attempted_at, $1) AS bucket,
	count(*) FILTER (WHERE status = 'SUCCESS'),
	count(*) FILTER (WHERE status = 'FAILURE'),
	count(*) FILTER (WHERE status = 'TIMEOUT'),
	count(*) FILTER (WHERE status = 'NETWORK_ERROR'),
	count(*) FILTER (WHERE status = 'BLOCKED'),
	percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_millis),
	percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_millis)
FROM dispatch_attempt
WHERE attempted_at >= $1 AND attempted_at < $2
GROUP BY ROLLUP (1)
ORDER BY 1 NULLS FIRST`

// failedJobsQuery counts the jobs that ended undelivered in a window: an
// index-only scan of idx_dispatch_failed_done, whose entries are those
// jobs only.
const failedJobsQuery = `
SELECT count(*) FROM dispatch_job
WHERE status IN ('ERROR', 'EXPIRED') AND completed_at >= $1 AND completed_at < $2`

// Stats returns the delivery attempts of [to-window, to) in buckets of
// bucket, aligned to bucket boundaries; every bucket is present, empty
// ones with zero counts.
func (s *Store) Stats(ctx context.Context, to time.Time, window, bucket time.Duration) (dispatch.Stats, error) {
	to = to.UTC()
	// The last bucket is the one now falls in; the window ends with it.
	end := to.Truncate(bucket).Add(bucket)
	from := end.Add(-window)
	out := dispatch.Stats{From: from, To: end, Bucket: bucket, Total: dispatch.StatsBucket{Start: from}}
	byStart := map[time.Time]dispatch.StatsBucket{}
	err := s.browse(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, statsQuery, from, end, bucket)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				start *time.Time
				b     dispatch.StatsBucket
			)
			if err := rows.Scan(&start, &b.Success, &b.Failure, &b.Timeout, &b.NetworkError, &b.Blocked,
				&b.P50Millis, &b.P99Millis); err != nil {
				return err
			}
			if start == nil { // the ROLLUP row: the whole window
				b.Start = from
				out.Total = b
				continue
			}
			b.Start = start.UTC()
			byStart[b.Start] = b
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return tx.QueryRow(ctx, failedJobsQuery, from, end).Scan(&out.JobsFailed)
	})
	if err != nil {
		return out, fmt.Errorf("store: stats: %w", err)
	}
	for t := from; t.Before(end); t = t.Add(bucket) {
		b, ok := byStart[t]
		if !ok {
			b.Start = t
		}
		out.Buckets = append(out.Buckets, b)
	}
	return out, nil
}
