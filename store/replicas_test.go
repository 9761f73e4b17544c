package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// skewedIDs makes snowflake-shaped ids (ms<<22 | node<<12 | step) from a
// clock that runs skew off the real one: an API replica on another host.
func skewedIDs(node int64, skew time.Duration) func() int64 {
	var (
		mu   sync.Mutex
		last int64
	)
	return func() int64 {
		mu.Lock()
		defer mu.Unlock()
		id := (time.Now().Add(skew).UnixMilli()-snowflake.Epoch)<<22 | node<<12
		if id <= last {
			id = last + 1
		}
		last = id
		return id
	}
}

// secondStore opens another Store (another API replica) on st's database.
func secondStore(t *testing.T, dbURL string, opts store.Options) *store.Store {
	t.Helper()
	pool, err := store.Connect(t.Context(), dbURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if opts.Sealer == nil {
		opts.Sealer, _ = store.NewSealer(make([]byte, 32), nil)
	}
	st, err := store.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A group's order is the order its creates committed, whatever the clocks
// of the replicas that took them: a job created on a replica whose clock is
// 5 s behind, after another replica answered the group's first create,
// has the smaller id but comes second everywhere the order counts (the
// outbox's sends, the claim, the pointer's sequence).
func TestGroupOrderIsCommitOrderAcrossSkewedReplicas(t *testing.T) {
	t.Parallel()
	a, _, dbURL := storetest.New(t, store.Options{NewID: skewedIDs(1, 0)})
	b := secondStore(t, dbURL, store.Options{NewID: skewedIDs(0, -5*time.Second)})

	first := createJob(t, a, withGroup("customer-7"))
	second := createJob(t, b, withGroup("customer-7"))
	if second.ID >= first.ID {
		t.Fatalf("the skewed replica's id %d is not below the first's %d: the test's clocks are not skewed", second.ID, first.ID)
	}
	if second.Seq <= first.Seq {
		t.Fatalf("second create's place %d is not after the first's %d", second.Seq, first.Seq)
	}

	var sent []dispatch.Unsent
	if _, err := a.PublishDue(t.Context(), time.Now().Add(time.Second), 10, recordSend(&sent)); err != nil {
		t.Fatal(err)
	}
	if got := unsentOrder(sent); !slices.Equal(got, []int64{first.ID, second.ID}) {
		t.Errorf("outbox sent %v, want the group in create order %v", got, []int64{first.ID, second.ID})
	}
	if sent[0].Seq != first.Seq || sent[1].Seq != second.Seq {
		t.Errorf("pointers carry places %d, %d, want %d, %d", sent[0].Seq, sent[1].Seq, first.Seq, second.Seq)
	}

	t0 := now()
	claim(t, b, second.ID, t0, dispatch.ClaimBlocked)
	completeJob(t, a, first.ID, t0.Add(time.Second)) // claims it, then records its success
	claim(t, b, second.ID, t0.Add(2*time.Second), dispatch.Claimed)
}

func unsentOrder(us []dispatch.Unsent) []int64 {
	out := make([]int64, len(us))
	for i, u := range us {
		out[i] = u.ID
	}
	return out
}

// stuckHandoff takes room for hand-offs and never sends them: the process
// was killed between the create's commit and the send.
type stuckHandoff struct{}

func (stuckHandoff) Reserve(int) bool            { return true }
func (stuckHandoff) Hand([]dispatch.Unsent, int) {}
func (stuckHandoff) Notify()                     {}

// A job marked queued whose send was never confirmed (its process died
// between the mark and the send) is sent again once its send lease has run
// out, within a minute, not after DISPATCH_REQUEUE_AFTER; a confirmed one
// is left to the queue.
func TestUnconfirmedSendIsSentAgainAfterItsLease(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})
	lost := createJob(t, st)
	kept := createJob(t, st)
	if lost.QueuedAt == nil || kept.QueuedAt == nil {
		t.Fatal("handed jobs were not stored marked queued")
	}
	if err := st.ConfirmSent(t.Context(), []dispatch.Unsent{{ID: kept.ID, Mark: *kept.QueuedAt}}); err != nil {
		t.Fatal(err)
	}
	const requeueAfter = 15 * time.Minute
	t0 := time.Now()

	var sent []dispatch.Unsent
	if n, err := st.PublishDue(t.Context(), t0, 10, recordSend(&sent)); err != nil || n != 0 {
		t.Fatalf("PublishDue = %d, %v: a marked job is not the outbox's until its lease ends", n, err)
	}
	if _, requeued, err := st.Sweep(t.Context(), t0.Add(store.DefaultSendLease/2), requeueAfter); err != nil || requeued != 0 {
		t.Fatalf("sweep inside the lease requeued %d (%v), want 0", requeued, err)
	}
	_, requeued, err := st.Sweep(t.Context(), t0.Add(store.DefaultSendLease+time.Second), requeueAfter)
	if err != nil || requeued != 1 {
		t.Fatalf("sweep past the lease requeued %d (%v), want 1 (the unconfirmed job)", requeued, err)
	}
	if _, err := st.PublishDue(t.Context(), t0.Add(store.DefaultSendLease+time.Second), 10, recordSend(&sent)); err != nil {
		t.Fatal(err)
	}
	if got := unsentOrder(sent); !slices.Equal(got, []int64{lost.ID}) {
		t.Fatalf("outbox sent %v after the lease, want only the unconfirmed job %d", got, lost.ID)
	}
	if sent[0].Gen == 0 {
		t.Error("the job is sent again under the same deduplication id: SQS would swallow it if the first send did happen")
	}

	// The outbox's own sends carry a lease too, which ConfirmSent ends.
	later := t0.Add(store.DefaultSendLease + time.Second)
	_, requeued, err = st.Sweep(t.Context(), later.Add(store.DefaultSendLease+time.Second), requeueAfter)
	if err != nil || requeued != 1 {
		t.Fatalf("an unconfirmed outbox send: requeued %d (%v), want 1", requeued, err)
	}
	sent = nil
	if _, err := st.PublishDue(t.Context(), later.Add(2*store.DefaultSendLease), 10, recordSend(&sent)); err != nil || len(sent) != 1 {
		t.Fatalf("PublishDue: %v, sent %d", err, len(sent))
	}
	if err := st.ConfirmSent(t.Context(), sent); err != nil {
		t.Fatal(err)
	}
	_, requeued, err = st.Sweep(t.Context(), later.Add(4*store.DefaultSendLease), requeueAfter)
	if err != nil || requeued != 0 {
		t.Fatalf("a confirmed outbox send: requeued %d (%v), want 0", requeued, err)
	}
}

