package mediator_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/mediator"
	"github.com/dispatchhq/dispatch/store"
)

// keptHandoff takes every new job's pointer and drops it, as if sent: the
// store then claims those jobs in memory when their pointers come back
// (dispatch.Claim.Deferred).
type keptHandoff struct{}

func (keptHandoff) Reserve(int) bool            { return true }
func (keptHandoff) Hand([]dispatch.Unsent, int) {}
func (keptHandoff) Notify()                     {}

// handed is ctx carrying j's handle, as the router's mediation of the
// pointer its store handed over does.
func handed(ctx context.Context, j dispatch.Job) context.Context {
	return handoff.WithHandle(ctx, handoff.Handle{ID: j.ID, Mark: *j.QueuedAt})
}

// processHanded processes j's pointer as handed over by its store.
func (s procSetup) processHanded(t *testing.T, j dispatch.Job) dispatch.Decision {
	t.Helper()
	d, err := s.proc.Process(handed(t.Context(), j), dispatch.Pointer{ID: dispatch.FormatID(j.ID), PoolCode: dispatch.DefaultPool})
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	return d
}

// setupHanded is setupProcessor whose store hands its new jobs over.
func setupHanded(t *testing.T, cfg mediator.ProcessorConfig) procSetup {
	t.Helper()
	s := setupProcessor(t, cfg)
	s.store.HandOffTo(keptHandoff{})
	return s
}

// A quick delivery of a job created here a moment ago writes nothing
// before the request: the target is called while the job is still PENDING
// with no attempt, and the record leaves it COMPLETED with its attempt.
func TestQuickDeliveryWritesItsClaimWithItsOutcome(t *testing.T) {
	t.Parallel()
	s := setupHanded(t, mediator.ProcessorConfig{ClaimAfter: time.Minute})
	var seen []dispatch.Job
	var mu sync.Mutex
	var id int64
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		j, err := s.store.GetJob(r.Context(), id)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		seen = append(seen, j)
		mu.Unlock()
	})
	j := s.createJob(t, tg.URL, nil)
	id = j.ID

	if d := s.processHanded(t, j); !d.Done || d.JobStatus != dispatch.StatusCompleted {
		t.Fatalf("decision %+v; want Done, COMPLETED", d)
	}
	if len(seen) != 1 || seen[0].Status != dispatch.StatusPending || seen[0].AttemptCount != 0 {
		t.Fatalf("during the request the job was %+v; want one request, the job still PENDING with no attempt", seen)
	}
	got := s.job(t, id)
	if got.Status != dispatch.StatusCompleted || got.AttemptCount != 1 || got.LastAttemptAt == nil || got.ClaimedUntil != nil {
		t.Errorf("job %s attempt %d last attempt %v claim %v; want COMPLETED, attempt 1, no claim", got.Status, got.AttemptCount, got.LastAttemptAt, got.ClaimedUntil)
	}
	if as := s.attempts(t, id); len(as) != 1 || as[0].AttemptNumber != 1 || as[0].Status != dispatch.AttemptSuccess {
		t.Errorf("attempts %+v, want one successful attempt 1", as)
	}
	// The same pointer again: the job is finished, no second request.
	if d := s.process(t, id); !d.Done {
		t.Errorf("duplicate pointer: decision %+v; want Done", d)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("target received %d requests, want 1", n)
	}
}

