package mediator_test

import (
	"context"
	"github.com/jackc/pgx/v5/pgxpool"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
	"github.com/dispatchhq/dispatch/webhook"
)

// procSetup is a Processor over a real store, plus the store to inspect.
type procSetup struct {
	proc  *mediator.Processor
	store *store.Store
	pool  *pgxpool.Pool
}

// setupProcessor builds a Processor on a fresh database. The backoff has
// no jitter (2s base) so retry delays are exact; cfg fields override.
func setupProcessor(t testing.TB, cfg mediator.ProcessorConfig) procSetup {
	t.Helper()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 2})
	if cfg.Sender == nil {
		cfg.Sender = newSender(5*time.Second, true)
	}
	if cfg.Breakers == nil {
		cfg.Breakers = mediator.NewBreakers(5, time.Minute)
	}
	if cfg.Backoff.Base == 0 {
		cfg.Backoff = dispatch.Backoff{Base: 2 * time.Second, Max: time.Minute, Rand: func() float64 { return 0.5 }}
	}
	cfg.DeliveryTimeout = 5 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.Metrics == nil {
		cfg.Metrics = mediator.NewMetrics(prometheus.NewRegistry())
	}
	return procSetup{proc: mediator.NewProcessor(st, cfg), store: st, pool: pool}
}

// createJob stores a PENDING job for url; modify adjusts it first.
func (s procSetup) createJob(t *testing.T, url string, modify func(*dispatch.Job)) dispatch.Job {
	t.Helper()
	j := &dispatch.Job{
		Source: "orders", Type: "order.created", TargetURL: url, Protocol: dispatch.ProtocolHTTPWebhook,
		Payload: `{"orderId":42}`, PayloadContentType: "application/json", Status: dispatch.StatusPending,
		MaxRetries: 3, RetryStrategy: dispatch.RetryExponential,
	}
	if modify != nil {
		modify(j)
	}
	out, created, err := s.store.CreateJob(context.Background(), j)
	if err != nil || !created {
		t.Fatalf("create job: created %v, %v", created, err)
	}
	return out
}

func (s procSetup) process(t *testing.T, id int64) dispatch.Decision {
	t.Helper()
	d, err := s.proc.Process(context.Background(), dispatch.Pointer{
		ID: dispatch.FormatID(id), PoolCode: dispatch.DefaultPool, MediationType: "HTTP",
	})
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	return d
}

func (s procSetup) job(t *testing.T, id int64) dispatch.Job {
	t.Helper()
	j, err := s.store.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (s procSetup) attempts(t *testing.T, id int64) []dispatch.Attempt {
	t.Helper()
	as, err := s.store.ListAttempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

func TestProcessSuccess(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := statusTarget(t, 200)
	creds := &dispatch.Credentials{BearerToken: "tok", SigningSecret: "whsec_secret", Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST",
		AllowedTargets: []string{tg.URL}}
	if err := s.store.CreateCredentials(context.Background(), creds); err != nil {
		t.Fatal(err)
	}
	j := s.createJob(t, tg.URL, func(j *dispatch.Job) { j.CredentialsID = creds.ID })

	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusCompleted {
		t.Errorf("decision %+v; want Done, COMPLETED", d)
	}
	got := s.job(t, j.ID)
	if got.Status != dispatch.StatusCompleted || got.AttemptCount != 1 || got.CompletedAt == nil || got.LastError != "" {
		t.Errorf("job %+v", got)
	}
	as := s.attempts(t, j.ID)
	if len(as) != 1 || as[0].Status != dispatch.AttemptSuccess || as[0].ResponseCode != 200 || as[0].AttemptNumber != 1 {
		t.Errorf("attempts %+v", as)
	}
	r := tg.next(t)
	if r.header.Get("Authorization") != "Bearer tok" || r.header.Get("X-Dispatch-Attempt") != "1" ||
		r.header.Get("X-Dispatch-Job-Id") != dispatch.FormatID(j.ID) {
		t.Errorf("request headers %v", r.header)
	}
	if err := (webhook.Verifier{Secrets: []string{"whsec_secret"}}).Verify(r.header, r.body); err != nil {
		t.Errorf("signature with the stored secret does not verify: %v", err)
	}

	// The same pointer again (SQS delivers at least once): no second request.
	d = s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusCompleted {
		t.Errorf("duplicate pointer: decision %+v; want Done", d)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("target received %d requests; a completed job was delivered again", n)
	}
	if as := s.attempts(t, j.ID); len(as) != 1 {
		t.Errorf("%d attempts after a duplicate pointer", len(as))
	}
}

// A delivered webhook whose outcome cannot be written for some seconds (the
// database restarting, failing over) is recorded once it can, within the
// claim's lease: given up on, it would be sent again when the lease ends.
func TestProcessWaitsOutADatabaseOutageToRecordTheOutcome(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	ctx := context.Background()
	// The attempt's insert fails from the moment the target answers until
	// the outage ends, 7.5 s later: longer than the retries the outcome
	// once had (6.2 s), well within the lease (25 s here).
	if _, err := s.pool.Exec(ctx, `CREATE FUNCTION outage() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'the database is restarting' USING ERRCODE = '57P03'; END$$`); err != nil {
		t.Fatal(err)
	}
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		if _, err := s.pool.Exec(ctx, `CREATE TRIGGER outage BEFORE INSERT ON dispatch_attempt EXECUTE FUNCTION outage()`); err != nil {
			t.Error(err)
		}
		time.AfterFunc(7500*time.Millisecond, func() {
			if _, err := s.pool.Exec(ctx, `DROP TRIGGER outage ON dispatch_attempt`); err != nil {
				t.Error(err)
			}
		})
		w.WriteHeader(http.StatusOK)
	})
	j := s.createJob(t, tg.URL, nil)
	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusCompleted {
		t.Errorf("decision %+v; want Done, COMPLETED", d)
	}
	if as := s.attempts(t, j.ID); len(as) != 1 || as[0].Status != dispatch.AttemptSuccess {
		t.Errorf("attempts %+v; want the one SUCCESS", as)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("the target got %d requests, want 1", n)
	}
}

