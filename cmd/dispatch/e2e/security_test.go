package e2e

// End-to-end tests of secrets at rest, credential rotation and the
// encryption key's life cycle. Every webhook goes to a
// receiver on 127.0.0.1.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/app"
	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/webhook"
)

// credentialsJSON is the API's credentials answer.
type credentialsJSON struct {
	ID                      string `json:"id"`
	SignatureScheme         string `json:"signatureScheme"`
	HasBearerToken          bool   `json:"hasBearerToken"`
	PreviousSecretExpiresAt string `json:"previousSecretExpiresAt"`
	SigningSecret           string `json:"signingSecret"`
}

// adminCall sends an admin request and returns the decoded answer and its
// raw body, for checks that nothing secret is in it.
func adminCall(t *testing.T, in *instance, method, path string, body any, want int) (credentialsJSON, string) {
	t.Helper()
	var raw json.RawMessage
	if code := in.do(method, path, adminToken, body, &raw); code != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, raw)
	}
	var c credentialsJSON
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return c, string(raw)
}

// allowTargets sets the targets credentials credID may be sent to.
func allowTargets(t *testing.T, in *instance, credID string, targets ...string) {
	t.Helper()
	adminCall(t, in, "PATCH", "/api/admin/dispatch/credentials/"+credID, map[string]any{"allowedTargets": targets}, http.StatusOK)
}

// deliverSigned binds credentials credID to rc, creates a job signed with
// them, waits for it to complete and returns the request the receiver got
// for it.
func deliverSigned(t *testing.T, in *instance, rc *receiver, credID string) received {
	t.Helper()
	allowTargets(t, in, credID, rc.URL)
	j := in.createJob(jobBody(rc.URL+"/hooks", map[string]any{"credentialsId": credID}))
	if done := in.waitStatus(j.ID, 20*time.Second, "COMPLETED", "ERROR"); done.Status != "COMPLETED" {
		t.Fatalf("job %s = %+v, want COMPLETED", j.ID, done)
	}
	for _, r := range rc.snapshot() {
		if r.header.Get("X-Dispatch-Job-Id") == j.ID {
			return r
		}
	}
	t.Fatalf("the receiver got no request for job %s", j.ID)
	return received{}
}

// verifyWith verifies a received webhook with a receiver holding only secret.
func verifyWith(scheme webhook.Scheme, r received, secret string) error {
	return webhook.Verifier{Scheme: scheme, Secrets: []string{secret}}.Verify(r.header, []byte(r.body))
}

// runToExit runs `dispatch <cmd>` and waits for it to return. A command that
// starts listening instead is stopped at once and reported as started.
func runToExit(t *testing.T, cmd, dbURL string, q sqstest.Queue, overrides map[string]string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := &cancelOnListen{cancel: cancel}
	var errb syncBuffer
	err = app.Run(ctx, []string{cmd}, baseEnv(dbURL, q, overrides), out, &errb)
	if out.started {
		t.Fatalf("dispatch %s started listening; want it to stop at start\nstdout: %s\nstderr: %s", cmd, out.String(), errb.String())
	}
	return out.String(), errb.String(), err
}

// cancelOnListen is a stdout that cancels the command once it listens.
type cancelOnListen struct {
	syncBuffer
	cancel  context.CancelFunc
	started bool
}

func (c *cancelOnListen) Write(p []byte) (int, error) {
	n, err := c.syncBuffer.Write(p)
	if strings.Contains(c.syncBuffer.String(), "listening on") && !c.started {
		c.started = true
		c.cancel()
	}
	return n, err
}

// credentialSecrets is what must never be readable at rest: each secret,
// and for whsec_ secrets the key bytes they encode.
func credentialSecrets(t *testing.T, secrets ...string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, s := range secrets {
		if s == "" {
			t.Fatalf("an empty secret cannot be searched for")
		}
		out = append(out, []byte(s))
		if key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_")); err == nil && strings.HasPrefix(s, "whsec_") {
			out = append(out, key)
		}
	}
	return out
}

