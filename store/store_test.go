package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// lease is the claim lease the tests use.
const lease = 30 * time.Second

// setup returns a Store over its own fresh, migrated database and the pool
// under it, for reading rows the way an operator would.
func setup(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1})
	return st, pool
}

// newJob returns a valid job as the API would hand it to the store.
func newJob(mods ...func(*dispatch.Job)) *dispatch.Job {
	j := &dispatch.Job{
		Source:             "orders",
		Type:               "order.created",
		TargetURL:          "https://example.com/hook",
		Protocol:           dispatch.ProtocolHTTPWebhook,
		Headers:            map[string]string{"X-Tenant": "acme"},
		Payload:            `{"order":1}`,
		PayloadContentType: "application/json",
		Status:             dispatch.StatusPending,
		MaxRetries:         3,
		RetryStrategy:      dispatch.RetryExponential,
	}
	for _, m := range mods {
		m(j)
	}
	return j
}

func createJob(t *testing.T, st *store.Store, mods ...func(*dispatch.Job)) dispatch.Job {
	t.Helper()
	j, created, err := st.CreateJob(t.Context(), newJob(mods...))
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if !created {
		t.Fatalf("CreateJob: created = false for a new job")
	}
	return j
}

// createJobs stores n jobs made by newJob through one batch create.
func createJobs(t testing.TB, st *store.Store, n int) []dispatch.Job {
	t.Helper()
	batch := make([]*dispatch.Job, n)
	for i := range batch {
		batch[i] = newJob()
	}
	out, _, err := st.CreateJobs(t.Context(), batch)
	if err != nil {
		t.Fatalf("CreateJobs: %v", err)
	}
	return out
}

func getJob(t *testing.T, st *store.Store, id int64) dispatch.Job {
	t.Helper()
	j, err := st.GetJob(t.Context(), id)
	if err != nil {
		t.Fatalf("GetJob(%d): %v", id, err)
	}
	return j
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func attempts(t *testing.T, st *store.Store, id int64) []dispatch.Attempt {
	t.Helper()
	as, err := st.ListAttempts(t.Context(), id)
	if err != nil {
		t.Fatalf("ListAttempts(%d): %v", id, err)
	}
	return as
}

// wantCode fails unless err is a *dispatch.Error with the given code.
func wantCode(t *testing.T, err error, code string) *dispatch.Error {
	t.Helper()
	var de *dispatch.Error
	if !errors.As(err, &de) {
		t.Fatalf("error = %v, want a *dispatch.Error with code %s", err, code)
	}
	if de.Code != code {
		t.Fatalf("error code = %s (%v), want %s", de.Code, err, code)
	}
	return de
}

func withGroup(g string) func(*dispatch.Job)  { return func(j *dispatch.Job) { j.GroupID = g } }
func withSource(s string) func(*dispatch.Job) { return func(j *dispatch.Job) { j.Source = s } }
func withType(s string) func(*dispatch.Job)   { return func(j *dispatch.Job) { j.Type = s } }
func withMaxRetries(n int) func(*dispatch.Job) {
	return func(j *dispatch.Job) { j.MaxRetries = n }
}
func withMetadata(kv ...string) func(*dispatch.Job) {
	return func(j *dispatch.Job) {
		j.Metadata = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			j.Metadata[kv[i]] = kv[i+1]
		}
	}
}

