package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// A rotation reads the current secret from the table, not from a replica's
// cache: after replica A rotates, replica B (which cached the credentials
// before) rotating again keeps A's new secret as the previous one, so
// receivers that already switched to it keep verifying.
func TestRotateCredentialsAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b, _ := keyedReplicas(t)
	c := createCredentials(t, a)
	getCredentials(t, b, c.ID) // B caches the original secret

	if _, err := a.RotateCredentials(t.Context(), c.ID, "whsec_from_replica_a", time.Hour); err != nil {
		t.Fatal(err)
	}
	rot, err := b.RotateCredentials(t.Context(), c.ID, "whsec_from_replica_b", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{"returned": newest(rot), "stored": newest(getCredentials(t, a, c.ID))} {
		if got != "whsec_from_replica_a" {
			t.Errorf("%s previous secret = %q, want replica A's secret (B rotated from its stale cache)", name, got)
		}
	}
}

// Concurrent rotations are serialized: each one's previous secret is the
// secret some other rotation (or the original) made current, so the chain
// of secrets has no gap.
func TestRotateCredentialsConcurrently(t *testing.T) {
	t.Parallel()
	st, _ := setupKeyed(t, newKey(t))
	c := createCredentials(t, st)
	const n = 8
	secrets := make([]string, n)
	previous := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		secrets[i] = "whsec_concurrent_" + string(rune('a'+i))
		wg.Go(func() {
			rot, err := st.RotateCredentials(t.Context(), c.ID, secrets[i], time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			previous[i] = newest(rot)
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, p := range previous {
		if seen[p] {
			t.Errorf("two rotations both replaced %q: one rotation's secret was lost", p)
		}
		seen[p] = true
	}
	if !seen[secret] {
		t.Errorf("no rotation replaced the original secret; previous secrets: %v", previous)
	}
}

// newest returns the secret the last rotation replaced.
func newest(c dispatch.Credentials) string {
	if len(c.Previous) == 0 {
		return ""
	}
	return c.Previous[0].Secret
}