// A claim confirms a send too: the pointer evidently arrived.
func TestClaimEndsTheSendLease(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})
	j := createJob(t, st)
	t0 := now()
	failJob(t, st, j.ID, t0, t0.Add(time.Hour)) // claims it, then records a failure
	if _, requeued, err := st.Sweep(t.Context(), t0.Add(2*store.DefaultSendLease), 15*time.Minute); err != nil || requeued != 0 {
		t.Fatalf("sweep requeued %d (%v) of a job whose pointer was claimed, want 0", requeued, err)
	}
}

// A confirmation skips a job another transaction holds (a claim or finish
// batch locking its rows in its own order) instead of waiting for it: the
// two once deadlocked, and PostgreSQL noticed only after a second. The
// held job's lease is left for the claim to end; the others are confirmed.
func TestConfirmSentSkipsJobsHeldByAnotherTransaction(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	st.HandOffTo(stuckHandoff{})
	held, free := createJob(t, st), createJob(t, st)

	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context()) //nolint:errcheck // the test's own lock
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM dispatch_job WHERE id = $1 FOR UPDATE`, held.ID); err != nil {
		t.Fatal(err)
	}
	// Were the held row waited for, ConfirmSent would block until the
	// transaction ends; this context ends it with an error first.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- st.ConfirmSent(ctx, []dispatch.Unsent{{ID: held.ID, Mark: *held.QueuedAt}, {ID: free.ID, Mark: *free.QueuedAt}})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ConfirmSent: %v", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("ConfirmSent waited for a row another transaction holds")
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	leased := func(id int64) bool {
		var on bool
		if err := pool.QueryRow(t.Context(), `SELECT send_lease IS NOT NULL FROM dispatch_job WHERE id = $1`, id).Scan(&on); err != nil {
			t.Fatal(err)
		}
		return on
	}
	if leased(free.ID) {
		t.Error("the free job's send lease was not ended")
	}
	if !leased(held.ID) {
		t.Error("the held job's lease ended although its row was locked")
	}
}

// A create batch whose look-up of taken idempotency keys fails after its
// insert committed stores each job once: the jobs it created are answered,
// not inserted again one by one (a keyless one would be stored twice under
// two ids, which receivers cannot deduplicate).
func TestCreateFailingAfterTheInsertStoresEachJobOnce(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	holder := createJob(t, st, func(j *dispatch.Job) { j.IdempotencyKey = "k1" })

	release := make(chan struct{})
	var calls int
	var mu sync.Mutex
	store.SetBeforeKeyLookup(st, func() error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			<-release // the plug: later creates queue up behind it
			return nil
		}
		return errors.New("connection lost")
	})
	plugDone := make(chan error, 1)
	go func() {
		_, _, err := st.CreateJob(context.Background(), newJob(func(j *dispatch.Job) { j.IdempotencyKey = "k1" }))
		plugDone <- err
	}()
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return calls == 1 }, "the plug's look-up runs")

	const keyless = 44
	errs := make(chan error, keyless+1)
	for i := range keyless + 1 {
		go func() {
			j := newJob()
			if i == keyless {
				j.IdempotencyKey = "k1"
			}
			_, _, err := st.CreateJob(context.Background(), j)
			errs <- err
		}()
	}
	waitUntil(t, func() bool { return store.CreatesWaiting(st) == keyless+1 }, "the creates wait in one batch")
	close(release)
	if err := <-plugDone; err != nil {
		t.Fatal(err)
	}
	var failed int
	for range keyless + 1 {
		if err := <-errs; err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d creates failed, want 1 (the one whose key's holder could not be read)", failed)
	}
	if n := countRows(t, pool, "dispatch_job"); n != 1+keyless {
		t.Errorf("dispatch_job holds %d rows, want %d: %d keyless jobs each stored once beside job %d",
			n, 1+keyless, keyless, holder.ID)
	}
}

// A batch create is one transaction: a failure after its insert stores
// none of it, so the caller's retry cannot store it twice.
func TestBatchCreateFailingAfterTheInsertStoresNothing(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	createJob(t, st, func(j *dispatch.Job) { j.IdempotencyKey = "k1" })
	store.SetBeforeKeyLookup(st, func() error { return errors.New("connection lost") })
	batch := []*dispatch.Job{newJob(), newJob(), newJob(func(j *dispatch.Job) { j.IdempotencyKey = "k1" })}
	if _, _, err := st.CreateJobs(t.Context(), batch); err == nil {
		t.Fatal("CreateJobs succeeded although its look-up failed")
	}
	if n := countRows(t, pool, "dispatch_job"); n != 1 {
		t.Errorf("dispatch_job holds %d rows after a failed batch, want 1 (the key's holder)", n)
	}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