func ids(jobs []dispatch.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestCreateJob(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	before := time.Now()

	first := createJob(t, st)
	second := createJob(t, st)

	if first.Status != dispatch.StatusPending || first.AttemptCount != 0 {
		t.Errorf("new job: status %s, attemptCount %d; want PENDING, 0", first.Status, first.AttemptCount)
	}
	if second.ID <= first.ID {
		t.Errorf("ids not time-sorted: second %d <= first %d", second.ID, first.ID)
	}
	// A TSID carries its creation time.
	if at := snowflake.ParseInt64(first.ID).Time(); at < before.Add(-time.Second).UnixMilli() || at > time.Now().Add(time.Second).UnixMilli() {
		t.Errorf("id %d encodes time %d ms, not around now", first.ID, at)
	}
	got := getJob(t, st, first.ID)
	if got.Payload != `{"order":1}` || got.Headers["X-Tenant"] != "acme" || got.TargetURL != "https://example.com/hook" || got.MaxRetries != 3 {
		t.Errorf("stored job differs from what was created: %+v", got)
	}
	if got.QueuedAt != nil {
		t.Errorf("a new job is marked queued before its pointer was sent")
	}
	if n := countRows(t, pool, "dispatch_job"); n != 2 {
		t.Errorf("job rows = %d, want 2", n)
	}
}

func TestCreateJobIdempotencyKey(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	orig := createJob(t, st, func(j *dispatch.Job) { j.IdempotencyKey = "order-1-created" })

	again, created, err := st.CreateJob(t.Context(), newJob(func(j *dispatch.Job) {
		j.IdempotencyKey = "order-1-created"
		j.Payload = `{"order":"different"}`
	}))
	if err != nil {
		t.Fatalf("CreateJob again: %v", err)
	}
	if created {
		t.Errorf("created = true for a repeated idempotency key")
	}
	if again.ID != orig.ID || again.Payload != orig.Payload {
		t.Errorf("repeat returned job %d payload %q, want the existing job %d payload %q", again.ID, again.Payload, orig.ID, orig.Payload)
	}
	if n := countRows(t, pool, "dispatch_job"); n != 1 {
		t.Errorf("job rows = %d, want 1", n)
	}
}

func TestCreateJobUnknownCredentials(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	_, _, err := st.CreateJob(t.Context(), newJob(func(j *dispatch.Job) { j.CredentialsID = 424242 }))
	de := wantCode(t, err, dispatch.EInvalid)
	if len(de.Details) != 1 || de.Details[0].Field != "credentialsId" {
		t.Errorf("details = %+v, want one problem with credentialsId", de.Details)
	}
	if n := countRows(t, pool, "dispatch_job"); n != 0 {
		t.Errorf("job rows = %d after a rejected create, want 0", n)
	}

	// With credentials that exist the same job is accepted.
	cr := dispatch.Credentials{SigningSecret: "s3cret", Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST",
		AllowedTargets: []string{"https://example.com"}}
	if err := st.CreateCredentials(t.Context(), &cr); err != nil {
		t.Fatal(err)
	}
	j := createJob(t, st, func(j *dispatch.Job) { j.CredentialsID = cr.ID })
	if j.CredentialsID != cr.ID {
		t.Errorf("credentialsId = %d, want %d", j.CredentialsID, cr.ID)
	}
}

func TestGetJobNotFound(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	_, err := st.GetJob(t.Context(), 12345)
	wantCode(t, err, dispatch.ENotFound)
	_, err = st.ListAttempts(t.Context(), 12345)
	wantCode(t, err, dispatch.ENotFound)
}

func TestSearchJobs(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	j1 := createJob(t, st, withGroup("g1"), withMetadata("tenant", "acme", "region", "eu"))
	j2 := createJob(t, st, withType("order.paid"), withMetadata("tenant", "acme", "region", "us"))
	j3 := createJob(t, st, withSource("billing"), withType("invoice.sent"), withGroup("g1"), withMetadata("tenant", "other", "region", "eu"))
	j4 := createJob(t, st, withSource("billing"))
	j5 := createJob(t, st)
	if _, err := st.CancelJob(t.Context(), j4.ID); err != nil {
		t.Fatal(err)
	}
	claim(t, st, j5.ID, now(), dispatch.Claimed)

	tests := []struct {
		name   string
		filter dispatch.JobFilter
		want   []dispatch.Job
	}{
		{"all, newest first", dispatch.JobFilter{}, []dispatch.Job{j5, j4, j3, j2, j1}},
		{"one status", dispatch.JobFilter{Statuses: []dispatch.Status{dispatch.StatusInProgress}}, []dispatch.Job{j5}},
		{"several statuses", dispatch.JobFilter{Statuses: []dispatch.Status{dispatch.StatusPending, dispatch.StatusCancelled}}, []dispatch.Job{j4, j3, j2, j1}},
		{"source", dispatch.JobFilter{Source: "billing"}, []dispatch.Job{j4, j3}},
		{"type", dispatch.JobFilter{Type: "order.created"}, []dispatch.Job{j5, j4, j1}},
		{"groupId", dispatch.JobFilter{GroupID: "g1"}, []dispatch.Job{j3, j1}},
		{"createdAfter is inclusive", dispatch.JobFilter{CreatedAfter: &j3.CreatedAt}, []dispatch.Job{j5, j4, j3}},
		{"createdBefore is exclusive", dispatch.JobFilter{CreatedBefore: &j3.CreatedAt}, []dispatch.Job{j2, j1}},
		{"created window", dispatch.JobFilter{CreatedAfter: &j2.CreatedAt, CreatedBefore: &j4.CreatedAt}, []dispatch.Job{j3, j2}},
		{"one metadata key", dispatch.JobFilter{Metadata: map[string]string{"tenant": "acme"}}, []dispatch.Job{j2, j1}},
		{"metadata keys are ANDed", dispatch.JobFilter{Metadata: map[string]string{"tenant": "acme", "region": "eu"}}, []dispatch.Job{j1}},
		{"filters are ANDed", dispatch.JobFilter{Source: "orders", Statuses: []dispatch.Status{dispatch.StatusPending}}, []dispatch.Job{j2, j1}},
		{"no match", dispatch.JobFilter{Metadata: map[string]string{"tenant": "nobody"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, total, err := st.SearchJobs(t.Context(), tt.filter, 0, 20)
			if err != nil {
				t.Fatalf("SearchJobs: %v", err)
			}
			if !slices.Equal(ids(got), ids(tt.want)) {
				t.Errorf("ids = %v, want %v", ids(got), ids(tt.want))
			}
			if total != len(tt.want) {
				t.Errorf("total = %d, want %d", total, len(tt.want))
			}
		})
	}
}

func TestSearchJobsPaging(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	var all []dispatch.Job
	for range 5 {
		all = append(all, createJob(t, st))
	}
	other := createJob(t, st, withSource("other"))
	slices.Reverse(all) // newest first

	tests := []struct {
		page, size int
		want       []dispatch.Job
	}{
		{0, 2, all[0:2]},
		{1, 2, all[2:4]},
		{2, 2, all[4:5]},
		{3, 2, nil},
		{0, 10, all},
	}
	for _, tt := range tests {
		got, total, err := st.SearchJobs(t.Context(), dispatch.JobFilter{Source: "orders"}, tt.page, tt.size)
		if err != nil {
			t.Fatalf("SearchJobs page %d size %d: %v", tt.page, tt.size, err)
		}
		if !slices.Equal(ids(got), ids(tt.want)) {
			t.Errorf("page %d size %d: ids = %v, want %v", tt.page, tt.size, ids(got), ids(tt.want))
		}
		if total != 5 {
			t.Errorf("page %d size %d: total = %d, want 5 (the filtered count, not the page's)", tt.page, tt.size, total)
		}
		if slices.Contains(ids(got), other.ID) {
			t.Errorf("page %d holds a job of another source", tt.page)
		}
	}
}

func TestCancelJob(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)

	pending := createJob(t, st)
	failed := createJob(t, st)
	failJob(t, st, failed.ID, now(), now().Add(time.Hour))
	inProgress := createJob(t, st)
	claim(t, st, inProgress.ID, now(), dispatch.Claimed)
	done := createJob(t, st)
	completeJob(t, st, done.ID, now())

	tests := []struct {
		name     string
		id       int64
		wantCode string // "" means the cancel succeeds
		want     dispatch.Status
	}{
		{"pending", pending.ID, "", dispatch.StatusCancelled},
		{"failed", failed.ID, "", dispatch.StatusCancelled},
		{"in progress", inProgress.ID, dispatch.EConflict, dispatch.StatusInProgress},
		{"completed", done.ID, dispatch.EConflict, dispatch.StatusCompleted},
		{"already cancelled", pending.ID, dispatch.EConflict, dispatch.StatusCancelled},
		{"unknown", 99999, dispatch.ENotFound, ""},
	}
	for _, tt := range tests { // sequential: "already cancelled" follows "pending"
		j, err := st.CancelJob(t.Context(), tt.id)
		if tt.wantCode != "" {
			wantCode(t, err, tt.wantCode)
		} else if err != nil {
			t.Fatalf("%s: CancelJob: %v", tt.name, err)
		} else if j.Status != dispatch.StatusCancelled || j.CompletedAt == nil {
			t.Errorf("%s: returned status %s completedAt %v, want CANCELLED with completedAt", tt.name, j.Status, j.CompletedAt)
		}
		if tt.want != "" {
			if got := getJob(t, st, tt.id).Status; got != tt.want {
				t.Errorf("%s: stored status %s, want %s", tt.name, got, tt.want)
			}
		}
	}
}

func TestReplayJob(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	orig := createJob(t, st, withGroup("g"), withMetadata("tenant", "acme"), func(j *dispatch.Job) { j.IdempotencyKey = "k1" })

	_, err := st.ReplayJob(t.Context(), orig.ID)
	wantCode(t, err, dispatch.EConflict)
	if n := countRows(t, pool, "dispatch_job"); n != 1 {
		t.Fatalf("replaying a live job stored something: %d rows", n)
	}

	if _, err := st.CancelJob(t.Context(), orig.ID); err != nil {
		t.Fatal(err)
	}
	replay, err := st.ReplayJob(t.Context(), orig.ID)
	if err != nil {
		t.Fatalf("ReplayJob of a cancelled job: %v", err)
	}
	if replay.ID == orig.ID || replay.ReplayOf != orig.ID {
		t.Errorf("replay id %d replayOf %d, want a new job replaying %d", replay.ID, replay.ReplayOf, orig.ID)
	}
	if replay.Status != dispatch.StatusPending || replay.AttemptCount != 0 || replay.CompletedAt != nil {
		t.Errorf("replay is %s with %d attempts, completedAt %v; want a fresh PENDING job", replay.Status, replay.AttemptCount, replay.CompletedAt)
	}
	if replay.Payload != orig.Payload || replay.TargetURL != orig.TargetURL || replay.GroupID != "g" || replay.Metadata["tenant"] != "acme" || replay.Headers["X-Tenant"] != "acme" {
		t.Errorf("replay does not carry the original's delivery: %+v", replay)
	}
	if replay.IdempotencyKey != "" {
		t.Errorf("replay took the idempotency key %q", replay.IdempotencyKey)
	}
	if got := getJob(t, st, orig.ID); got.Status != dispatch.StatusCancelled {
		t.Errorf("original changed to %s by its replay", got.Status)
	}
	_, err = st.ReplayJob(t.Context(), 99999)
	wantCode(t, err, dispatch.ENotFound)
}

func TestReplayJobs(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	var dead []dispatch.Job
	for range 3 {
		j := createJob(t, st, withSource("billing"))
		errorJob(t, st, j.ID, now())
		dead = append(dead, j)
	}
	otherSource := createJob(t, st, withSource("orders"))
	errorJob(t, st, otherSource.ID, now())
	live := createJob(t, st, withSource("billing"))

	filter := dispatch.JobFilter{Source: "billing", Statuses: []dispatch.Status{dispatch.StatusError}}
	res, err := st.ReplayJobs(t.Context(), filter, 2)
	got := res.Jobs
	if err != nil {
		t.Fatalf("ReplayJobs: %v", err)
	}
	var replayed []int64
	for _, j := range got {
		replayed = append(replayed, j.ReplayOf)
		if j.Status != dispatch.StatusPending {
			t.Errorf("replay %d is %s, want PENDING", j.ID, j.Status)
		}
	}
	if want := []int64{dead[0].ID, dead[1].ID}; !slices.Equal(replayed, want) {
		t.Errorf("replayed %v, want the two oldest matching jobs %v", replayed, want)
	}

	// Without a status filter only terminal jobs are replayed.
	res, err = st.ReplayJobs(t.Context(), dispatch.JobFilter{Source: "billing"}, 100)
	got = res.Jobs
	if err != nil {
		t.Fatalf("ReplayJobs: %v", err)
	}
	for _, j := range got {
		if j.ReplayOf == live.ID || j.ReplayOf == otherSource.ID {
			t.Errorf("replayed job %d, which is live or of another source", j.ReplayOf)
		}
	}
	// A redrive is idempotent: the two already replayed are not replayed again.
	if len(got) != 1 || got[0].ReplayOf != dead[2].ID {
		t.Errorf("replayed %d billing jobs, want only the one ERROR job not replayed before", len(got))
	}
	again, err := st.ReplayJobs(t.Context(), dispatch.JobFilter{Source: "billing", Statuses: []dispatch.Status{dispatch.StatusError}}, 100)
	if err != nil || len(again.Jobs) != 0 {
		t.Errorf("a repeated redrive replayed %d jobs (err %v), want 0", len(again.Jobs), err)
	}
}

func TestCreateJobs(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)

	batch := []*dispatch.Job{newJob(), nil, newJob(func(j *dispatch.Job) { j.IdempotencyKey = "b" }), newJob(func(j *dispatch.Job) { j.IdempotencyKey = "b" })}
	out, created, err := st.CreateJobs(t.Context(), batch)
	if err != nil {
		t.Fatalf("CreateJobs: %v", err)
	}
	if !slices.Equal(created, []bool{true, false, true, false}) {
		t.Errorf("created = %v, want [true false true false] (nil skipped, key repeated within the batch)", created)
	}
	if out[1].ID != 0 || out[3].ID != out[2].ID {
		t.Errorf("ids = %v: the skipped item has a job, or the repeat differs from its first", ids(out))
	}
	if n := countRows(t, pool, "dispatch_job"); n != 2 {
		t.Fatalf("job rows = %d, want 2", n)
	}

	// One item the store must refuse refuses the whole batch, named by index.
	_, _, err = st.CreateJobs(t.Context(), []*dispatch.Job{newJob(), nil, newJob(func(j *dispatch.Job) { j.CredentialsID = 777 })})
	de := wantCode(t, err, dispatch.EInvalid)
	if !strings.Contains(de.Message, "jobs[2]") {
		t.Errorf("message %q does not name jobs[2]", de.Message)
	}
	if n := countRows(t, pool, "dispatch_job"); n != 2 {
		t.Errorf("job rows = %d after a refused batch, want still 2", n)
	}
}

