package app

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/config"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// A key change can be checked before the old key is dropped: `dispatch
// rekey` ends saying that no value needs DISPATCH_ENCRYPTION_KEY_PREVIOUS
// any more, and a start with it set says how many values still need it:
// those an API replica still running with the old key wrote after the
// rekey too, which dropping it then would leave unreadable.
func TestKeyChangeSaysWhetherThePreviousKeyIsStillNeeded(t *testing.T) {
	k1, k2 := randomKey(t), randomKey(t)
	dbURL := storetest.NewDatabase(t)
	old := openWith(t, dbURL, k1, nil) // a replica still running with the old key alone
	createSealedCredentials(t, old)
	both := openWith(t, dbURL, k2, k1)
	var logs bytes.Buffer
	started := &app{cfg: config.Config{EncryptionKey: k2, PreviousEncryptionKey: k1}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	startNotes := func(want string) {
		t.Helper()
		logs.Reset()
		if err := started.notePreviousKey(t.Context(), both); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), want) {
			t.Errorf("a start with DISPATCH_ENCRYPTION_KEY_PREVIOUS set logged %q, want %q", logs.String(), want)
		}
	}
	rekey := func() string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := Run(t.Context(), []string{"rekey"}, []string{"DATABASE_URL=" + dbURL,
			"DISPATCH_ENCRYPTION_KEY=" + base64.StdEncoding.EncodeToString(k2),
			"DISPATCH_ENCRYPTION_KEY_PREVIOUS=" + base64.StdEncoding.EncodeToString(k1)}, &stdout, &stderr)
		if err != nil {
			t.Fatalf("rekey: %v\n%s", err, stderr.String())
		}
		return stdout.String()
	}

	startNotes("level=WARN msg=\"secret values are still sealed under DISPATCH_ENCRYPTION_KEY_PREVIOUS")
	startNotes("sealed_under_previous=2")
	const done = "0 left that need DISPATCH_ENCRYPTION_KEY_PREVIOUS"
	if out := rekey(); !strings.Contains(out, "re-encrypted 2 secret values") || !strings.Contains(out, done) {
		t.Errorf("rekey said %q, want 2 values re-encrypted and %q", out, done)
	}
	startNotes("no secret value needs DISPATCH_ENCRYPTION_KEY_PREVIOUS any more")

	createSealedCredentials(t, old) // after the rekey, on the replica not yet restarted
	startNotes("sealed_under_previous=2")
	if out := rekey(); !strings.Contains(out, "re-encrypted 2 secret values") || !strings.Contains(out, done) {
		t.Errorf("the second rekey said %q, want the late values re-encrypted and %q", out, done)
	}
	if err := openWith(t, dbURL, k2, nil).CheckKey(t.Context()); err != nil {
		t.Errorf("after the second rekey, the new key alone: %v", err)
	}
}

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// openWith returns a store over dbURL sealing under key: a replica with
// the keys given. Only the first one opened creates credentials.
func openWith(t *testing.T, dbURL string, key, previous []byte) *store.Store {
	t.Helper()
	sealer, err := store.NewSealer(key, previous)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := storetest.Open(t, dbURL, store.Options{NodeID: 1, Sealer: sealer})
	return st
}

func createSealedCredentials(t *testing.T, st *store.Store) {
	t.Helper()
	c := dispatch.Credentials{BearerToken: "bt_rekey_0123456789", SigningSecret: "whsec_rekey",
		Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST"}
	if err := st.CreateCredentials(t.Context(), &c); err != nil {
		t.Fatal(err)
	}
}