// A delivery running past ClaimAfter writes its claim while it runs: the
// console shows the job IN_PROGRESS under its lease, a cancel is refused,
// and the outcome is recorded as for any claim.
func TestSlowDeliveryWritesItsClaimWhileRunning(t *testing.T) {
	t.Parallel()
	s := setupHanded(t, mediator.ProcessorConfig{ClaimAfter: 20 * time.Millisecond})
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	j := s.createJob(t, tg.URL, nil)

	done := make(chan dispatch.Decision, 1)
	go func() {
		d, err := s.proc.Process(handed(context.Background(), j), dispatch.Pointer{ID: dispatch.FormatID(j.ID), PoolCode: dispatch.DefaultPool})
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	tg.next(t)
	deadline := time.Now().Add(10 * time.Second)
	for got := s.job(t, j.ID); got.Status != dispatch.StatusInProgress || got.AttemptCount != 1 || got.ClaimedUntil == nil; got = s.job(t, j.ID) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("a delivery held for 10s left the job %s attempt %d; want IN_PROGRESS attempt 1 under a lease", got.Status, got.AttemptCount)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s.store.CancelJob(context.Background(), j.ID); dispatch.ErrorCode(err) != dispatch.EConflict {
		t.Errorf("cancel during the delivery: %v, want a conflict", err)
	}
	close(release)
	if d := <-done; !d.Done || d.JobStatus != dispatch.StatusCompleted {
		t.Errorf("decision %+v; want Done, COMPLETED", d)
	}
	if got := s.job(t, j.ID); got.Status != dispatch.StatusCompleted || got.AttemptCount != 1 || got.ClaimedUntil != nil {
		t.Errorf("job %s attempt %d claim %v; want COMPLETED, attempt 1, no claim", got.Status, got.AttemptCount, got.ClaimedUntil)
	}
}

// behindAnOpenBreaker is a processor whose store hands its jobs over, a
// target that answers 500, whose host's breaker the first job's failure has
// opened, and a second job for it, created and handed over.
func behindAnOpenBreaker(t *testing.T) (procSetup, *target, dispatch.Job) {
	t.Helper()
	s := setupHanded(t, mediator.ProcessorConfig{Breakers: mediator.NewBreakers(1, time.Minute), ClaimAfter: time.Minute})
	tg := statusTarget(t, 500)
	first := s.createJob(t, tg.URL, nil)
	second := s.createJob(t, tg.URL, nil)
	if d := s.processHanded(t, first); d.Done {
		t.Fatalf("first job: decision %+v; want a retry", d)
	}
	if got := s.job(t, first.ID); got.Status != dispatch.StatusFailed || got.AttemptCount != 1 {
		t.Fatalf("first job %s attempt %d; want FAILED after attempt 1", got.Status, got.AttemptCount)
	}
	return s, tg, second
}

// A deferred claim given back (the host's breaker is open) is given back
// as any: FAILED, no attempt spent, no claim, due when the breaker allows.
func TestDeferredClaimGivenBackToAnOpenBreaker(t *testing.T) {
	t.Parallel()
	s, tg, second := behindAnOpenBreaker(t)
	d := s.processHanded(t, second)
	if d.Done || !strings.Contains(d.Reason, "circuit breaker") {
		t.Errorf("decision %+v; want a retry because the breaker is open", d)
	}
	got := s.job(t, second.ID)
	if got.Status != dispatch.StatusFailed || got.AttemptCount != 0 || got.ClaimedUntil != nil || got.NextAttemptAt == nil || !got.NextAttemptAt.After(time.Now()) {
		t.Errorf("job %s attempt %d claim %v next %v; want FAILED, no attempt spent, no claim, due later", got.Status, got.AttemptCount, got.ClaimedUntil, got.NextAttemptAt)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("target received %d requests, want 1", n)
	}
}

// A deferred claim that is to be given back (the host's breaker is open)
// but finds, as it writes the claim first, that another replica claimed the
// job through a copy of its pointer, gives nothing back: the claim in the
// database is that holder's, and resetting it would have the job delivered
// again.
func TestADeferredClaimDoesNotGiveBackAnotherHoldersClaim(t *testing.T) {
	t.Parallel()
	s, tg, second := behindAnOpenBreaker(t)

	sealer, err := store.NewSealer(bytes.Repeat([]byte{7}, 32), nil) // no credentials here
	if err != nil {
		t.Fatal(err)
	}
	other, err := store.New(s.pool, store.Options{NodeID: 3, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.ClaimJob(t.Context(), second.ID, time.Now(), time.Minute)
	if err != nil || held.State != dispatch.Claimed {
		t.Fatalf("the other replica's claim: %v (%v)", held.State, err)
	}

	if d := s.processHanded(t, second); d.Done {
		t.Errorf("decision %+v; want a retry", d)
	}
	got := s.job(t, second.ID)
	if got.Status != dispatch.StatusInProgress || got.AttemptCount != 1 || got.ClaimedUntil == nil || !got.ClaimedUntil.Equal(*held.Job.ClaimedUntil) {
		t.Errorf("job %s attempt %d claim %v; want the other replica's claim left as it was (IN_PROGRESS, attempt 1, until %v)",
			got.Status, got.AttemptCount, got.ClaimedUntil, held.Job.ClaimedUntil)
	}
	if n := tg.hits.Load(); n != 1 {
		t.Errorf("target received %d requests, want 1", n)
	}
}

// A pointer from the queue is claimed in memory only on the message's
// first receive and with the queued mark it was sent under: then no one can
// have claimed the job through it. A later receive (the message came back:
// someone had it), or a pointer sent under another mark (sent again since),
// is claimed by statement.
func TestAFirstReceiveOfThePointerSentIsClaimedInMemory(t *testing.T) {
	t.Parallel()
	s := setupHanded(t, mediator.ProcessorConfig{ClaimAfter: time.Minute})
	var pending map[int64]bool
	var mu sync.Mutex
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		id, _ := dispatch.ParseID(r.Header.Get("X-Dispatch-Job-Id"))
		j, err := s.store.GetJob(r.Context(), id)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		pending[id] = j.Status == dispatch.StatusPending // nothing written yet: claimed in memory
		mu.Unlock()
	})
	pending = map[int64]bool{}
	fromQueue := func(j dispatch.Job, first bool, mark time.Time) {
		t.Helper()
		ctx := t.Context()
		if first {
			ctx = handoff.WithFirstReceive(ctx)
		}
		ptr := dispatch.Pointer{ID: dispatch.FormatID(j.ID), PoolCode: dispatch.DefaultPool, SentMark: mark.UnixMicro()}
		if d, err := s.proc.Process(ctx, ptr); err != nil || !d.Done {
			t.Fatalf("Process: %+v, %v", d, err)
		}
	}
	sent := s.createJob(t, tg.URL, nil)
	again := s.createJob(t, tg.URL, nil)
	resent := s.createJob(t, tg.URL, nil)
	fromQueue(sent, true, *sent.QueuedAt)
	fromQueue(again, false, *again.QueuedAt)
	fromQueue(resent, true, resent.QueuedAt.Add(time.Second))
	for _, c := range []struct {
		j        dispatch.Job
		inMemory bool
		what     string
	}{
		{sent, true, "the first receive of the pointer as sent"},
		{again, false, "a later receive"},
		{resent, false, "a pointer sent under another mark"},
	} {
		if pending[c.j.ID] != c.inMemory {
			t.Errorf("%s: claimed in memory %v, want %v", c.what, pending[c.j.ID], c.inMemory)
		}
		if got := s.job(t, c.j.ID); got.Status != dispatch.StatusCompleted || got.AttemptCount != 1 {
			t.Errorf("%s: job %s attempt %d, want COMPLETED after attempt 1", c.what, got.Status, got.AttemptCount)
		}
	}
}

// A retry of a job handed over in process goes back to the outbox in the
// record itself (its queued mark cleared): a process that dies before its
// give-back leaves the job to be sent when due. A pointer from the queue
// keeps its mark: its message brings it back.
func TestARetryOfAHandedJobIsGivenBackWithItsRecord(t *testing.T) {
	t.Parallel()
	s := setupHanded(t, mediator.ProcessorConfig{ClaimAfter: time.Minute})
	tg := statusTarget(t, http.StatusServiceUnavailable)
	handedJob := s.createJob(t, tg.URL, nil)
	if d := s.processHanded(t, handedJob); d.Done || d.RetryAfter <= 0 {
		t.Fatalf("decision %+v; want a retry", d)
	}
	if got := s.job(t, handedJob.ID); got.Status != dispatch.StatusFailed || got.QueuedAt != nil {
		t.Errorf("handed job after its retry's record: %s, queued at %v; want FAILED and back in the outbox (no mark)", got.Status, got.QueuedAt)
	}
	queued := s.createJob(t, tg.URL, nil)
	if d := s.process(t, queued.ID); d.Done {
		t.Fatalf("decision %+v; want a retry", d)
	}
	if got := s.job(t, queued.ID); got.Status != dispatch.StatusFailed || got.QueuedAt == nil {
		t.Errorf("job from the queue after its retry's record: %s, queued at %v; want FAILED, still marked", got.Status, got.QueuedAt)
	}
}

// failingClaims is the real store with its first RecordClaim failing, as
// on a brief database error.
type failingClaims struct {
	*store.Store
	failed atomic.Bool
	calls  atomic.Int32
}

func (f *failingClaims) RecordClaim(ctx context.Context, j dispatch.Job) (bool, error) {
	f.calls.Add(1)
	if f.failed.CompareAndSwap(false, true) {
		return false, errors.New("connection reset (injected)")
	}
	return f.Store.RecordClaim(ctx, j)
}

// A delivery running long whose claim cannot be written at first tries
// again while it runs: unwritten, the job would stay PENDING under its send
// lease, which ends before a long delivery does, and the sweep would send
// its pointer to another replica, which would deliver it a second time.
func TestAClaimThatCannotBeWrittenIsTriedAgain(t *testing.T) {
	t.Parallel()
	s := setupHanded(t, mediator.ProcessorConfig{})
	fc := &failingClaims{Store: s.store}
	proc := mediator.NewProcessor(fc, mediator.ProcessorConfig{
		ClaimAfter: 20 * time.Millisecond, Sender: newSender(5*time.Second, true),
		Breakers: mediator.NewBreakers(5, time.Minute), DeliveryTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Metrics: mediator.NewMetrics(prometheus.NewRegistry()),
	})
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	j := s.createJob(t, tg.URL, nil)
	done := make(chan dispatch.Decision, 1)
	go func() {
		d, err := proc.Process(handed(context.Background(), j), dispatch.Pointer{ID: dispatch.FormatID(j.ID), PoolCode: dispatch.DefaultPool})
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	tg.next(t)
	deadline := time.Now().Add(10 * time.Second)
	for got := s.job(t, j.ID); got.Status != dispatch.StatusInProgress || got.ClaimedUntil == nil; got = s.job(t, j.ID) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("a delivery held for 10 s after its claim's first write failed left the job %s; want IN_PROGRESS under a lease", got.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !fc.failed.Load() {
		t.Error("the first write of the claim was not made")
	}
	close(release)
	if d := <-done; !d.Done || d.JobStatus != dispatch.StatusCompleted {
		t.Errorf("decision %+v; want Done, COMPLETED", d)
	}
}

// A deferred claim given back before its delivery (the host's breaker is
// open) whose write fails leaves nothing behind: no timer writes the claim
// of the abandoned attempt later, nor tries again and again.
func TestAClaimGivenBackWhoseWriteFailsIsNotWrittenLater(t *testing.T) {
	t.Parallel()
	s, _, _ := behindAnOpenBreaker(t)
	fc := &failingClaims{Store: s.store}
	proc := mediator.NewProcessor(fc, mediator.ProcessorConfig{
		ClaimAfter: 20 * time.Millisecond, Sender: newSender(5*time.Second, true),
		Breakers: mediator.NewBreakers(1, time.Minute), DeliveryTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Metrics: mediator.NewMetrics(prometheus.NewRegistry()),
	})
	// This processor's breaker is its own: open it with the first failure.
	tg := statusTarget(t, 500)
	first := s.createJob(t, tg.URL, nil)
	if _, err := proc.Process(handed(t.Context(), first), dispatch.Pointer{ID: dispatch.FormatID(first.ID), PoolCode: dispatch.DefaultPool}); err != nil {
		t.Fatal(err)
	}
	second := s.createJob(t, tg.URL, nil)
	fc.failed.Store(false)
	calls := fc.calls.Load()
	d, err := proc.Process(handed(t.Context(), second), dispatch.Pointer{ID: dispatch.FormatID(second.ID), PoolCode: dispatch.DefaultPool})
	if err != nil || d.Done || !strings.Contains(d.Reason, "circuit breaker") {
		t.Fatalf("decision %+v (%v); want a retry because the breaker is open", d, err)
	}
	time.Sleep(15 * 20 * time.Millisecond) // fifteen times ClaimAfter: what a timer left behind would have done by now
	if n := fc.calls.Load() - calls; n != 1 {
		t.Errorf("%d writes of the claim given back, want the one that failed", n)
	}
	if got := s.job(t, second.ID); got.Status == dispatch.StatusInProgress {
		t.Errorf("the claim of the attempt given back was written later: the job is %s under a lease until %v", got.Status, got.ClaimedUntil)
	}
}