// What a create returns (the 201's body) is the job as stored: the insert
// returns only ids, and the rest is built from what was sent, so every
// field must come out as a read of the row gives it.
func TestCreatedJobReadsAsStored(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	ctx := t.Context()
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	// Each kind of job is created alone (one row, from scalars) and in a
	// batch (from arrays): both must read back as the create returned it.
	kinds := []func(j *dispatch.Job, key string){
		func(*dispatch.Job, string) {},
		func(j *dispatch.Job, key string) { // every optional field, times with nanoseconds and an offset
			j.ExternalID, j.GroupID, j.IdempotencyKey = "ext-1", "group-1", "idem-created-reads-"+key
			j.Metadata = map[string]string{"tenant": "acme"}
			j.ScheduledFor = at("2099-01-02T03:04:05.123456789+02:00")
			j.ExpiresAt = at("2099-02-02T03:04:05.987654321-05:00")
			j.QueueURL, j.PoolCode = "http://127.0.0.1:9324/000000000000/other.fifo", "OTHER-POOL"
		},
		func(j *dispatch.Job, _ string) { j.Headers, j.Metadata = nil, nil },
		func(j *dispatch.Job, _ string) { j.ScheduledFor = at("2000-01-01T00:00:00.000000999Z") }, // due now: handed off
		func(j *dispatch.Job, _ string) { j.GroupID = "g" },
	}
	var made []dispatch.Job
	var batch []*dispatch.Job
	for _, kind := range kinds {
		single, created, err := st.CreateJob(ctx, newJob(func(j *dispatch.Job) { kind(j, "alone") }))
		if err != nil || !created {
			t.Fatalf("create: created=%v err=%v", created, err)
		}
		made = append(made, single)
		batch = append(batch, newJob(func(j *dispatch.Job) { kind(j, "batch") }))
	}
	inBatch, _, err := st.CreateJobs(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range append(made, inBatch...) {
		stored, err := st.GetJob(ctx, got.ID)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(inUTC(got))
		w, _ := json.Marshal(inUTC(stored))
		if string(g) != string(w) {
			t.Errorf("job %d: the create returned\n%s\nthe row reads\n%s", i, g, w)
		}
		if i < len(kinds) { // alone and in the batch, a kind is stored alike
			a, b := inUTC(got), inUTC(inBatch[i])
			a.ID, a.CreatedAt, a.UpdatedAt, a.NextAttemptAt, a.QueuedAt, a.Seq, a.IdempotencyKey = 0, time.Time{}, time.Time{}, nil, nil, 0, ""
			b.ID, b.CreatedAt, b.UpdatedAt, b.NextAttemptAt, b.QueuedAt, b.Seq, b.IdempotencyKey = 0, time.Time{}, time.Time{}, nil, nil, 0, ""
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Errorf("kind %d: alone\n%s\nin a batch\n%s", i, ja, jb)
			}
		}
	}
}

// inUTC is j with its times in UTC, so that jobs compare by instant
// whatever time zone this machine's reads return them in.
func inUTC(j dispatch.Job) dispatch.Job {
	j.CreatedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	for _, p := range []**time.Time{&j.ScheduledFor, &j.ExpiresAt, &j.LastAttemptAt, &j.CompletedAt,
		&j.QueuedAt, &j.NextAttemptAt, &j.ClaimedUntil} {
		if *p != nil {
			v := (*p).UTC()
			*p = &v
		}
	}
	return j
}
