package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// maxSessions bounds the console sessions kept: a flood of sign-ins ends
// the oldest, never grows the table without bound.
const maxSessions = 10_000

// CreateSession stores a console session under key (the hash of its
// cookie's id), dropping the expired ones and, past maxSessions, the
// oldest.
func (s *Store) CreateSession(ctx context.Context, key []byte, csrf string, expires, now time.Time) error {
	_, err := s.pool.Exec(ctx, `
		WITH expired AS (DELETE FROM dispatch_console_session WHERE expires_at <= $4),
		over AS (DELETE FROM dispatch_console_session WHERE key IN (
			SELECT key FROM dispatch_console_session WHERE expires_at > $4 ORDER BY expires_at DESC OFFSET $5))
		INSERT INTO dispatch_console_session (key, csrf, expires_at) VALUES ($1, $2, $3)`,
		key, csrf, expires, now, maxSessions-1)
	if err != nil {
		return fmt.Errorf("store: create session: %w", interpret(err))
	}
	return nil
}

// GetSession returns the CSRF token and end of the session stored under
// key; found is false when there is none, or it has ended by now.
func (s *Store) GetSession(ctx context.Context, key []byte, now time.Time) (csrf string, expires time.Time, found bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT csrf, expires_at FROM dispatch_console_session WHERE key = $1 AND expires_at > $2`,
		key, now).Scan(&csrf, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("store: get session: %w", interpret(err))
	}
	return csrf, expires, true, nil
}

// DeleteSession ends the session stored under key.
func (s *Store) DeleteSession(ctx context.Context, key []byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM dispatch_console_session WHERE key = $1`, key); err != nil {
		return fmt.Errorf("store: delete session: %w", interpret(err))
	}
	return nil
}
