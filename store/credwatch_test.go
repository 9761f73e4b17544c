package store_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// A rotation without a grace period, and a delete, apply on every replica
// as they commit: each replica's cache hears of them (WatchCredentials),
// also after its watch lost its connection. Before, another replica went on
// signing with the old secret, or sending deleted credentials, for as long
// as its cached copy lasted (a minute).
func TestCredentialsChangesReachEveryReplicasCache(t *testing.T) {
	t.Parallel()
	a, b, pool := keyedReplicas(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	var logs lockedBuffer
	go func() { defer close(done); b.WatchCredentials(ctx, slog.New(slog.NewTextHandler(&logs, nil))) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, func() bool { return store.CredentialsWatchLive(b) }, "replica B's watch listening")

	c := createCredentials(t, a)
	getCredentials(t, b, c.ID) // B caches the original secret
	secretOnB := func(want string) func() bool {
		return func() bool {
			got, err := b.GetCredentials(t.Context(), c.ID)
			return err == nil && got.SigningSecret == want
		}
	}
	if _, err := a.RotateCredentials(t.Context(), c.ID, "whsec_rotated_at_once", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, secretOnB("whsec_rotated_at_once"), "replica B signing with the secret A rotated to")

	// The watch's connection is cut: a change made before it listens again
	// is not missed.
	if _, err := pool.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, store.WatchAppName); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RotateCredentials(t.Context(), c.ID, "whsec_while_cut", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, secretOnB("whsec_while_cut"), "replica B signing with the secret rotated while its watch was cut")
	waitUntil(t, func() bool { return store.CredentialsWatchLive(b) }, "replica B's watch listening again")
	// The log says why the watch lost its connection (the server's
	// reason, or pgx's "conn closed"), not that the URL was wrong.
	if l := logs.String(); !strings.Contains(l, "lost its connection") || strings.Contains(l, "invalid database URL") {
		t.Errorf("the watch's log after its connection was cut:\n%s\nwant why, not an invalid URL", l)
	}
	// Listening again, B uses its cache again: what it held from before the
	// cut (the first rotation's secret) was dropped, since the change made
	// meanwhile was not heard.
	if !secretOnB("whsec_while_cut")() {
		t.Errorf("listening again, replica B signs with a secret from before the cut")
	}

	if err := a.DeleteCredentials(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		_, err := b.GetCredentials(t.Context(), c.ID)
		return dispatch.ErrorCode(err) == dispatch.ENotFound
	}, "replica B finding the credentials deleted")
}

// lockedBuffer is a bytes.Buffer a logger may write while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
