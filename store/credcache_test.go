package store_test

import (
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// staleRead starts a cache miss for id and holds it between its read and
// its cache write while invalidate runs; it returns once the miss is done.
func staleRead(t *testing.T, st *store.Store, id int64, invalidate func()) {
	t.Helper()
	read, resume := make(chan struct{}), make(chan struct{})
	first := true
	store.SetAfterCredentialsRead(st, func() {
		if first {
			first = false
			close(read)
			<-resume
		}
	})
	defer store.SetAfterCredentialsRead(st, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = st.GetCredentials(t.Context(), id) // its caller raced the invalidation: either answer is fine
	}()
	<-read
	invalidate()
	close(resume)
	<-done
}

// A cache miss that read the row before a delete committed must not put
// the deleted credentials back into the cache after the delete returned.
func TestCredentialsCacheNoStaleWriteAfterDelete(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	c := createCredentials(t, st)
	staleRead(t, st, c.ID, func() {
		if err := st.DeleteCredentials(t.Context(), c.ID); err != nil {
			t.Fatal(err)
		}
	})
	if got, err := st.GetCredentials(t.Context(), c.ID); dispatch.ErrorCode(err) != dispatch.ENotFound {
		t.Errorf("after the delete returned: GetCredentials = %d, %v; want not found", got.ID, err)
	}
}

// The same race after a rotation must not leave the old secret signing.
func TestCredentialsCacheNoStaleWriteAfterRotate(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	c := createCredentials(t, st)
	const next = "whsec_bmV4dC1zZWNyZXQtMDEyMzQ1Njc4OWFiY2RlZg=="
	staleRead(t, st, c.ID, func() {
		if _, err := st.RotateCredentials(t.Context(), c.ID, next, time.Hour); err != nil {
			t.Fatal(err)
		}
	})
	if got := getCredentials(t, st, c.ID); got.SigningSecret != next {
		t.Errorf("after the rotation returned: signing with the old secret")
	}
}