// findAtRest reads every row of every table of the database, raw and as
// text, and returns the places where one of the secrets appears, in plain
// bytes or hex (PostgreSQL's text form of bytea).
func findAtRest(t *testing.T, dbURL string, secrets [][]byte) []string {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	look := func(where string, data []byte) {
		lower := bytes.ToLower(data)
		for _, s := range secrets {
			if bytes.Contains(data, s) || bytes.Contains(lower, []byte(hex.EncodeToString(s))) {
				found = append(found, fmt.Sprintf("%s holds %q", where, s))
			}
		}
	}
	credentialRows := 0
	for _, table := range tables {
		rows, err := conn.Query(ctx, `SELECT t::text, t.* FROM `+pgx.Identifier{table}.Sanitize()+` t`)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("read %s: %v", table, err)
			}
			if table == "dispatch_credentials" {
				credentialRows++
			}
			for i, v := range vals {
				where := table + "." + string(rows.FieldDescriptions()[i].Name)
				switch v := v.(type) {
				case []byte:
					look(where, v)
				case string:
					look(where, []byte(v))
				default:
					look(where, fmt.Append(nil, v))
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
	}
	if credentialRows == 0 {
		t.Fatalf("dispatch_credentials is empty: nothing was checked")
	}
	return found
}

// TestRotationGracePeriod: during a rotation's grace period a receiver
// holding only the old secret and one holding only the new both verify
// the same delivery; once the grace period is over only the new one does.
func TestRotationGracePeriod(t *testing.T) {
	t.Parallel()
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		t.Run(string(scheme), func(t *testing.T) {
			t.Parallel()
			in := start(t, "all", nil)
			rc := newReceiver(t, nil)
			const bearer = "bt_rotation_bearer_0123456789"
			orig, raw := adminCall(t, in, "POST", "/api/admin/dispatch/credentials", map[string]any{
				"signatureScheme": scheme, "bearerToken": bearer}, http.StatusCreated)
			oldSecret := orig.SigningSecret
			if !strings.HasPrefix(oldSecret, "whsec_") || strings.Contains(raw, bearer) {
				t.Fatalf("create: want the generated secret shown once and the bearer token never: %s", raw)
			}
			path := "/api/admin/dispatch/credentials/" + orig.ID

			before := deliverSigned(t, in, rc, orig.ID)
			if err := verifyWith(scheme, before, oldSecret); err != nil {
				t.Fatalf("before rotation: %v", err)
			}

			rot, raw := adminCall(t, in, "POST", path+"/rotate", map[string]any{"gracePeriod": "1h"}, http.StatusOK)
			newSecret := rot.SigningSecret
			if newSecret == "" || newSecret == oldSecret || strings.Contains(raw, oldSecret) || strings.Contains(raw, bearer) {
				t.Fatalf("rotate: want only the new generated secret in the answer: %s", raw)
			}
			if exp, err := time.Parse(time.RFC3339, rot.PreviousSecretExpiresAt); err != nil || time.Until(exp) < 59*time.Minute || time.Until(exp) > time.Hour {
				t.Errorf("rotate: previousSecretExpiresAt = %q, want about 1h from now", rot.PreviousSecretExpiresAt)
			}
			got, raw := adminCall(t, in, "GET", path, nil, http.StatusOK)
			for _, s := range []string{oldSecret, newSecret, bearer} {
				if strings.Contains(raw, s) {
					t.Errorf("GET credentials returns a secret: %s", raw)
				}
			}
			if got.PreviousSecretExpiresAt == "" || !got.HasBearerToken {
				t.Errorf("GET credentials = %s; want the grace period's end and hasBearerToken", raw)
			}

			during := deliverSigned(t, in, rc, orig.ID)
			for name, secret := range map[string]string{"old": oldSecret, "new": newSecret} {
				if err := verifyWith(scheme, during, secret); err != nil {
					t.Errorf("during the grace period a receiver with only the %s secret fails: %v", name, err)
				}
			}
			other, _ := webhook.NewSecret(scheme)
			if err := verifyWith(scheme, during, other); !errors.Is(err, webhook.ErrNoMatch) {
				t.Errorf("an unrelated secret: err = %v, want ErrNoMatch", err)
			}
			if got := during.header.Get("Authorization"); got != "Bearer "+bearer {
				t.Errorf("Authorization = %q, want the credentials' bearer token", got)
			}
			checkSignatureHeaders(t, scheme, during, 2)

			// A second rotation inside the grace period keeps the first old
			// secret for its own grace period: receivers on any of the three
			// secrets verify.
			third, _ := adminCall(t, in, "POST", path+"/rotate", map[string]any{"gracePeriod": "1h"}, http.StatusOK)
			twice := deliverSigned(t, in, rc, orig.ID)
			for name, secret := range map[string]string{"S0": oldSecret, "S1": newSecret, "S2": third.SigningSecret} {
				if err := verifyWith(scheme, twice, secret); err != nil {
					t.Errorf("after two rotations in the grace period a receiver holding only %s fails: %v", name, err)
				}
			}
			checkSignatureHeaders(t, scheme, twice, 3)
			newSecret = third.SigningSecret

			// Rotating again without grace ends the previous secret at once.
			last, _ := adminCall(t, in, "POST", path+"/rotate", map[string]any{"gracePeriod": "0s"}, http.StatusOK)
			if last.SigningSecret == "" || last.PreviousSecretExpiresAt != "" {
				t.Fatalf("rotate with 0s grace = %+v; want a new secret and no grace period", last)
			}
			after := deliverSigned(t, in, rc, orig.ID)
			if err := verifyWith(scheme, after, last.SigningSecret); err != nil {
				t.Errorf("after the grace period the current secret fails: %v", err)
			}
			for name, secret := range map[string]string{"original": oldSecret, "rotated-out": newSecret} {
				if err := verifyWith(scheme, after, secret); !errors.Is(err, webhook.ErrNoMatch) {
					t.Errorf("after the grace period a receiver with only the %s secret: err = %v, want ErrNoMatch", name, err)
				}
			}
			checkSignatureHeaders(t, scheme, after, 1)

			for _, s := range []string{oldSecret, newSecret, last.SigningSecret, bearer} {
				if strings.Contains(in.stderr.String(), s) {
					t.Errorf("the log contains a secret")
				}
			}
		})
	}
}