// An error the database would answer again (a constraint, a bug) is tried
// a few times only, not for the whole lease: it holds a worker for nothing.
func TestProcessGivesUpSoonOnAnErrorTheDatabaseWouldRepeat(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '23514'; END$$;
		CREATE TRIGGER refuse BEFORE INSERT ON dispatch_attempt EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	j := s.createJob(t, statusTarget(t, 200).URL, nil)
	start := time.Now()
	_, err := s.proc.Process(ctx, dispatch.Pointer{ID: dispatch.FormatID(j.ID), PoolCode: dispatch.DefaultPool, MediationType: "HTTP"})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Process: %v, want the database's refusal", err)
	}
	// Five tries take 6.2 s of backoff; the lease is 25 s here.
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("gave up after %s, want within the five tries (about 6 s), not the lease", took.Round(time.Second))
	}
}

// A delivery whose claim was taken over while it ran (its holder presumed
// dead) keeps its attempt in the record, but is not done with: its pointer
// comes back to find the job's state, which the new holder decides.
// Answering done could delete the only pointer of a job still owed one.
func TestProcessTakenOverMeanwhileIsNotDone(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	var id int64
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		// Another processor, an hour on, finds this claim stale.
		if c, err := s.store.ClaimJob(context.Background(), id, time.Now().Add(time.Hour), time.Minute); err != nil || c.State != dispatch.Claimed {
			t.Errorf("takeover: %v (%v)", c.State, err)
		}
	})
	id = s.createJob(t, tg.URL, nil).ID

	if d := s.process(t, id); d.Done || d.RetryAfter <= 0 {
		t.Errorf("decision %+v; want the pointer back later, not done", d)
	}
	if as := s.attempts(t, id); len(as) != 1 || as[0].Status != dispatch.AttemptSuccess {
		t.Errorf("attempts %+v; want attempt 1 as it happened (SUCCESS)", as)
	}
	if got := s.job(t, id); got.Status != dispatch.StatusInProgress || got.AttemptCount != 2 {
		t.Errorf("job %s attempt %d; want the new holder's IN_PROGRESS attempt 2", got.Status, got.AttemptCount)
	}
}

