package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// createBound stores credentials allowed to targets.
func createBound(t *testing.T, st *store.Store, targets ...string) dispatch.Credentials {
	t.Helper()
	c := dispatch.Credentials{BearerToken: bearer, SigningSecret: secret, Algorithm: dispatch.AlgorithmHMACSHA256,
		SignatureScheme: "FLOWCATALYST", AllowedTargets: targets}
	if err := st.CreateCredentials(t.Context(), &c); err != nil {
		t.Fatalf("CreateCredentials: %v", err)
	}
	return c
}

func TestCredentialTargetsAreStoredReadAndReplaced(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	c := createBound(t, st, "https://partner.example", "https://hooks.example/in/")
	if got := getCredentials(t, st, c.ID).AllowedTargets; !slices.Equal(got, c.AllowedTargets) {
		t.Errorf("read targets %q, want %q", got, c.AllowedTargets)
	}
	list, _, err := st.ListCredentials(t.Context(), 0, 10)
	if err != nil || len(list) != 1 || !slices.Equal(list[0].AllowedTargets, c.AllowedTargets) {
		t.Fatalf("listed %+v, %v; want the credentials with their targets", list, err)
	}

	// The read above cached them; the change must be seen at once.
	updated, err := st.SetCredentialsTargets(t.Context(), c.ID, []string{"https://partner.example/hooks/"})
	if err != nil {
		t.Fatalf("SetCredentialsTargets: %v", err)
	}
	if !slices.Equal(updated.AllowedTargets, []string{"https://partner.example/hooks/"}) || !updated.UpdatedAt.After(c.UpdatedAt) {
		t.Errorf("answer %q updated %v, want the new targets and a later updatedAt than %v", updated.AllowedTargets, updated.UpdatedAt, c.UpdatedAt)
	}
	got := getCredentials(t, st, c.ID)
	if !slices.Equal(got.AllowedTargets, updated.AllowedTargets) {
		t.Errorf("after the change GetCredentials says %q, want %q (stale cache?)", got.AllowedTargets, updated.AllowedTargets)
	}
	if got.SigningSecret != secret || got.BearerToken != bearer {
		t.Errorf("the change touched the secrets")
	}
	_, _, err = st.CreateJob(t.Context(), newJob(func(j *dispatch.Job) {
		j.CredentialsID, j.TargetURL = c.ID, "https://hooks.example/in/x"
	}))
	wantCode(t, err, dispatch.EUnprocessable)

	// None: stored as an empty list, and the credentials go nowhere.
	if _, err := st.SetCredentialsTargets(t.Context(), c.ID, nil); err != nil {
		t.Fatal(err)
	}
	if got := getCredentials(t, st, c.ID).AllowedTargets; len(got) != 0 {
		t.Errorf("targets %q after clearing them", got)
	}
	_, err = st.SetCredentialsTargets(t.Context(), 4242, []string{"https://partner.example"})
	wantCode(t, err, dispatch.ENotFound)
}

