package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// reportRouterSQL stores a router's report, stamped with the database's
// clock (routers on other hosts may have theirs off), and deletes the rows
// of routers silent for a day.
const reportRouterSQL = `
WITH forgotten AS (
	DELETE FROM dispatch_router WHERE reported_at < now() - interval '1 day' AND id <> $1)
INSERT INTO dispatch_router (id, host, version, pools, queues, in_flight, warnings, started_at, reported_at, stopped_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), $9)
ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, version = EXCLUDED.version, pools = EXCLUDED.pools,
	queues = EXCLUDED.queues, in_flight = EXCLUDED.in_flight, warnings = EXCLUDED.warnings,
	reported_at = now(), stopped_at = EXCLUDED.stopped_at`

// ReportRouter stores what a router reports about itself.
func (s *Store) ReportRouter(ctx context.Context, r dispatch.RouterReport) error {
	if _, err := s.pool.Exec(ctx, reportRouterSQL, r.ID, r.Host, r.Version, r.Pools, jsonOrNull(r.Queues), jsonOrNull(r.InFlight),
		jsonOrNull(r.Warnings), r.StartedAt, r.StoppedAt); err != nil {
		return fmt.Errorf("store: report router %s: %w", r.ID, err)
	}
	return nil
}

// Routers returns the routers' last reports: the running ones first, then
// those stopped or gone; each by host and start.
func (s *Store) Routers(ctx context.Context) ([]dispatch.RouterReport, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, host, version, pools, queues, in_flight, warnings, started_at, reported_at, stopped_at, now() - reported_at
		FROM dispatch_router
		ORDER BY (stopped_at IS NULL AND reported_at > now() - $1::interval) DESC, host, started_at, id`,
		dispatch.RouterGoneAfter)
	if err != nil {
		return nil, fmt.Errorf("store: routers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dispatch.RouterReport, error) {
		var r dispatch.RouterReport
		err := row.Scan(&r.ID, &r.Host, &r.Version, &r.Pools, &r.Queues, &r.InFlight, &r.Warnings, &r.StartedAt, &r.ReportedAt, &r.StoppedAt, &r.Silence)
		r.StartedAt, r.ReportedAt, r.StoppedAt = r.StartedAt.UTC(), r.ReportedAt.UTC(), utcPtr(r.StoppedAt)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: routers: %w", err)
	}
	return out, nil
}

// jsonOrNull is raw as a jsonb parameter, or SQL NULL when it is empty (a
// part of a report that a router did not send).
func jsonOrNull(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return raw
}