// checkSignatureHeaders checks that a delivery carries n signatures.
func checkSignatureHeaders(t *testing.T, scheme webhook.Scheme, r received, n int) {
	t.Helper()
	switch scheme {
	case webhook.SchemeFlowCatalyst:
		prev := r.header.Get(webhook.HeaderSignaturePrevious)
		if r.header.Get(webhook.HeaderSignature) == "" || len(strings.Fields(prev)) != n-1 {
			t.Errorf("%s %q, %s %q; want %d signatures", webhook.HeaderSignature, r.header.Get(webhook.HeaderSignature),
				webhook.HeaderSignaturePrevious, prev, n)
		}
	case webhook.SchemeStandardWebhooks:
		sigs := strings.Fields(r.header.Get(webhook.HeaderWebhookSignature))
		v1 := regexp.MustCompile(`^v1,[A-Za-z0-9+/]{43}=$`)
		for _, s := range sigs {
			if !v1.MatchString(s) {
				t.Errorf("webhook-signature entry %q is not v1,<base64 HMAC-SHA256>", s)
			}
		}
		if len(sigs) != n {
			t.Errorf("webhook-signature %q holds %d entries, want %d", r.header.Get(webhook.HeaderWebhookSignature), len(sigs), n)
		}
	}
}

// TestSecretsAreNotStoredInPlainText reads every table directly: no bearer
// token or signing secret (current, rotated-out, generated, given, or the
// key bytes of a whsec_ secret) is readable without the encryption key.
func TestSecretsAreNotStoredInPlainText(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	const (
		bearer  = "bt_at_rest_bearer_a1b2c3d4e5f6"
		given   = "fc_at_rest_signing_secret_f6e5d4c3b2a1"
		rotated = "fc_at_rest_rotated_secret_0a9b8c7d6e5f"
	)
	fc, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"bearerToken": bearer, "signingSecret": given}, http.StatusCreated)
	adminCall(t, in, "POST", "/api/admin/dispatch/credentials/"+fc.ID+"/rotate",
		map[string]any{"signingSecret": rotated, "gracePeriod": "1h"}, http.StatusOK)
	sw, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"signatureScheme": "STANDARD_WEBHOOKS", "bearerToken": bearer + "_sw"}, http.StatusCreated)

	// The secrets work: a delivery signed with them verifies.
	rc := newReceiver(t, nil)
	if err := verifyWith(webhook.SchemeFlowCatalyst, deliverSigned(t, in, rc, fc.ID), rotated); err != nil {
		t.Fatalf("FLOWCATALYST delivery: %v", err)
	}
	if err := verifyWith(webhook.SchemeStandardWebhooks, deliverSigned(t, in, rc, sw.ID), sw.SigningSecret); err != nil {
		t.Fatalf("STANDARD_WEBHOOKS delivery: %v", err)
	}

	secrets := credentialSecrets(t, bearer, given, rotated, bearer+"_sw", sw.SigningSecret)
	for _, where := range findAtRest(t, in.dbURL, secrets) {
		t.Errorf("plain text at rest: %s", where)
	}
}