// A job whose credentials may not be sent to its target is refused with
// EUnprocessable and nothing is stored: alone, in a batch, or as a replay.
func TestCredentialTargetsRefuseJobs(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	c := createBound(t, st, "https://partner.example/hooks")
	unbound := createBound(t, st)
	with := func(id int64, target string) *dispatch.Job {
		return newJob(func(j *dispatch.Job) { j.CredentialsID, j.TargetURL = id, target })
	}
	for _, target := range []string{"https://evil.test/hooks", "https://partner.example/hooksevil", "http://partner.example/hooks",
		"https://partner.example:8443/hooks", "https://partner.example/hooks/../admin", "https://partner.example.evil.test/hooks"} {
		_, _, err := st.CreateJob(t.Context(), with(c.ID, target))
		de := wantCode(t, err, dispatch.EUnprocessable)
		if !strings.Contains(de.Message, "allowedTargets") || !strings.Contains(de.Message, dispatch.FormatID(c.ID)) {
			t.Errorf("%s: message %q does not say what to do", target, de.Message)
		}
	}
	_, _, err := st.CreateJob(t.Context(), with(unbound.ID, "https://partner.example/hooks"))
	wantCode(t, err, dispatch.EUnprocessable)
	_, _, err = st.CreateJobs(t.Context(), []*dispatch.Job{with(c.ID, "https://partner.example/hooks/a"), nil, with(c.ID, "https://evil.test/"),
		with(c.ID, "https://partner.example/hooks/b"), with(987654321, "https://partner.example/hooks/c")})
	de := wantCode(t, err, dispatch.EUnprocessable)
	if !strings.HasPrefix(de.Message, "jobs[2]: ") {
		t.Errorf("batch message %q does not name the item", de.Message)
	}
	var fields []string
	for _, d := range de.Details {
		fields = append(fields, d.Field)
	}
	if len(fields) != 2 || !strings.HasPrefix(fields[0], "jobs[2]") || fields[1] != "jobs[4].credentialsId" {
		t.Errorf("batch details name %v, want each refused item: jobs[2]…, jobs[4].credentialsId", fields)
	}
	if n := countRows(t, pool, "dispatch_job"); n != 0 {
		t.Fatalf("%d jobs stored by refused creates", n)
	}

	ok := createJob(t, st, func(j *dispatch.Job) { j.CredentialsID, j.TargetURL = c.ID, "https://partner.example/hooks/orders" })
	errorJob(t, st, ok.ID, now())
	if _, err := st.SetCredentialsTargets(t.Context(), c.ID, []string{"https://partner.example/other/"}); err != nil {
		t.Fatal(err)
	}
	_, err = st.ReplayJob(t.Context(), ok.ID)
	wantCode(t, err, dispatch.EUnprocessable)
	res, err := st.ReplayJobs(t.Context(), dispatch.JobFilter{Statuses: []dispatch.Status{dispatch.StatusError}}, 10)
	if err != nil {
		t.Fatalf("redrive: %v", err)
	}
	if len(res.Jobs) != 0 || len(res.Failed) != 1 || res.Failed[0].JobID != ok.ID ||
		dispatch.ErrorCode(res.Failed[0].Err) != dispatch.EUnprocessable || !strings.Contains(res.Failed[0].Err.Error(), "allowedTargets") {
		t.Errorf("redrive = %+v, want job %d reported as not allowed", res, ok.ID)
	}
	if n := countRows(t, pool, "dispatch_job"); n != 1 {
		t.Errorf("%d jobs after refused replays, want the 1 original", n)
	}
}

// A subscription is refused on create, and on a change of its url or
// credentials, when its credentials may not be sent to its url.
func TestCredentialTargetsRefuseSubscriptions(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	c := createBound(t, st, "https://example.com")
	narrow := createBound(t, st, "https://elsewhere.example")
	_, err := st.CreateSubscription(t.Context(), func() *dispatch.Subscription {
		s := newSubscription("order.created")
		s.URL, s.CredentialsID = "https://evil.test/hook", c.ID
		return s
	}())
	wantCode(t, err, dispatch.EUnprocessable)
	if n := countRows(t, pool, "dispatch_subscription"); n != 0 {
		t.Fatalf("%d subscriptions stored by a refused create", n)
	}
	sub := createSubscription(t, st, func(s *dispatch.Subscription) { s.CredentialsID = c.ID })
	for name, change := range map[string]func(*dispatch.Subscription){
		"url":           func(s *dispatch.Subscription) { s.URL = "https://evil.test/hook" },
		"credentialsId": func(s *dispatch.Subscription) { s.CredentialsID = narrow.ID },
	} {
		_, err := st.UpdateSubscription(t.Context(), sub.ID, func(s *dispatch.Subscription) error { change(s); return nil })
		wantCode(t, err, dispatch.EUnprocessable)
		if got, _ := st.GetSubscription(t.Context(), sub.ID); got.URL != sub.URL || got.CredentialsID != sub.CredentialsID {
			t.Errorf("%s: a refused change was stored: %+v", name, got)
		}
	}
	// Allowed changes still go through.
	if _, err := st.UpdateSubscription(t.Context(), sub.ID, func(s *dispatch.Subscription) error {
		s.URL = "https://example.com/other"
		return nil
	}); err != nil {
		t.Errorf("allowed url change: %v", err)
	}
}