func TestProcessRetryableFailure(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(500)
		w.Write([]byte("database on fire"))
	})
	j := s.createJob(t, tg.URL, nil)

	d := s.process(t, j.ID)
	if d.Done || d.RetryAfter != 2*time.Second || d.JobStatus != dispatch.StatusFailed {
		t.Errorf("decision %+v; want a retry after the 2s backoff", d)
	}
	got := s.job(t, j.ID)
	if got.Status != dispatch.StatusFailed || got.AttemptCount != 1 || !strings.Contains(got.LastError, "500") {
		t.Errorf("job %+v", got)
	}
	as := s.attempts(t, j.ID)
	if len(as) != 1 || as[0].Status != dispatch.AttemptFailure || as[0].ResponseCode != 500 ||
		as[0].ResponseBody != "database on fire" || !strings.Contains(as[0].ErrorMessage, "500") {
		t.Fatalf("attempts %+v", as)
	}
	if got.NextAttemptAt == nil || got.NextAttemptAt.Sub(as[0].CompletedAt) != 2*time.Second {
		t.Errorf("next attempt at %v, attempt completed %v; want 2s later", got.NextAttemptAt, as[0].CompletedAt)
	}

	// Redelivered before the backoff is over: not attempted again.
	d = s.process(t, j.ID)
	if d.Done || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second {
		t.Errorf("early redelivery: decision %+v; want a retry within the backoff", d)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("target received %d requests before the backoff was over", n)
	}
}

func TestProcessRetryAfterHeader(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(429)
	})
	j := s.createJob(t, tg.URL, nil)
	if d := s.process(t, j.ID); d.Done || d.RetryAfter != 30*time.Second {
		t.Errorf("decision %+v; want the target's Retry-After of 30s", d)
	}
}

// A grouped job waiting for its next attempt or its time puts its pointer
// back for a minute at most: the queue holds the rest of its group behind
// it, so a cancel (or an expiry) meanwhile must free the group within a
// minute, not after the whole backoff. The job's own time is unchanged.
func TestProcessGroupedJobWaitsAMinuteAtMostOnTheQueue(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{
		Backoff: dispatch.Backoff{Base: 2 * time.Second, Max: time.Hour, Rand: func() float64 { return 0.5 }}})
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(429)
	})
	j := s.createJob(t, tg.URL, func(j *dispatch.Job) { j.GroupID = "order-1" })
	if d := s.process(t, j.ID); d.Done || d.RetryAfter != time.Minute {
		t.Errorf("decision %+v; want the pointer back within a minute", d)
	}
	got := s.job(t, j.ID)
	if got.NextAttemptAt == nil || time.Until(*got.NextAttemptAt) < 9*time.Minute {
		t.Errorf("next attempt at %v; want the target's 10 minutes", got.NextAttemptAt)
	}
	// Back early: still not attempted, and back within a minute again.
	if d := s.process(t, j.ID); d.Done || d.RetryAfter > time.Minute || d.RetryAfter < 59*time.Second {
		t.Errorf("early redelivery: decision %+v; want a minute", d)
	}
	if _, err := s.store.CancelJob(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	if d := s.process(t, j.ID); !d.Done {
		t.Errorf("after the cancel: decision %+v; want done, so that its group goes on", d)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("target received %d requests, want 1", n)
	}

	later := time.Now().Add(time.Hour)
	sched := s.createJob(t, tg.URL, func(j *dispatch.Job) { j.GroupID = "order-2"; j.ScheduledFor = &later })
	if d := s.process(t, sched.ID); d.Done || d.RetryAfter > time.Minute || d.RetryAfter < 59*time.Second {
		t.Errorf("grouped job scheduled in an hour: decision %+v; want a minute", d)
	}
}

func TestProcessExhausted(t *testing.T) {
	t.Parallel()
	// A tiny backoff, so the job is due again at once.
	s := setupProcessor(t, mediator.ProcessorConfig{
		Backoff: dispatch.Backoff{Base: time.Millisecond, Max: time.Millisecond, Rand: func() float64 { return 0.5 }},
	})
	tg := statusTarget(t, 503)
	j := s.createJob(t, tg.URL, func(j *dispatch.Job) { j.MaxRetries = 2 })

	if d := s.process(t, j.ID); d.Done || d.JobStatus != dispatch.StatusFailed {
		t.Fatalf("first attempt: decision %+v; want a retry", d)
	}
	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusError {
		t.Errorf("last attempt: decision %+v; want Done, ERROR", d)
	}
	got := s.job(t, j.ID)
	if got.Status != dispatch.StatusError || got.AttemptCount != 2 || !strings.Contains(got.LastError, "exhausted") {
		t.Errorf("job %+v", got)
	}
	if as := s.attempts(t, j.ID); len(as) != 2 || as[1].AttemptNumber != 2 || as[1].ResponseCode != 503 {
		t.Errorf("attempts %+v", as)
	}

	// maxRetries is a hard cap: further pointers change nothing.
	if d := s.process(t, j.ID); !d.Done {
		t.Errorf("pointer for an ERROR job: %+v", d)
	}
	if n := tg.hits.Load(); n != 2 {
		t.Errorf("target received %d requests, want maxRetries = 2", n)
	}
}

