package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SetAfterCredentialsRead installs a hook that runs between a credentials
// cache miss's read and its cache write.
func SetAfterCredentialsRead(s *Store, fn func()) { s.afterCredentialsRead = fn }

// ClaimManySQL is the claim fast path's statement, for EXPLAIN.
var ClaimManySQL = claimManySQL

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
