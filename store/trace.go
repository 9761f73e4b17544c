package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TraceContext returns the W3C trace context stored with job id at its
// creation ("" when it has none). It is read only with tracing on, apart
// from the job's row: the claim, on every delivery's path, does not carry
// the column.
func (s *Store) TraceContext(ctx context.Context, id int64) (string, error) {
	var tc *string
	err := s.pool.QueryRow(ctx, `SELECT trace_context FROM dispatch_job WHERE id = $1`, id).Scan(&tc)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notFound("job", id)
	}
	if err != nil {
		return "", fmt.Errorf("store: trace context of job %d: %w", id, err)
	}
	return deref(tc), nil
}
