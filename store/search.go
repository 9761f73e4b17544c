package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dispatchhq/dispatch"
)

// browseSettings plan a transaction's statements as PostgreSQL does by
// default, and each for its arguments (see deliveryPlans and browse), and
// bound each statement to ReadTimeout.
const browseSettings = `SET LOCAL enable_seqscan = on; SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL statement_timeout = 5000`

// ReadTimeout bounds each statement of the console's searches, counts and
// statistics: past it the read fails with a clear error, not a hung page.
const ReadTimeout = 5 * time.Second

// browse runs fn in a read-only transaction planned for what it asks:
// sequential scans allowed, each statement planned for its arguments. The
// console's searches go through it: their filters are whatever an operator
// typed. Its one snapshot (REPEATABLE READ) makes a page and its total
// count agree.
func (s *Store) browse(ctx context.Context, fn func(pgx.Tx) error) error {
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, browseSettings); err != nil {
			return err
		}
		return fn(tx)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled: the statement timeout
		return dispatch.Errorf(dispatch.EUnavailable,
			"the read took longer than %s; narrow it (a status, a source or type, createdAfter) and try again", ReadTimeout)
	}
	return err
}

// timeRange adds a creation-time filter as an id range too: ids are
// time-sorted, so the range reads only the partitions and index entries of
// those times. The id bounds are a minute wider than the times, for ids
// and created_at taken a moment apart.
func timeRange(add func(cond string, arg any), after, before *time.Time) {
	if after != nil {
		add("id >= ?", IDAt(after.Add(-time.Minute)))
		add("created_at >= ?", *after)
	}
	if before != nil {
		add("id < ?", IDAt(before.Add(time.Minute)))
		add("created_at < ?", *before)
	}
}

// newestPage reads one page of table's rows matching where (with args),
// newest first, and how many match, counted up to dispatch.CountLimit (a
// total above it means "more than CountLimit"), from one snapshot
// (browse).
func newestPage[T any](ctx context.Context, s *Store, table, columns, where string, args []any, page, size int,
	scan func(pgx.CollectableRow) (T, error)) ([]T, int, error) {
	var (
		out   []T
		total int
	)
	paged := append(slices.Clip(args), size, page*size)
	err := s.browse(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s%s LIMIT %d) c`,
			table, where, dispatch.CountLimit+1), args...).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+columns+` FROM `+table+where+
			fmt.Sprintf(` ORDER BY id DESC LIMIT $%d OFFSET $%d`, len(paged)-1, len(paged)), paged...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scan)
		return err
	})
	return out, total, err
}

// where builds a statement's WHERE clause: each condition names its
// argument "?", numbered in the order they are added.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, arg any) {
	w.args = append(w.args, arg)
	w.conds = append(w.conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(w.args))))
}

// sql is " WHERE a AND b …", or "" with no condition.
func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

func filterWhere(f dispatch.JobFilter) (string, []any) {
	var w where
	add := w.add
	if len(f.Statuses) > 0 {
		ss := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			ss[i] = string(st)
		}
		add("status = ANY(?)", ss)
	}
	if f.Source != "" {
		add("source = ?", f.Source)
	}
	if f.Type != "" {
		add("type = ?", f.Type)
	}
	if f.GroupID != "" {
		add("group_id = ?", f.GroupID)
	}
	timeRange(add, f.CreatedAfter, f.CreatedBefore)
	if f.Before > 0 {
		add("id < ?", f.Before)
	}
	if len(f.Metadata) > 0 {
		// The metadata index holds finished jobs only (metadataIndex); live
		// ones, few by comparison, are found through the status index. The
		// live arm's test is written differently (COALESCE; metadata is
		// never NULL) so that the planner does not factor the two tests
		// out of the OR, which leaves neither arm an index to go by.
		add(`((status IN (`+finishedStatuses+`) AND metadata @> ?)
			OR (status IN (`+liveStatuses+`) AND COALESCE(metadata, '{}') @> ?))`, f.Metadata)
	}
	return w.sql(), w.args
}

// SearchJobs returns one page of matching jobs, newest first, and the total.
func (s *Store) SearchJobs(ctx context.Context, f dispatch.JobFilter, page, size int) ([]dispatch.Job, int, error) {
	where, args := filterWhere(f)
	jobs, total, err := newestPage(ctx, s, "dispatch_job", jobCols("dispatch_job"), where, args, page, size,
		func(r pgx.CollectableRow) (dispatch.Job, error) { return scanJob(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("store: search jobs: %w", err)
	}
	return jobs, total, nil
}