// TestWrongEncryptionKeyStopsStart: against a database holding credentials,
// `dispatch all` with another key, or with none, refuses to start with an
// error naming the key, and opens no listener. The right key still works.
func TestWrongEncryptionKeyStopsStart(t *testing.T) {
	t.Parallel()
	key := testKey()
	in := start(t, "all", map[string]string{"DISPATCH_ENCRYPTION_KEY": key})
	cred, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"bearerToken": "bt_wrong_key_0123456789"}, http.StatusCreated)
	if err := in.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// Each error says what to set: after a key change, the old key as
	// DISPATCH_ENCRYPTION_KEY_PREVIOUS; with no key, that none is set.
	changed := []string{"cannot be decrypted with DISPATCH_ENCRYPTION_KEY (wrong key?)",
		"set the old one as DISPATCH_ENCRYPTION_KEY_PREVIOUS and run `dispatch rekey`"}
	for name, tc := range map[string]struct {
		env  map[string]string
		says []string
	}{
		"another key": {map[string]string{"DISPATCH_ENCRYPTION_KEY": testKey()}, changed},
		"another key and previous": {map[string]string{"DISPATCH_ENCRYPTION_KEY": testKey(), "DISPATCH_ENCRYPTION_KEY_PREVIOUS": testKey()},
			[]string{"DISPATCH_ENCRYPTION_KEY nor DISPATCH_ENCRYPTION_KEY_PREVIOUS (wrong key?)", "to the key it was stored with"}},
		"no key, insecure": {map[string]string{"DISPATCH_ENCRYPTION_KEY": "", "DISPATCH_INSECURE": "true"},
			[]string{"no DISPATCH_ENCRYPTION_KEY is set", "set DISPATCH_ENCRYPTION_KEY to the key it was stored with"}},
		"api only": {map[string]string{"DISPATCH_ENCRYPTION_KEY": testKey()}, changed},
	} {
		cmd := "all"
		if name == "api only" {
			cmd = "api"
		}
		stdout, stderr, err := runToExit(t, cmd, in.dbURL, in.queue, tc.env)
		if err == nil {
			t.Errorf("%s: dispatch %s started against secrets sealed with another key\n%s", name, cmd, stderr)
			continue
		}
		for _, want := range append(tc.says, cred.ID) {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
		if strings.Contains(stdout, "listening") {
			t.Errorf("%s: a listener was opened: %s", name, stdout)
		}
		if strings.Contains(err.Error(), key) || strings.Contains(stderr, key) {
			t.Errorf("%s: the key is echoed", name)
		}
	}

	// A malformed key is a configuration error, named with the variable.
	_, _, err := runToExit(t, "all", in.dbURL, in.queue, map[string]string{"DISPATCH_ENCRYPTION_KEY": "c2hvcnQ="})
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_ENCRYPTION_KEY must be 32 bytes") {
		t.Errorf("a 5-byte key: err = %v, want a configuration error naming DISPATCH_ENCRYPTION_KEY", err)
	}

	again := startWith(t, "all", in.dbURL, freshQueue(t), map[string]string{"DISPATCH_ENCRYPTION_KEY": key})
	rc := newReceiver(t, nil)
	if r := deliverSigned(t, again, rc, cred.ID); verifyWith(webhook.SchemeFlowCatalyst, r, cred.SigningSecret) != nil {
		t.Errorf("with the right key again, the delivery does not verify")
	}
}

