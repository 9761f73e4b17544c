package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// Secrets written while no key was set (DISPATCH_INSECURE) are refused once
// a key is configured, and `dispatch rekey` (Reseal) encrypts them: the
// error message's advice works.
func TestResealEncryptsPlainTextSecrets(t *testing.T) {
	t.Parallel()
	plainSealer := newSealer(t, nil, nil)
	insecure, pool, _ := storetest.New(t, store.Options{NodeID: 1, Sealer: plainSealer})
	c := createCredentials(t, insecure)
	if !rowContains(t, pool, c.ID, secret) {
		t.Fatalf("without a key the secret should be stored in plain text (the test's premise)")
	}

	key := newKey(t)
	keyed := storeOver(t, pool, newSealer(t, key, nil))
	if err := keyed.CheckKey(t.Context()); !errors.Is(err, store.ErrUnencrypted) {
		t.Fatalf("CheckKey over plain-text secrets: err = %v, want ErrUnencrypted", err)
	}

	n, err := keyed.Reseal(t.Context())
	if err != nil {
		t.Fatalf("Reseal over plain-text secrets: %v", err)
	}
	if n != 2 { // bearer token and signing secret
		t.Errorf("Reseal rewrote %d values, want 2", n)
	}
	for _, plain := range []string{bearer, secret} {
		if rowContains(t, pool, c.ID, plain) {
			t.Errorf("after Reseal the row still holds %q in plain text", plain)
		}
	}
	fresh := storeOver(t, pool, newSealer(t, key, nil))
	if err := fresh.CheckKey(t.Context()); err != nil {
		t.Errorf("CheckKey after Reseal: %v", err)
	}
	if got := getCredentials(t, fresh, c.ID); got.BearerToken != bearer || got.SigningSecret != secret {
		t.Errorf("after Reseal: bearer %q secret %q, want the original values", got.BearerToken, got.SigningSecret)
	}
	if _, err := insecure.Reseal(t.Context()); err == nil {
		// Without a key Reseal would write plain text again; the encrypted
		// values cannot be opened, so it must refuse and change nothing.
		t.Errorf("Reseal without a key over encrypted secrets succeeded")
	}
	if rowContains(t, pool, c.ID, secret) {
		t.Errorf("a failed keyless Reseal decrypted the secret into the table")
	}
}

// rowContains reports whether the credentials row holds plain in any column.
func rowContains(t *testing.T, pool *pgxpool.Pool, id int64, plain string) bool {
	t.Helper()
	var bearerCol, secretCol, previousCol []byte
	err := pool.QueryRow(t.Context(), `SELECT bearer_token, signing_secret, (SELECT string_agg(p, ''::bytea) FROM unnest(previous_secrets) p) FROM dispatch_credentials WHERE id = $1`, id).
		Scan(&bearerCol, &secretCol, &previousCol)
	if err != nil {
		t.Fatalf("read credentials row: %v", err)
	}
	for _, col := range [][]byte{bearerCol, secretCol, previousCol} {
		if bytes.Contains(col, []byte(plain)) {
			return true
		}
	}
	return false
}