func TestProcessNotRetryable(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := statusTarget(t, 404)
	j := s.createJob(t, tg.URL, func(j *dispatch.Job) { j.MaxRetries = 5 })

	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusError {
		t.Errorf("decision %+v; want Done, ERROR", d)
	}
	got := s.job(t, j.ID)
	if got.Status != dispatch.StatusError || got.AttemptCount != 1 || !strings.Contains(got.LastError, "404") {
		t.Errorf("job %+v", got)
	}
	if as := s.attempts(t, j.ID); len(as) != 1 || as[0].ResponseCode != 404 {
		t.Errorf("attempts %+v", as)
	}
}

func TestProcessBlockedTarget(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{Sender: newSender(5*time.Second, false)})
	tg := statusTarget(t, 200)
	j := s.createJob(t, tg.URL, nil)

	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusError {
		t.Errorf("decision %+v; want Done, ERROR", d)
	}
	if as := s.attempts(t, j.ID); len(as) != 1 || as[0].Status != dispatch.AttemptBlocked {
		t.Errorf("attempts %+v; want one BLOCKED", as)
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("target received %d requests", n)
	}
}

func TestProcessDeletedCredentials(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := statusTarget(t, 200)
	ctx := context.Background()
	creds := &dispatch.Credentials{SigningSecret: "s", Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST", AllowedTargets: []string{tg.URL}}
	if err := s.store.CreateCredentials(ctx, creds); err != nil {
		t.Fatal(err)
	}
	j := s.createJob(t, tg.URL, func(j *dispatch.Job) { j.CredentialsID = creds.ID })
	if err := s.store.DeleteCredentials(ctx, creds.ID); err != nil {
		t.Fatal(err)
	}

	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusError {
		t.Errorf("decision %+v; want Done, ERROR", d)
	}
	got := s.job(t, j.ID)
	if got.Status != dispatch.StatusError || !strings.Contains(got.LastError, "credentials "+dispatch.FormatID(creds.ID)) {
		t.Errorf("job status %s, lastError %q; want ERROR naming the credentials", got.Status, got.LastError)
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("an unsigned request went to the target (%d)", n)
	}
}

// An admin narrowed the credentials' allowedTargets after the job was
// created: the job is not sent with them (nor unsigned), ends ERROR at once
// with a lastError that says why, and its one attempt is BLOCKED.
func TestProcessCredentialsNoLongerAllowedForTheTarget(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := statusTarget(t, 200)
	ctx := context.Background()
	creds := &dispatch.Credentials{BearerToken: "partner-token", SigningSecret: "s", Algorithm: dispatch.AlgorithmHMACSHA256,
		SignatureScheme: "FLOWCATALYST", AllowedTargets: []string{tg.URL}}
	if err := s.store.CreateCredentials(ctx, creds); err != nil {
		t.Fatal(err)
	}
	j := s.createJob(t, tg.URL+"/hooks", func(j *dispatch.Job) { j.CredentialsID = creds.ID; j.MaxRetries = 5 })
	if _, err := s.store.SetCredentialsTargets(ctx, creds.ID, []string{"https://partner.example"}); err != nil {
		t.Fatal(err)
	}

	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusError {
		t.Errorf("decision %+v; want Done, ERROR", d)
	}
	got := s.job(t, j.ID)
	if got.Status != dispatch.StatusError || !strings.Contains(got.LastError, "allowedTargets") ||
		!strings.Contains(got.LastError, "credentials "+dispatch.FormatID(creds.ID)) {
		t.Errorf("job status %s, lastError %q; want ERROR saying the credentials may not go there", got.Status, got.LastError)
	}
	if as := s.attempts(t, j.ID); len(as) != 1 || as[0].Status != dispatch.AttemptBlocked {
		t.Errorf("attempts %+v; want one BLOCKED", as)
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("the target received %d requests", n)
	}
}

func TestProcessOpenBreaker(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{Breakers: mediator.NewBreakers(1, time.Minute)})
	tg := statusTarget(t, 500)
	first := s.createJob(t, tg.URL, nil)
	second := s.createJob(t, tg.URL, nil)

	if d := s.process(t, first.ID); d.Done {
		t.Fatalf("first job: decision %+v; want a retry", d)
	}
	// One failure opened the host's breaker: the second job is not attempted.
	d := s.process(t, second.ID)
	if d.Done || d.RetryAfter <= 0 || !strings.Contains(d.Reason, "circuit breaker") {
		t.Errorf("decision %+v; want a retry because the breaker is open", d)
	}
	got := s.job(t, second.ID)
	if got.Status != dispatch.StatusFailed || got.AttemptCount != 0 || got.ClaimedUntil != nil {
		t.Errorf("job %s with %d attempts, claim %v; want FAILED, no attempt spent, no claim", got.Status, got.AttemptCount, got.ClaimedUntil)
	}
	if as := s.attempts(t, second.ID); len(as) != 0 {
		t.Errorf("attempts recorded for a job the breaker held back: %+v", as)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("target received %d requests, want 1", n)
	}
}

