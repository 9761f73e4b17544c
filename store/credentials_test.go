package store_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

const (
	bearer = "bt_live_8c1f3a9e0d2b4c6f"
	secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func newSealer(t *testing.T, key, previous []byte) *store.Sealer {
	t.Helper()
	s, err := store.NewSealer(key, previous)
	if err != nil {
		t.Fatalf("NewSealer: %v", err)
	}
	return s
}

// setupKeyed returns a Store sealing under key, and its pool.
func setupKeyed(t *testing.T, key []byte) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1, Sealer: newSealer(t, key, nil)})
	return st, pool
}

// storeOver returns another Store (another replica) over the same database.
func storeOver(t *testing.T, pool *pgxpool.Pool, sealer *store.Sealer) *store.Store {
	t.Helper()
	st, err := store.New(pool, store.Options{NodeID: 2, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// keyedReplicas returns two Stores (two API replicas) sealing under one
// key over one database, and its pool.
func keyedReplicas(t *testing.T) (a, b *store.Store, pool *pgxpool.Pool) {
	t.Helper()
	key := newKey(t)
	a, pool = setupKeyed(t, key)
	return a, storeOver(t, pool, newSealer(t, key, nil)), pool
}

func createCredentials(t *testing.T, st *store.Store) dispatch.Credentials {
	t.Helper()
	c := dispatch.Credentials{BearerToken: bearer, SigningSecret: secret, Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST",
		AllowedTargets: []string{"https://example.com"}} // newJob's and newSubscription's targets
	if err := st.CreateCredentials(t.Context(), &c); err != nil {
		t.Fatalf("CreateCredentials: %v", err)
	}
	if c.ID == 0 || c.CreatedAt.IsZero() {
		t.Fatalf("CreateCredentials did not set id and times: %+v", c)
	}
	return c
}

func getCredentials(t *testing.T, st *store.Store, id int64) dispatch.Credentials {
	t.Helper()
	c, err := st.GetCredentials(t.Context(), id)
	if err != nil {
		t.Fatalf("GetCredentials(%d): %v", id, err)
	}
	return c
}

func TestCredentialsEncryptedAtRest(t *testing.T) {
	t.Parallel()
	st, pool := setupKeyed(t, newKey(t))
	c := createCredentials(t, st)
	const next = "whsec_second_secret_after_rotation"
	if _, err := st.RotateCredentials(t.Context(), c.ID, next, time.Hour); err != nil {
		t.Fatal(err)
	}

	rows, err := pool.Query(t.Context(), `SELECT bearer_token, signing_secret, (SELECT string_agg(p, ''::bytea) FROM unnest(previous_secrets) p), algorithm, signature_scheme FROM dispatch_credentials`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		var raw []byte
		for _, v := range vals {
			switch v := v.(type) {
			case []byte:
				raw = append(raw, v...)
			case string:
				raw = append(raw, v...)
			}
		}
		for _, plain := range []string{bearer, secret, next} {
			if bytes.Contains(raw, []byte(plain)) {
				t.Errorf("the credentials row holds %q in plain text", plain)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("read %d credentials rows, want 1", n)
	}

	got := getCredentials(t, st, c.ID)
	if got.BearerToken != bearer || got.SigningSecret != next || !slices.Equal(got.ActivePrevious(time.Now()), []string{secret}) {
		t.Errorf("GetCredentials = bearer %q secret %q previous %q; want the plain values", got.BearerToken, got.SigningSecret, got.ActivePrevious(time.Now()))
	}
}

// The start-up check opens every secret, not the newest alone: a key
// dropped too early (DISPATCH_ENCRYPTION_KEY_PREVIOUS removed before `dispatch
// rekey` ran) stops the start, instead of the older credentials' jobs
// failing one by one later.
func TestCheckKeyFindsCredentialsSealedWithAnEarlierKey(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	old, pool := setupKeyed(t, k1)
	sealedWithK1 := createCredentials(t, old)
	rotated := storeOver(t, pool, newSealer(t, k2, k1))
	createCredentials(t, rotated) // the newest, sealed with K2
	if err := rotated.CheckKey(t.Context()); err != nil {
		t.Fatalf("CheckKey with both keys: %v", err)
	}
	onlyK2 := storeOver(t, pool, newSealer(t, k2, nil))
	err := onlyK2.CheckKey(t.Context())
	if !errors.Is(err, store.ErrWrongKey) || !strings.Contains(err.Error(), dispatch.FormatID(sealedWithK1.ID)) {
		t.Errorf("CheckKey without the earlier key: %v, want ErrWrongKey naming credentials %d", err, sealedWithK1.ID)
	}
}

// The start-up check opens every sealed value of a credential, the bearer
// token too: with one of them sealed with a key no longer given, the start
// stops rather than every delivery with those credentials. And a rotation
// after a key change seals the token again with the secrets, under the new
// key.
func TestCheckKeyOpensTheBearerTokenToo(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	old, pool := setupKeyed(t, k1)
	c := createCredentials(t, old)
	both := storeOver(t, pool, newSealer(t, k2, k1))
	if _, err := both.RotateCredentials(t.Context(), c.ID, "whsec_next", time.Hour); err != nil {
		t.Fatal(err)
	}
	onlyK2 := storeOver(t, pool, newSealer(t, k2, nil))
	if got, err := onlyK2.GetCredentials(t.Context(), c.ID); err != nil || got.BearerToken != bearer {
		t.Errorf("after a rotation, read with the new key alone: token %q, %v; want it resealed", got.BearerToken, err)
	}
	if err := onlyK2.CheckKey(t.Context()); err != nil {
		t.Errorf("CheckKey after the rotation, the new key alone: %v", err)
	}
	// A token sealed with the earlier key, its secrets with the new one (as
	// a rotation before this release left them).
	d := createCredentials(t, old)
	var sealedWithK1 []byte
	if err := pool.QueryRow(t.Context(), `SELECT bearer_token FROM dispatch_credentials WHERE id = $1`, d.ID).Scan(&sealedWithK1); err != nil {
		t.Fatal(err)
	}
	if _, err := both.RotateCredentials(t.Context(), d.ID, "whsec_next", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE dispatch_credentials SET bearer_token = $2 WHERE id = $1`, d.ID, sealedWithK1); err != nil {
		t.Fatal(err)
	}
	err := onlyK2.CheckKey(t.Context())
	if !errors.Is(err, store.ErrWrongKey) || !strings.Contains(err.Error(), dispatch.FormatID(d.ID)) {
		t.Errorf("CheckKey without the earlier key: %v, want ErrWrongKey naming credentials %d", err, d.ID)
	}
}

func TestCredentialsWrongKey(t *testing.T) {
	t.Parallel()
	st, pool := setupKeyed(t, newKey(t))
	c := createCredentials(t, st)
	if err := st.CheckKey(t.Context()); err != nil {
		t.Errorf("CheckKey with the right key: %v", err)
	}

	other := storeOver(t, pool, newSealer(t, newKey(t), nil))
	if _, err := other.GetCredentials(t.Context(), c.ID); !errors.Is(err, store.ErrWrongKey) {
		t.Errorf("GetCredentials with another key: err = %v, want ErrWrongKey", err)
	}
	if err := other.CheckKey(t.Context()); !errors.Is(err, store.ErrWrongKey) {
		t.Errorf("CheckKey with another key: err = %v, want ErrWrongKey", err)
	}
}

// A secret the keys given cannot open is an error that says what to set:
// the old key as DISPATCH_ENCRYPTION_KEY_PREVIOUS after a key change, at
// start (CheckKey) and in `dispatch rekey` (Reseal) alike; and with no key
// at all it says that none is set rather than blaming a key. It names the
// credentials and the variables, never a key.
func TestWrongKeyErrorsSayWhatToSet(t *testing.T) {
	t.Parallel()
	k1 := newKey(t)
	st, pool := setupKeyed(t, k1)
	c := createCredentials(t, st)
	for _, tc := range []struct {
		name          string
		key, previous []byte
		says          []string
	}{
		{"a new key alone", newKey(t), nil, []string{"cannot be decrypted with DISPATCH_ENCRYPTION_KEY (wrong key?)",
			"set the old one as DISPATCH_ENCRYPTION_KEY_PREVIOUS and run `dispatch rekey`"}},
		{"neither key", newKey(t), newKey(t), []string{"DISPATCH_ENCRYPTION_KEY nor DISPATCH_ENCRYPTION_KEY_PREVIOUS",
			"to the key it was stored with"}},
		{"no key", nil, nil, []string{"is encrypted, but no DISPATCH_ENCRYPTION_KEY is set",
			"set DISPATCH_ENCRYPTION_KEY to the key it was stored with"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := storeOver(t, pool, newSealer(t, tc.key, tc.previous))
			_, resealErr := other.Reseal(t.Context())
			for op, err := range map[string]error{"CheckKey": other.CheckKey(t.Context()), "Reseal": resealErr} {
				if !errors.Is(err, store.ErrWrongKey) {
					t.Fatalf("%s: err = %v, want ErrWrongKey", op, err)
				}
				msg := err.Error()
				for _, want := range append(tc.says, dispatch.FormatID(c.ID)) {
					if !strings.Contains(msg, want) {
						t.Errorf("%s: %q does not say %q", op, msg, want)
					}
				}
				if tc.key == nil && strings.Contains(msg, "wrong key") {
					t.Errorf("%s: %q blames a key when none is set", op, msg)
				}
				for _, k := range [][]byte{k1, tc.key, tc.previous} {
					if k != nil && (strings.Contains(msg, string(k)) || strings.Contains(msg, base64.StdEncoding.EncodeToString(k))) {
						t.Errorf("%s: %q shows a key", op, msg)
					}
				}
			}
		})
	}
}

func TestCheckKeyEmptyTable(t *testing.T) {
	t.Parallel()
	st, _ := setupKeyed(t, newKey(t))
	if err := st.CheckKey(t.Context()); err != nil {
		t.Errorf("CheckKey with no credentials: %v", err)
	}
}

func TestDeleteCredentials(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	c := createCredentials(t, st)
	getCredentials(t, st, c.ID) // now cached

	if err := st.DeleteCredentials(t.Context(), c.ID); err != nil {
		t.Fatalf("DeleteCredentials: %v", err)
	}
	_, err := st.GetCredentials(t.Context(), c.ID)
	wantCode(t, err, dispatch.ENotFound)
	wantCode(t, st.DeleteCredentials(t.Context(), c.ID), dispatch.ENotFound)

	// New jobs can no longer refer to them.
	_, _, err = st.CreateJob(t.Context(), newJob(func(j *dispatch.Job) { j.CredentialsID = c.ID }))
	wantCode(t, err, dispatch.EInvalid)
}

func TestRotateCredentials(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	c := createCredentials(t, st)
	getCredentials(t, st, c.ID) // cached before the rotation

	const next = "whsec_the_next_secret"
	before := time.Now()
	rot, err := st.RotateCredentials(t.Context(), c.ID, next, 24*time.Hour)
	if err != nil {
		t.Fatalf("RotateCredentials: %v", err)
	}
	for name, got := range map[string]dispatch.Credentials{"returned": rot, "stored": getCredentials(t, st, c.ID)} {
		if got.SigningSecret != next || !slices.Equal(got.ActivePrevious(time.Now()), []string{secret}) || got.BearerToken != bearer {
			t.Errorf("%s: secret %q previous %q bearer %q; want the new secret, the old as previous, the bearer kept", name, got.SigningSecret, got.ActivePrevious(time.Now()), got.BearerToken)
		}
		if ends := got.GraceEnds(time.Now()); ends == nil || ends.Before(before.Add(24*time.Hour-time.Second)) || ends.After(time.Now().Add(24*time.Hour)) {
			t.Errorf("%s: previous expires at %v, want about 24h from now", name, ends)
		}
		if len(got.ActivePrevious(time.Now().Add(25*time.Hour))) != 0 {
			t.Errorf("%s: the previous secret is not valid exactly for the grace period", name)
		}
	}

	_, err = st.RotateCredentials(t.Context(), 4242, next, time.Hour)
	wantCode(t, err, dispatch.ENotFound)
}

func TestReseal(t *testing.T) {
	t.Parallel()
	oldKey, newK := newKey(t), newKey(t)
	st, pool := setupKeyed(t, oldKey)
	a := createCredentials(t, st)
	if _, err := st.RotateCredentials(t.Context(), a.ID, "whsec_rotated", time.Hour); err != nil {
		t.Fatal(err)
	}
	b := dispatch.Credentials{SigningSecret: "whsec_no_bearer", Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST"}
	if err := st.CreateCredentials(t.Context(), &b); err != nil {
		t.Fatal(err)
	}

	// The operator changed the key, keeping the old one as previous.
	rekey := storeOver(t, pool, newSealer(t, newK, oldKey))
	n, err := rekey.Reseal(t.Context())
	if err != nil {
		t.Fatalf("Reseal: %v", err)
	}
	if n != 4 { // a: bearer, secret, previous; b: secret
		t.Errorf("Reseal rewrote %d values, want 4", n)
	}
	if n, err := rekey.Reseal(t.Context()); err != nil || n != 0 {
		t.Errorf("second Reseal rewrote %d values (err %v), want 0", n, err)
	}

	// Only the new key is needed from now on; the old one no longer opens them.
	fresh := storeOver(t, pool, newSealer(t, newK, nil))
	if err := fresh.CheckKey(t.Context()); err != nil {
		t.Errorf("CheckKey with the new key: %v", err)
	}
	got := getCredentials(t, fresh, a.ID)
	if got.BearerToken != bearer || got.SigningSecret != "whsec_rotated" || !slices.Equal(got.ActivePrevious(time.Now()), []string{secret}) {
		t.Errorf("after reseal: bearer %q secret %q previous %q", got.BearerToken, got.SigningSecret, got.ActivePrevious(time.Now()))
	}
	if got := getCredentials(t, fresh, b.ID); got.SigningSecret != "whsec_no_bearer" || got.BearerToken != "" {
		t.Errorf("after reseal: b = secret %q bearer %q", got.SigningSecret, got.BearerToken)
	}
	stale := storeOver(t, pool, newSealer(t, oldKey, nil))
	if _, err := stale.GetCredentials(t.Context(), a.ID); !errors.Is(err, store.ErrWrongKey) {
		t.Errorf("the old key still opens resealed secrets: err = %v", err)
	}
}

// Two rotations inside the grace period keep both old secrets, each with
// its own expiry; a rotation with no grace ends them all.
func TestRotateTwiceWithinGraceKeepsEveryOldSecret(t *testing.T) {
	t.Parallel()
	st, _ := setupKeyed(t, newKey(t))
	c := createCredentials(t, st) // S0 = secret
	t0 := time.Now()
	if _, err := st.RotateCredentials(t.Context(), c.ID, "whsec_s1", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RotateCredentials(t.Context(), c.ID, "whsec_s2", time.Hour); err != nil {
		t.Fatal(err)
	}
	got := getCredentials(t, st, c.ID)
	if active := got.ActivePrevious(time.Now()); got.SigningSecret != "whsec_s2" || !slices.Equal(active, []string{"whsec_s1", secret}) {
		t.Fatalf("after two rotations: current %q, previous %q; want s2, then s1 and S0 both valid", got.SigningSecret, active)
	}
	// No old secret outlives the latest rotation's grace period (1h).
	if active := got.ActivePrevious(t0.Add(61 * time.Minute)); len(active) != 0 {
		t.Errorf("after the latest grace period: %q still valid", active)
	}
	if _, err := st.RotateCredentials(t.Context(), c.ID, "whsec_s3", 0); err != nil {
		t.Fatal(err)
	}
	if active := getCredentials(t, st, c.ID).ActivePrevious(time.Now()); len(active) != 0 {
		t.Errorf("a rotation with no grace left %q valid", active)
	}
	// The number of old secrets in their grace period is bounded.
	for i := range store.MaxPreviousSecrets {
		if _, err := st.RotateCredentials(t.Context(), c.ID, "whsec_n"+string(rune('a'+i)), time.Hour); err != nil {
			t.Fatalf("rotation %d: %v", i, err)
		}
	}
	_, err := st.RotateCredentials(t.Context(), c.ID, "whsec_one_too_many", time.Hour)
	wantCode(t, err, dispatch.EConflict)
}

// After a key change, NeedingReseal says how many stored values still need
// DISPATCH_ENCRYPTION_KEY_PREVIOUS, so dropping it can be checked first:
// values an API replica still running with the old key writes after
// `dispatch rekey` are counted, and a second rekey reseals them.
func TestNeedingResealCountsValuesThatStillNeedThePreviousKey(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	old, pool := setupKeyed(t, k1) // a replica not yet restarted: the old key alone
	createCredentials(t, old)
	both := storeOver(t, pool, newSealer(t, k2, k1)) // restarted, and rekey
	needing := func(want int, when string) {
		t.Helper()
		if n, err := both.NeedingReseal(t.Context()); err != nil || n != want {
			t.Errorf("%s: NeedingReseal = %d, %v; want %d", when, n, err, want)
		}
	}
	needing(2, "before rekey") // the bearer token and the signing secret
	if _, err := both.Reseal(t.Context()); err != nil {
		t.Fatal(err)
	}
	needing(0, "after rekey")

	late := createCredentials(t, old)
	needing(2, "after the old replica wrote credentials")
	onlyNew := storeOver(t, pool, newSealer(t, k2, nil))
	if _, err := onlyNew.GetCredentials(t.Context(), late.ID); !errors.Is(err, store.ErrWrongKey) {
		t.Fatalf("the premise: without the old key the late credentials cannot be read, got %v", err)
	}
	if n, err := both.Reseal(t.Context()); err != nil || n != 2 {
		t.Fatalf("second rekey: %d, %v; want 2 values resealed", n, err)
	}
	needing(0, "after the second rekey")
	if got := getCredentials(t, onlyNew, late.ID); got.SigningSecret != secret || got.BearerToken != bearer {
		t.Errorf("with the new key alone: %q %q", got.SigningSecret, got.BearerToken)
	}
}

// Changing credentials' name or targets opens no secret: on a replica that
// cannot open them (its key is not theirs) the change is made and answered,
// never made and answered with an error.
func TestUpdateCredentialsNeedsNoKey(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	old, pool := setupKeyed(t, k1)
	current := storeOver(t, pool, newSealer(t, k2, k1))
	c := createCredentials(t, current) // sealed under K2
	name := "Partner"
	got, err := old.UpdateCredentials(t.Context(), c.ID, &name, &[]string{"https://partner.example"})
	if err != nil {
		t.Fatalf("UpdateCredentials on a replica without the credentials' key: %v", err)
	}
	stored := getCredentials(t, current, c.ID)
	for what, v := range map[string]struct {
		name    string
		targets []string
	}{"answered": {got.Name, got.AllowedTargets}, "stored": {stored.Name, stored.AllowedTargets}} {
		if v.name != name || !slices.Equal(v.targets, []string{"https://partner.example"}) {
			t.Errorf("%s: name %q targets %q, want the change", what, v.name, v.targets)
		}
	}
	if !got.HasBearerToken || got.ID != c.ID {
		t.Errorf("answer %+v, want credentials %d with their bearer token", got, c.ID)
	}
}