// TestRekeyChangesTheEncryptionKey: `dispatch rekey` with the new key in
// DISPATCH_ENCRYPTION_KEY and the old one in DISPATCH_ENCRYPTION_KEY_PREVIOUS
// re-encrypts every secret; the service then runs with only the new key,
// the old key no longer opens anything, and deliveries (including a
// rotation's grace-period signature) verify.
func TestRekeyChangesTheEncryptionKey(t *testing.T) {
	t.Parallel()
	oldKey, newKey := testKey(), testKey()
	in := start(t, "all", map[string]string{"DISPATCH_ENCRYPTION_KEY": oldKey})
	fc, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"bearerToken": "bt_rekey_fc_0123456789"}, http.StatusCreated)
	rot, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials/"+fc.ID+"/rotate",
		map[string]any{"gracePeriod": "1h"}, http.StatusOK)
	sw, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"signatureScheme": "STANDARD_WEBHOOKS"}, http.StatusCreated)
	if err := in.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	sealed := readSealed(t, in.dbURL)

	// With a wrong previous key rekey fails and changes nothing.
	_, _, err := runToExit(t, "rekey", in.dbURL, in.queue,
		map[string]string{"DISPATCH_ENCRYPTION_KEY": newKey, "DISPATCH_ENCRYPTION_KEY_PREVIOUS": testKey()})
	if err == nil || !strings.Contains(err.Error(), "wrong key") {
		t.Errorf("rekey with a wrong previous key: err = %v, want a wrong-key error", err)
	}
	if !sameSealed(sealed, readSealed(t, in.dbURL)) {
		t.Fatalf("a failed rekey changed stored secrets")
	}
	// With the new key alone it fails saying where the old one goes.
	_, _, err = runToExit(t, "rekey", in.dbURL, in.queue, map[string]string{"DISPATCH_ENCRYPTION_KEY": newKey})
	if err == nil || !strings.Contains(err.Error(), "set the old one as DISPATCH_ENCRYPTION_KEY_PREVIOUS") {
		t.Errorf("rekey with the new key alone: err = %v, want it to say to set the old key as DISPATCH_ENCRYPTION_KEY_PREVIOUS", err)
	}
	if !sameSealed(sealed, readSealed(t, in.dbURL)) {
		t.Fatalf("a failed rekey changed stored secrets")
	}

	stdout, _, err := runToExit(t, "rekey", in.dbURL, in.queue,
		map[string]string{"DISPATCH_ENCRYPTION_KEY": newKey, "DISPATCH_ENCRYPTION_KEY_PREVIOUS": oldKey})
	if err != nil {
		t.Fatalf("rekey: %v", err)
	}
	// fc: bearer, secret, previous secret; sw: secret.
	if !strings.Contains(stdout, "re-encrypted 4 secret values") {
		t.Errorf("rekey said %q, want 4 values re-encrypted", stdout)
	}
	after := readSealed(t, in.dbURL)
	for k, v := range sealed {
		if bytes.Equal(v, after[k]) {
			t.Errorf("%s was not re-encrypted", k)
		}
	}
	if stdout, _, err := runToExit(t, "rekey", in.dbURL, in.queue,
		map[string]string{"DISPATCH_ENCRYPTION_KEY": newKey}); err != nil || !strings.Contains(stdout, "re-encrypted 0 ") ||
		!strings.Contains(stdout, "the old one as DISPATCH_ENCRYPTION_KEY_PREVIOUS") {
		t.Errorf("a second rekey: %q, %v; want nothing left to do, saying how a key is changed", stdout, err)
	}
	if _, _, err := runToExit(t, "all", in.dbURL, in.queue, map[string]string{"DISPATCH_ENCRYPTION_KEY": oldKey}); err == nil {
		t.Errorf("the old key still starts the service after rekey")
	}

	again := startWith(t, "all", in.dbURL, freshQueue(t), map[string]string{"DISPATCH_ENCRYPTION_KEY": newKey})
	rc := newReceiver(t, nil)
	r := deliverSigned(t, again, rc, fc.ID)
	for name, secret := range map[string]string{"current": rot.SigningSecret, "previous": fc.SigningSecret} {
		if err := verifyWith(webhook.SchemeFlowCatalyst, r, secret); err != nil {
			t.Errorf("after rekey, the %s secret does not verify: %v", name, err)
		}
	}
	if got := r.header.Get("Authorization"); got != "Bearer bt_rekey_fc_0123456789" {
		t.Errorf("after rekey, Authorization = %q", got)
	}
	if err := verifyWith(webhook.SchemeStandardWebhooks, deliverSigned(t, again, rc, sw.ID), sw.SigningSecret); err != nil {
		t.Errorf("after rekey, the STANDARD_WEBHOOKS delivery does not verify: %v", err)
	}
}