func TestProcessOpenBreakerKeepsFailedJobFailed(t *testing.T) {
	t.Parallel()
	breakers := mediator.NewBreakers(1, time.Minute)
	s := setupProcessor(t, mediator.ProcessorConfig{
		Breakers: breakers,
		Backoff:  dispatch.Backoff{Base: time.Millisecond, Max: time.Millisecond, Rand: func() float64 { return 0.5 }},
	})
	tg := statusTarget(t, 500)
	j := s.createJob(t, tg.URL, nil)
	s.process(t, j.ID) // fails once and opens the breaker

	d := s.process(t, j.ID)
	if d.Done || d.RetryAfter <= 0 {
		t.Errorf("decision %+v; want a retry", d)
	}
	got := s.job(t, j.ID)
	if got.Status != dispatch.StatusFailed || got.AttemptCount != 1 {
		t.Errorf("job %s with %d attempts; want FAILED with its 1 attempt", got.Status, got.AttemptCount)
	}
}

func TestProcessUnknownAndMalformedPointers(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	for _, id := range []string{"7311097302432047104", "not-a-number", "0", "-1", ""} {
		d, err := s.proc.Process(context.Background(), dispatch.Pointer{ID: id})
		if err != nil || !d.Done {
			t.Errorf("pointer %q: decision %+v, err %v; want Done", id, d, err)
		}
	}
}

func TestProcessExpired(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := statusTarget(t, 200)
	j := s.createJob(t, tg.URL, func(j *dispatch.Job) {
		past := time.Now().Add(-time.Minute)
		j.ExpiresAt = &past
	})
	d := s.process(t, j.ID)
	if !d.Done || d.JobStatus != dispatch.StatusExpired {
		t.Errorf("decision %+v; want Done, EXPIRED", d)
	}
	if got := s.job(t, j.ID); got.Status != dispatch.StatusExpired {
		t.Errorf("job status %s", got.Status)
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("an expired job was delivered")
	}
}

func TestProcessScheduledJobNotDue(t *testing.T) {
	t.Parallel()
	s := setupProcessor(t, mediator.ProcessorConfig{})
	tg := statusTarget(t, 200)
	j := s.createJob(t, tg.URL, func(j *dispatch.Job) {
		later := time.Now().Add(time.Hour)
		j.ScheduledFor = &later
	})
	d := s.process(t, j.ID)
	if d.Done || d.RetryAfter < 59*time.Minute || d.RetryAfter > time.Hour {
		t.Errorf("decision %+v; want a retry in about an hour", d)
	}
	if got := s.job(t, j.ID); got.Status != dispatch.StatusPending || got.AttemptCount != 0 {
		t.Errorf("job %s with %d attempts", got.Status, got.AttemptCount)
	}
	if n := tg.hits.Load(); n != 0 {
		t.Errorf("a job was delivered before its scheduledFor")
	}
}
