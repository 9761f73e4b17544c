package store

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// credentialsChannel is where every change of credentials is announced
// with their id, by a trigger, when it commits (migration 024).
const credentialsChannel = "dispatch_credentials"

// watchPing is how long the watch waits for a notification before it
// checks that its connection is alive.
const watchPing = 30 * time.Second

// watchAppName names the watcher's connection in pg_stat_activity.
const watchAppName = "dispatch credentials watch"

// WatchCredentials keeps the credentials cache in step with every
// replica's changes until ctx ends: it listens on its own connection and
// drops the cached copy of the credentials each change names, so a
// rotation without a grace period, a delete or new allowed targets apply on
// this replica as soon as they commit, not when the cached copy would have
// ended (CredentialsTTL). While it is not listening (before it starts
// to, and from a lost connection until it listens again), credentials are
// read from the database on every use, and it empties the cache each time
// it starts listening: a change announced meanwhile was not heard.
func (s *Store) WatchCredentials(ctx context.Context, log *slog.Logger) {
	s.credsWatched.Store(true)
	backoff := 250 * time.Millisecond
	for {
		err := s.listenCredentials(ctx)
		if s.credsLive.Swap(false) {
			backoff = 250 * time.Millisecond // it did listen: start over
		}
		if ctx.Err() != nil {
			return
		}
		// Explain: a failed connect says why without the URL's password; a
		// connection lost while listening (a restart, an idle timeout)
		// gives the server's reason or the socket's, which hold neither.
		log.Warn("credentials watch lost its connection; reading credentials from the database until it is back",
			"err", Explain(err), "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// listenCredentials listens on one connection until it fails or ctx ends.
func (s *Store) listenCredentials(ctx context.Context) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = watchAppName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+credentialsChannel); err != nil {
		return err
	}
	s.invalidateCredentials(0) // what changed before this LISTEN was not heard
	s.credsLive.Store(true)
	for {
		// A connection that died without a word (an idle timeout on the
		// way, a failover) would leave the cache trusted and deaf: after a
		// quiet watchPing the connection is pinged.
		wait, cancel := context.WithTimeout(ctx, watchPing)
		n, err := conn.WaitForNotification(wait)
		cancel()
		if err != nil && ctx.Err() == nil && wait.Err() != nil {
			ping, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = conn.Ping(ping)
			cancel()
			if err == nil {
				continue
			}
		}
		if err != nil {
			return err
		}
		if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
			s.invalidateCredentials(id)
		} else {
			s.invalidateCredentials(0)
		}
	}
}