// TestRekeyEncryptsSecretsStoredWithoutAKey: secrets stored in insecure
// mode without a key are refused once a key is set (with advice to run
// rekey), and `dispatch rekey` encrypts them.
func TestRekeyEncryptsSecretsStoredWithoutAKey(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_ENCRYPTION_KEY": "", "DISPATCH_INSECURE": "true"})
	const bearer = "bt_insecure_plain_0123456789"
	cred, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"bearerToken": bearer}, http.StatusCreated)
	if err := in.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	secrets := credentialSecrets(t, bearer, cred.SigningSecret)
	if len(findAtRest(t, in.dbURL, secrets)) == 0 {
		t.Fatalf("without a key the secrets should be in plain text (the test's premise)")
	}

	key := testKey()
	_, _, err := runToExit(t, "all", in.dbURL, in.queue, map[string]string{"DISPATCH_ENCRYPTION_KEY": key})
	if err == nil || !strings.Contains(err.Error(), "dispatch rekey") {
		t.Fatalf("start with a key over plain-text secrets: err = %v, want advice to run dispatch rekey", err)
	}
	if _, _, err := runToExit(t, "rekey", in.dbURL, in.queue, map[string]string{"DISPATCH_ENCRYPTION_KEY": key}); err != nil {
		t.Fatalf("rekey: %v", err)
	}
	for _, where := range findAtRest(t, in.dbURL, secrets) {
		t.Errorf("after rekey, plain text at rest: %s", where)
	}
	again := startWith(t, "all", in.dbURL, freshQueue(t), map[string]string{"DISPATCH_ENCRYPTION_KEY": key})
	r := deliverSigned(t, again, newReceiver(t, nil), cred.ID)
	if err := verifyWith(webhook.SchemeFlowCatalyst, r, cred.SigningSecret); err != nil || r.header.Get("Authorization") != "Bearer "+bearer {
		t.Errorf("after rekey the delivery does not verify (%v) or lost its bearer token", err)
	}
}

// readSealed returns every stored secret column, keyed by row and column.
func readSealed(t *testing.T, dbURL string) map[string][]byte {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(t.Context(), `SELECT id, bearer_token, signing_secret,
		(SELECT string_agg(p, ''::bytea) FROM unnest(previous_secrets) p) FROM dispatch_credentials`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for rows.Next() {
		var id int64
		var cols [3][]byte
		if err := rows.Scan(&id, &cols[0], &cols[1], &cols[2]); err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"bearer_token", "signing_secret", "previous_secrets"} {
			if cols[i] != nil {
				out[fmt.Sprintf("%d.%s", id, name)] = cols[i]
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSealed(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// freshQueue is a new queue for a restarted instance: a stopped router's
// cancelled long poll can still take a message on the old one (it would come
// back only after the visibility timeout).
func freshQueue(t *testing.T) sqstest.Queue {
	t.Helper()
	return sqstest.New(t, 30*time.Second)
}
