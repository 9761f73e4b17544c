package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// ReplayJob creates a new PENDING job from a terminal one (replayOf set).
func (s *Store) ReplayJob(ctx context.Context, id int64) (dispatch.Job, error) {
	var out dispatch.Job
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.replay(ctx, tx, id)
		return err
	})
	if err == nil {
		s.notify()
	}
	return out, err
}

func (s *Store) replay(ctx context.Context, tx pgx.Tx, id int64) (dispatch.Job, error) {
	orig, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobCols("dispatch_job")+` FROM dispatch_job WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return orig, notFound("job", id)
	}
	if err != nil {
		return orig, fmt.Errorf("store: replay job %d: %w", id, err)
	}
	n, err := s.replayOf(ctx, orig)
	if err != nil {
		return dispatch.Job{}, err
	}
	stored, _, err := s.insertJobs(ctx, tx, []*dispatch.Job{n}, false)
	if err != nil {
		return dispatch.Job{}, err
	}
	return stored[0], nil
}

// replayOf is the new job that replays orig, once its credentials are
// checked against its target. Credentials deleted, or that may not be sent
// to its target, are EUnprocessable: the request named no credentials, the
// job did.
func (s *Store) replayOf(ctx context.Context, orig dispatch.Job) (*dispatch.Job, error) {
	if !orig.Status.Terminal() {
		return nil, dispatch.Errorf(dispatch.EConflict, "job %d is %s; only finished jobs can be replayed", orig.ID, orig.Status)
	}
	n := orig
	n.ReplayOf, n.IdempotencyKey, n.ScheduledFor = orig.ID, "", nil
	if n.ExpiresAt != nil && !n.ExpiresAt.After(time.Now()) {
		n.ExpiresAt = nil // an expired job's replay is meant to be delivered
	}
	if err := s.checkCredentials(ctx, n.CredentialsID, n.TargetURL); err != nil {
		var de *dispatch.Error
		switch {
		case !errors.As(err, &de):
			return nil, err
		case de.Code == dispatch.EInvalid: // the one problem checkCredentials names: they do not exist
			return nil, credentialsDeleted(orig.ID, n.CredentialsID)
		case de.Code == dispatch.EUnprocessable:
			return nil, dispatch.Errorf(dispatch.EUnprocessable, "job %d cannot be replayed: %s", orig.ID, de.Message)
		}
		return nil, err
	}
	return &n, nil
}

// credentialsDeleted is why job id cannot be replayed: its credentials
// creds were deleted.
func credentialsDeleted(id, creds int64) error {
	return dispatch.Errorf(dispatch.EUnprocessable, "job %d cannot be replayed: its credentials %d were deleted", id, creds)
}

// redriveBytes bounds the payloads one redrive replays (and answers with):
// a thousand dead letters of a megabyte each would hold gigabytes.
const redriveBytes = 8 << 20

// ReplayJobs replays up to limit terminal jobs matching f (dead-letter
// redrive), the oldest it finds, in one transaction, and at most
// redriveBytes of their payloads (at least one job; More says when it
// stopped there): a caller repeats it for the rest. The replays are
// written group by group, each group's in its places' order. It returns the new jobs, and
// the matching jobs it cannot replay (their credentials were deleted), each
// with its reason: those are reported, not counted against limit, and never
// stop the rest.
//
// A job replayed before, by an earlier or a concurrent redrive, is not
// replayed again. The originals are locked (FOR UPDATE SKIP LOCKED) for the
// whole transaction, and whether they were replayed is checked again once
// they are locked: under READ COMMITTED the first check runs on a snapshot
// that may predate a concurrent redrive's commit. So two overlapping
// redrives split the dead letters between them; the second answers only
// with what it replayed itself, possibly nothing.
func (s *Store) ReplayJobs(ctx context.Context, f dispatch.JobFilter, limit int) (dispatch.ReplayResult, error) {
	where, args := s.replayableWhere(f)
	var out dispatch.ReplayResult
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		out = dispatch.ReplayResult{}
		// The selection filters as the console's searches do (see browse).
		if _, err := tx.Exec(ctx, browseSettings); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, credentials_id FROM dispatch_job`+where+` AND `+credsGone+
			fmt.Sprintf(` ORDER BY id LIMIT %d`, limit), args...)
		if err != nil {
			return err
		}
		type orphan struct{ id, creds int64 }
		orphans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (orphan, error) {
			var o orphan
			return o, r.Scan(&o.id, &o.creds)
		})
		if err != nil {
			return err
		}
		for _, o := range orphans {
			out.Failed = append(out.Failed, dispatch.ReplayFailure{JobID: o.id, Err: credentialsDeleted(o.id, o.creds)})
		}
		rows, err = tx.Query(ctx, `SELECT id FROM dispatch_job`+where+` AND NOT (`+credsGone+`)`+
			fmt.Sprintf(` ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED`, limit), args...)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(locked) == 0 {
			return err
		}
		// A new statement, so a new snapshot: it sees every redrive that
		// held one of these locks before us, since it has committed. Each
		// group's jobs come in their places' order, so that their replays
		// take their places in it again (ids follow the creating replica's
		// clock, places the commits). Only the payloads' sizes are read
		// here (octet_length reads a stored value's header, not the value).
		rows, err = tx.Query(ctx, `SELECT id, coalesce(octet_length(payload), 0) + coalesce((SELECT octet_length(p.body)
				FROM dispatch_payload p WHERE p.job_id = dispatch_job.id), 0)
			FROM dispatch_job WHERE id = ANY($1)
				AND NOT EXISTS (SELECT 1 FROM dispatch_job r WHERE r.replay_of = dispatch_job.id)
			ORDER BY group_id, seq, id`, locked)
		if err != nil {
			return err
		}
		sized, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
			var s [2]int64
			return s, r.Scan(&s[0], &s[1])
		})
		if err != nil {
			return err
		}
		// At most redriveBytes of payloads a call: each is held here, in its
		// replay and in the answer. The rest stay dead letters for the
		// next call. The stored sizes bound what is read (a stored body is
		// never larger than its payload, give or take its format byte);
		// the payloads' own sizes bound what is kept.
		var (
			take   []int64
			stored int64
		)
		for _, s := range sized {
			if len(take) > 0 && stored+s[1] > redriveBytes+int64(len(take)) {
				out.More = true
				break
			}
			stored += s[1]
			take = append(take, s[0])
		}
		if len(take) == 0 {
			return nil
		}
		rows, err = tx.Query(ctx, `SELECT `+jobCols("dispatch_job")+` FROM dispatch_job WHERE id = ANY($1)
			ORDER BY group_id, seq, id`, take)
		if err != nil {
			return err
		}
		var (
			origs []dispatch.Job
			held  int
		)
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return err
			}
			if len(origs) > 0 && held+len(j.Payload) > redriveBytes {
				out.More = true
				break
			}
			held += len(j.Payload)
			origs = append(origs, j)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var replays []*dispatch.Job
		for _, orig := range origs {
			n, err := s.replayOf(ctx, orig)
			if dispatch.ErrorCode(err) == dispatch.EUnprocessable {
				// Its credentials went away since the query above, or may
				// no longer be sent to its target (their allowedTargets):
				// reported, and the rest goes on.
				out.Failed = append(out.Failed, dispatch.ReplayFailure{JobID: orig.ID, Err: err})
				continue
			}
			if err != nil {
				return err
			}
			replays = append(replays, n)
		}
		if len(replays) == 0 {
			return nil
		}
		// One statement: it takes every group's lock at once, in order, and
		// the redrive holds them until it commits. Written one by one, the
		// replays took them one at a time, so two redrives sharing groups
		// could each wait for the other (a deadlock, one answered 500).
		out.Jobs, _, err = s.insertJobs(ctx, tx, replays, false)
		return err
	})
	switch pgCode(err) {
	case "57014": // query_canceled: the statement timeout of browseSettings
		return dispatch.ReplayResult{}, dispatch.Errorf(dispatch.EUnavailable,
			"a statement of the redrive took longer than %s (a selection too wide, or another redrive holding its jobs' groups); nothing was replayed: try again, or narrow it", ReadTimeout)
	case "40P01": // deadlock_detected
		return dispatch.ReplayResult{}, dispatch.Errorf(dispatch.EUnavailable, "the redrive met another one; nothing was replayed: try again")
	}
	if err != nil {
		return dispatch.ReplayResult{}, fmt.Errorf("store: bulk replay: %w", err)
	}
	if len(out.Jobs) > 0 {
		s.notify()
	}
	return out, nil
}

