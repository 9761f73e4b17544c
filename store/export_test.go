package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetAfterCredentialsRead installs a hook that runs between a credentials
// cache miss's read and its cache write.
func SetAfterCredentialsRead(s *Store, fn func()) { s.afterCredentialsRead = fn }

// ClaimManySQL is the claim fast path's statement for a batch of ids, for
// EXPLAIN.
func ClaimManySQL(s *Store, ids []int64) string {
	lo, hi := s.idBounds(ids)
	return withBounds(claimManySQL, lo, hi)
}

// ConfirmSentSQL is the send confirmation's statement for a batch of ids,
// for EXPLAIN.
func ConfirmSentSQL(s *Store, ids []int64) string {
	lo, hi := s.idBounds(ids)
	return withBounds(confirmSentSQL, lo, hi)
}

// BrowseSetting reads a setting inside a browse transaction.
func BrowseSetting(ctx context.Context, s *Store, name string) (string, error) {
	var v string
	err := s.browse(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	})
	return v, err
}

// SetBeforeKeyLookup installs a hook that runs before a create looks up the
// jobs holding idempotency keys it found taken; its error fails the look-up.
func SetBeforeKeyLookup(s *Store, fn func() error) { s.beforeKeyLookup = fn }

// CreatesWaiting is how many creates wait for the running group commit.
func CreatesWaiting(s *Store) int {
	s.creates.mu.Lock()
	defer s.creates.mu.Unlock()
	return len(s.creates.queue)
}

// StartHistoryAt makes an empty database's partitions begin at t instead of
// at its creation, so that a test or benchmark can seed a past: the legacy
// partitions (empty) are replaced by ones ending at t, and the upkeep is
// run once a day from t to now.
func StartHistoryAt(ctx context.Context, s *Store, t time.Time, interval time.Duration) error {
	hi := IDAt(t)
	for _, parent := range partitioned {
		legacy := parent + "_legacy"
		// The partitions the store made when it was opened go too.
		rows, err := s.pool.Query(ctx, `SELECT name FROM dispatch_partition WHERE parent = $1 AND name <> $2`, parent, legacy)
		if err != nil {
			return err
		}
		made, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, name := range made {
			if _, err := s.pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := s.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE %s; DELETE FROM dispatch_partition WHERE parent = '%s';
			CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (MINVALUE) TO (%d)`, legacy, parent, legacy, parent, hi)); err != nil {
			return err
		}
		if _, err := s.pool.Exec(ctx, `INSERT INTO dispatch_partition (name, parent, lo, hi, from_time, to_time) VALUES ($1, $2, NULL, $3, NULL, $4)`,
			legacy, parent, hi, t); err != nil {
			return err
		}
	}
	for day := t; day.Before(time.Now()); day = day.Add(24 * time.Hour) {
		if _, err := s.MaintainHistory(ctx, day, History{Interval: interval}); err != nil {
			return err
		}
	}
	_, err := s.MaintainHistory(ctx, time.Now(), History{Interval: interval})
	return err
}

// FilterWhere is the search's WHERE clause for f, for EXPLAIN.
var FilterWhere = filterWhere

// GroupLockSpace is the first key of the groups' advisory locks.
const GroupLockSpace = groupLockSpace

// EventJobsSQL is the statement that lists an event's jobs, for EXPLAIN.
func EventJobsSQL(s *Store, eventID int64) string {
	lo, _ := s.idBounds([]int64{eventID})
	return withBounds(eventJobsSQL, lo, "")
}

// CredentialsWatchLive reports whether s's credentials watch is listening.
func CredentialsWatchLive(s *Store) bool { return s.credsLive.Load() }

// WatchAppName names the credentials watch's connection.
const WatchAppName = watchAppName

// RedriveBytes bounds the payloads one redrive replays.
const RedriveBytes = redriveBytes