// Migration 008 binds each existing credentials to the origins its jobs
// and subscriptions already use, so deliveries go on after the upgrade.
func TestMigrationBindsCredentialsToTheOriginsTheyAreUsedWith(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewEmptyDatabase(t)
	if err := store.MigrateTo(ctx, url, 7); err != nil {
		t.Fatalf("migrate to 7: %v", err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	plain := append([]byte{0}, "s3cret"...) // a secret stored without a key
	for _, id := range []int64{1, 2, 3} {
		exec(`INSERT INTO dispatch_credentials (id, signing_secret, algorithm, signature_scheme, created_at, updated_at)
			VALUES ($1, $2, 'HMAC_SHA256', 'FLOWCATALYST', now(), now())`, id, plain)
	}
	jobs := []struct {
		creds  any
		target string
	}{
		{1, "https://Partner.Example:443/hooks/a?token=x"},
		{1, "https://partner.example/hooks/b"},
		{1, "http://127.0.0.1:8080/h"},
		{1, "http://127.0.0.1:8080/other"},
		{3, "http://legacy.example:80/"},
		{3, "https://dotted.example./h"},
		{3, "https://[2001:DB8::1]:08443/x"},
		{99, "https://deleted.example/h"}, // credentials deleted since
		{nil, "https://unsigned.example/h"},
	}
	for i, j := range jobs {
		exec(`INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, payload, payload_content_type,
				credentials_id, status, max_retries, retry_strategy, next_attempt_at)
			VALUES ($1, now(), now(), 's', 't', $2, '{}', 'application/json', $3, 'COMPLETED', 3, 'exponential', now())`,
			100+i, j.target, j.creds)
	}
	exec(`INSERT INTO dispatch_subscription (id, name, url, event_types, credentials_id, max_retries, retry_strategy, status,
			created_at, updated_at)
		VALUES (200, 's', 'https://subs.example:8443/in', '{*}', 1, 3, 'linear', 'ACTIVE', now(), now()),
			(201, 'u', 'https://nocreds.example/in', '{*}', NULL, 3, 'linear', 'ACTIVE', now(), now())`)

	if err := store.MigrateTo(ctx, url, 8); err != nil {
		t.Fatalf("migrate to 8: %v", err)
	}
	want := map[int64][]string{
		1: {"http://127.0.0.1:8080", "https://partner.example", "https://subs.example:8443"},
		2: {},
		3: {"http://legacy.example", "https://[2001:db8::1]:8443", "https://dotted.example"},
	}
	for id, w := range want {
		var got []string
		if err := pool.QueryRow(ctx, `SELECT allowed_targets FROM dispatch_credentials WHERE id = $1`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("credentials %d bound to %q, want %q", id, got, w)
		}
		for _, e := range got { // each as the API itself would write it
			if n, err := dispatch.ParseAllowedTarget(e); err != nil || n != e {
				t.Errorf("credentials %d: entry %q is not in normal form (%q, %v)", id, e, n, err)
			}
		}
	}

	// The service, on the latest schema, sends each credentials to the
	// targets it was used with before, and nowhere else.
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	sealer, _ := store.NewSealer(nil, nil)
	st, err := store.New(pool, store.Options{NodeID: 3, Sealer: sealer, CredentialsTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		id, ok := j.creds.(int)
		if !ok || id == 99 {
			continue
		}
		c, err := st.GetCredentials(context.Background(), int64(id))
		if err != nil {
			t.Fatal(err)
		}
		if !c.Allows(j.target) {
			t.Errorf("credentials %d may no longer be sent to %s, which they were used with", id, j.target)
		}
		if c.Allows("https://evil.test/h") {
			t.Errorf("credentials %d may be sent anywhere", id)
		}
	}
	c1, _ := st.GetCredentials(ctx, 1)
	if !c1.Allows("https://subs.example:8443/in") || c1.Allows("https://subs.example/in") {
		t.Errorf("credentials 1 not bound to their subscription's origin alone: %q", c1.AllowedTargets)
	}
}