// replayableWhere selects the finished jobs matching f not replayed before:
// running the same redrive twice does not deliver the same dead letters
// twice. With a retention, only the jobs within it: one past it is kept
// only while its partition holds a live job, and its replay, made later in
// a later partition, may be gone already, so it would be redriven again,
// as old as it is. (The bound moves by the minute, so the statement's text
// is planned afresh once a minute at most.)
func (s *Store) replayableWhere(f dispatch.JobFilter) (string, []any) {
	where, args := filterWhere(f)
	terminal := "status IN ('COMPLETED','ERROR','CANCELLED','EXPIRED') AND NOT EXISTS (" +
		"SELECT 1 FROM dispatch_job r WHERE r.replay_of = dispatch_job.id)"
	if s.retention > 0 {
		terminal += " AND id >= " + strconv.FormatInt(IDAt(time.Now().Add(-s.retention).Truncate(time.Minute)), 10)
	}
	if where == "" {
		return " WHERE " + terminal, args
	}
	return where + " AND " + terminal, args
}

// credsGone selects the jobs whose credentials were deleted: a redrive
// reports them, and replays none.
const credsGone = "credentials_id IS NOT NULL AND NOT EXISTS (" +
	"SELECT 1 FROM dispatch_credentials c WHERE c.id = dispatch_job.credentials_id)"

// CountReplayable counts the jobs a ReplayJobs with f would replay (without
// its limit): the dry run of a redrive. Jobs whose credentials were
// deleted are not counted: the redrive reports them, and replays none.
func (s *Store) CountReplayable(ctx context.Context, f dispatch.JobFilter) (int, error) {
	where, args := s.replayableWhere(f)
	var n int
	err := s.browse(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM dispatch_job`+where+` AND NOT (`+credsGone+`)`, args...).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("store: count replayable: %w", err)
	}
	return n, nil
}
