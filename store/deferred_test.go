package store_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// claimHanded claims job j as its pointer handed over by st comes back:
// with the job's handle, as the router's mediation carries it.
func claimHanded(t *testing.T, st *store.Store, j dispatch.Job, now time.Time, want dispatch.ClaimState) dispatch.Claim {
	t.Helper()
	if j.QueuedAt == nil {
		t.Fatalf("job %d was not handed over (no queued mark)", j.ID)
	}
	ctx := handoff.WithHandle(t.Context(), handoff.Handle{ID: j.ID, Mark: *j.QueuedAt})
	c, err := st.ClaimJob(ctx, j.ID, now, lease)
	if err != nil || c.State != want {
		t.Fatalf("ClaimJob(%d) with its handle: %v (%v), want %v", j.ID, c.State, err, want)
	}
	return c
}

// deferred creates a job handed over (so the store remembers it) and
// claims it through its handle, which must come back deferred: nothing
// written yet.
func deferred(t *testing.T, st *store.Store, mods ...func(*dispatch.Job)) dispatch.Claim {
	t.Helper()
	j := createJob(t, st, mods...)
	c := claimHanded(t, st, j, now(), dispatch.Claimed)
	if !c.Deferred {
		t.Fatalf("claim of job %d created and handed over here a moment ago is not deferred", j.ID)
	}
	if c.Job.Status != dispatch.StatusInProgress || c.Job.AttemptCount != 1 || c.Job.ClaimedUntil == nil {
		t.Fatalf("deferred claim returns the job %s attempt %d, want IN_PROGRESS attempt 1 under a lease", c.Job.Status, c.Job.AttemptCount)
	}
	if got := getJob(t, st, j.ID); got.Status != dispatch.StatusPending || got.AttemptCount != 0 {
		t.Fatalf("deferred claim wrote the job: %s attempt %d, want it still PENDING with no attempt", got.Status, got.AttemptCount)
	}
	return c
}

// record records the claim's attempt, a success, as tr, which must apply
// as want.
func record(t *testing.T, st *store.Store, c dispatch.Claim, tr dispatch.Transition, want bool) {
	t.Helper()
	recordAs(t, st, c, dispatch.AttemptSuccess, 200, tr, want)
}

// recordAs records the claim's attempt with status and code as tr.
func recordAs(t *testing.T, st *store.Store, c dispatch.Claim, status dispatch.AttemptStatus, code int, tr dispatch.Transition, want bool) {
	t.Helper()
	at := *c.Job.LastAttemptAt
	applied, err := st.FinishAttempt(t.Context(), dispatch.Attempt{
		JobID: c.Job.ID, AttemptNumber: c.Job.AttemptCount, AttemptedAt: at, CompletedAt: at.Add(5 * time.Millisecond),
		Status: status, ResponseCode: code,
	}, tr)
	if err != nil || applied != want {
		t.Fatalf("FinishAttempt(job %d): applied %v (%v), want %v", c.Job.ID, applied, err, want)
	}
}

// A job created and handed over here is claimed without a statement, and
// the attempt's record writes the claim and the outcome together: the job
// ends as if claimed and finished, with its attempt.
func TestDeferredClaimIsWrittenWithTheOutcome(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})
	c := deferred(t, st)
	record(t, st, c, dispatch.Transition{Status: dispatch.StatusCompleted, ClaimDeferred: true}, true)
	got := getJob(t, st, c.Job.ID)
	if got.Status != dispatch.StatusCompleted || got.AttemptCount != 1 || got.LastAttemptAt == nil ||
		!got.LastAttemptAt.Equal(*c.Job.LastAttemptAt) || got.CompletedAt == nil {
		t.Errorf("after the record: %s, attempt %d, last attempt %v, completed %v; want COMPLETED, attempt 1 at %v",
			got.Status, got.AttemptCount, got.LastAttemptAt, got.CompletedAt, c.Job.LastAttemptAt)
	}
	as, err := st.ListAttempts(t.Context(), c.Job.ID)
	if err != nil || len(as) != 1 || as[0].AttemptNumber != 1 || as[0].Status != dispatch.AttemptSuccess {
		t.Errorf("attempts %+v (%v), want one successful attempt 1", as, err)
	}
	// The pointer's send lease ended with it: the sweep sends nothing.
	if _, requeued, err := st.Sweep(t.Context(), now().Add(2*store.DefaultSendLease), 15*time.Minute); err != nil || requeued != 0 {
		t.Errorf("sweep requeued %d (%v) after a deferred claim's record, want 0", requeued, err)
	}

	// A retry leaves the job FAILED, due at its next attempt, with the
	// claim written: the next pointer is claimed from the database.
	c = deferred(t, st)
	next := now().Add(time.Hour)
	record(t, st, c, dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503", NextAttemptAt: next, ClaimDeferred: true}, true)
	if got := getJob(t, st, c.Job.ID); got.Status != dispatch.StatusFailed || got.AttemptCount != 1 || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(next) {
		t.Errorf("after a failed attempt: %s attempt %d next %v, want FAILED attempt 1 next %v", got.Status, got.AttemptCount, got.NextAttemptAt, next)
	}
	if c2 := claim(t, st, c.Job.ID, next, dispatch.Claimed); c2.Deferred || c2.Job.AttemptCount != 2 {
		t.Errorf("the retry's claim: deferred %v, attempt %d; want written, attempt 2", c2.Deferred, c2.Job.AttemptCount)
	}
}

// A delivery running long writes its deferred claim (RecordClaim): the job
// shows IN_PROGRESS under its lease, and the record then finishes it the
// usual way.
func TestRecordClaimWritesADeferredClaim(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})
	c := deferred(t, st)
	held, err := st.RecordClaim(t.Context(), c.Job)
	if err != nil || !held {
		t.Fatalf("RecordClaim: held %v (%v), want true", held, err)
	}
	got := getJob(t, st, c.Job.ID)
	if got.Status != dispatch.StatusInProgress || got.AttemptCount != 1 || got.ClaimedUntil == nil || !got.ClaimedUntil.Equal(*c.Job.ClaimedUntil) {
		t.Fatalf("after RecordClaim: %s attempt %d until %v, want IN_PROGRESS attempt 1 until %v", got.Status, got.AttemptCount, got.ClaimedUntil, c.Job.ClaimedUntil)
	}
	// A second copy of its pointer finds it busy.
	claim(t, st, c.Job.ID, now(), dispatch.ClaimBusy)
	record(t, st, c, dispatch.Transition{Status: dispatch.StatusCompleted}, true)
	if got := getJob(t, st, c.Job.ID); got.Status != dispatch.StatusCompleted || got.AttemptCount != 1 {
		t.Errorf("after the record: %s attempt %d, want COMPLETED attempt 1", got.Status, got.AttemptCount)
	}
	// Written twice, the claim holds once.
	if held, err := st.RecordClaim(t.Context(), c.Job); err != nil || held {
		t.Errorf("RecordClaim of a finished job: held %v (%v), want false", held, err)
	}
}

// A deferred claim written while its pointer's send is unconfirmed (a job
// delivered in process: none was sent) keeps the job owed a pointer: should
// the process die mid-delivery, the sweep sends one once the claim has gone
// stale, and not before. The record ends that for good.
func TestRecordClaimKeepsAnUnsentJobOwedAPointer(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})
	c := deferred(t, st)
	if held, err := st.RecordClaim(t.Context(), c.Job); err != nil || !held {
		t.Fatalf("RecordClaim: held %v (%v), want true", held, err)
	}
	owedAPointerAfter(t, st, *c.Job.ClaimedUntil)

	c = deferred(t, st)
	if held, err := st.RecordClaim(t.Context(), c.Job); err != nil || !held {
		t.Fatalf("RecordClaim: held %v (%v), want true", held, err)
	}
	record(t, st, c, dispatch.Transition{Status: dispatch.StatusCompleted}, true)
	if _, requeued, err := st.Sweep(t.Context(), c.Job.ClaimedUntil.Add(time.Hour), 15*time.Minute); err != nil || requeued != 0 {
		t.Errorf("a sweep after the record requeued %d (%v), want 0", requeued, err)
	}
}

// A job handed over but claimed through the database (its payload too
// large to be remembered, or its offer's request at another replica) is on
// no queue either: should its holder die mid-delivery, the sweep sends a
// pointer once the claim has gone stale, not the stale-job sweep a quarter
// of an hour later.
func TestAHandedJobClaimedByStatementIsOwedAPointer(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})
	big := `{"blob":"` + strings.Repeat("x", 70<<10) + `"}`
	j := createJob(t, st, func(j *dispatch.Job) { j.Payload = big })
	c := claimHanded(t, st, j, now(), dispatch.Claimed)
	if c.Deferred {
		t.Fatal("a job with a 70 KiB payload was claimed in memory; the test needs one claimed by statement")
	}
	owedAPointerAfter(t, st, *c.Job.ClaimedUntil)
}

// owedAPointerAfter checks that the sweep sends one pointer once the claim
// ending at until has gone stale (its holder died), and none before.
func owedAPointerAfter(t *testing.T, st *store.Store, until time.Time) {
	t.Helper()
	if _, requeued, err := st.Sweep(t.Context(), until.Add(-time.Second), 15*time.Minute); err != nil || requeued != 0 {
		t.Errorf("a sweep within the claim requeued %d (%v), want 0", requeued, err)
	}
	if _, requeued, err := st.Sweep(t.Context(), until.Add(time.Second), 15*time.Minute); err != nil || requeued != 1 {
		t.Errorf("a sweep past the claim requeued %d (%v), want the job whose holder died", requeued, err)
	}
}

// A retry of a job handed over in process goes back to the outbox with its
// outcome: a process dying before it gives the job back (Unmark) leaves
// the job to be sent when due, not to the sweep a quarter of an hour after.
func TestARetryOfAHandedJobIsOwedAPointerWithItsOutcome(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})
	c := deferred(t, st)
	due := now().Add(5 * time.Second)
	recordAs(t, st, c, dispatch.AttemptFailure, 503,
		dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503", NextAttemptAt: due, ClaimDeferred: true, Handed: true}, true)
	// (The process dies here, before its give-back.)
	var sent []int64
	if _, err := st.PublishDue(t.Context(), due.Add(time.Second), 100, func(us []dispatch.Unsent) ([]int64, error) {
		for _, u := range us {
			sent = append(sent, u.ID)
		}
		return sent, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sent, c.Job.ID) {
		t.Errorf("the outbox sent %v once the retry was due, want job %d", sent, c.Job.ID)
	}
}

// Each job is claimed in memory at most once, and only as the claim
// statement would take it; everything else is claimed from the database.
func TestOnlyAFreshDueJobIsClaimedDeferred(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})

	c := deferred(t, st)
	// A second copy of the pointer, while the first is delivered.
	if c2 := claimHanded(t, st, c.Job, now(), dispatch.Claimed); c2.Deferred {
		t.Error("a second copy of the pointer is claimed in memory too")
	}

	expired := createJob(t, st, func(j *dispatch.Job) { at := time.Now().Add(time.Minute); j.ExpiresAt = &at })
	claimHanded(t, st, expired, now().Add(2*time.Minute), dispatch.ClaimTerminal)

	scheduled := createJob(t, st, func(j *dispatch.Job) { at := time.Now().Add(time.Hour); j.ScheduledFor = &at })
	claim(t, st, scheduled.ID, now(), dispatch.ClaimNotDue)

	grouped := createJob(t, st, withGroup("g"))
	if c := claim(t, st, grouped.ID, now(), dispatch.Claimed); c.Deferred {
		t.Error("a grouped job (never handed over) is claimed in memory")
	}

	// Not handed over (no hand-off): claimed from the database.
	plain, _ := setup(t)
	j := createJob(t, plain)
	if c := claim(t, plain, j.ID, now(), dispatch.Claimed); c.Deferred {
		t.Error("a job no hand-off took is claimed in memory")
	}
}

// A cancel reaching the store during a deferred claim's delivery is refused
// as for a job IN_PROGRESS; one before the pointer comes back wins, and the
// pointer then finds the job finished.
func TestCancelAndDeferredClaims(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	st.HandOffTo(stuckHandoff{})

	c := deferred(t, st)
	if _, err := st.CancelJob(t.Context(), c.Job.ID); dispatch.ErrorCode(err) != dispatch.EConflict {
		t.Fatalf("cancel during a deferred claim's delivery: %v, want a conflict", err)
	}
	record(t, st, c, dispatch.Transition{Status: dispatch.StatusCompleted, ClaimDeferred: true}, true)

	j := createJob(t, st)
	if _, err := st.CancelJob(t.Context(), j.ID); err != nil {
		t.Fatalf("cancel before delivery: %v", err)
	}
	claim(t, st, j.ID, now(), dispatch.ClaimTerminal)
}

// twoReplicas is a store that hands its new jobs over and another over
// the same database that did not make them.
func twoReplicas(t *testing.T) (st, other *store.Store) {
	t.Helper()
	st, pool := setup(t)
	st.HandOffTo(stuckHandoff{})
	return st, storeOver(t, pool, newSealer(t, nil, nil))
}

// A record that finds the job taken meanwhile (through another copy of its
// pointer, on another replica that did not know it) leaves the job, and
// the attempt, to their holder.
func TestDeferredRecordLeavesAJobFinishedElsewhere(t *testing.T) {
	t.Parallel()
	st, other := twoReplicas(t)
	c := deferred(t, st)
	errorJob(t, other, c.Job.ID, now())
	record(t, st, c, dispatch.Transition{Status: dispatch.StatusCompleted, ClaimDeferred: true}, false)
	if got := getJob(t, st, c.Job.ID); got.Status != dispatch.StatusError {
		t.Errorf("job %s after a late deferred record, want the holder's ERROR", got.Status)
	}
}

// Two replicas: a job this one handed over to the queue (none of its
// processes took it) can come back here only after another replica has
// claimed it through a copy of its pointer, and retried it. A pointer from
// the queue carries no handle, so it is claimed by statement: the attempt
// it starts is the job's second, not a second "first" delivered from the
// state the job was created in.
func TestAPointerFromTheQueueIsNotClaimedInMemory(t *testing.T) {
	t.Parallel()
	st, other := twoReplicas(t)
	j := createJob(t, st)

	first := claim(t, other, j.ID, now(), dispatch.Claimed)
	record(t, other, first, dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503", NextAttemptAt: now()}, true)

	c := claim(t, st, j.ID, now(), dispatch.Claimed)
	if c.Deferred || c.Job.AttemptCount != 2 {
		t.Fatalf("the retry's pointer, back at the replica that created the job: deferred %v, attempt %d; want claimed by statement, attempt 2",
			c.Deferred, c.Job.AttemptCount)
	}
	if got := getJob(t, st, j.ID); got.Status != dispatch.StatusInProgress || got.AttemptCount != 2 {
		t.Errorf("job %s attempt %d after the claim, want IN_PROGRESS attempt 2", got.Status, got.AttemptCount)
	}
}

// A record that arrives late for an attempt number another holder has
// recorded (its claim was taken over) leaves that attempt as its holder
// recorded it: only a takeover's TIMEOUT placeholder gives way.
func TestALateRecordDoesNotOverwriteAnotherHoldersAttempt(t *testing.T) {
	t.Parallel()
	st, other := twoReplicas(t)
	c := deferred(t, st)
	// Another copy of the pointer, on a replica that did not know the job.
	held := claim(t, other, c.Job.ID, now(), dispatch.Claimed)
	record(t, other, held, dispatch.Transition{Status: dispatch.StatusCompleted}, true)

	at := *c.Job.LastAttemptAt
	applied, err := st.FinishAttempt(t.Context(), dispatch.Attempt{
		JobID: c.Job.ID, AttemptNumber: c.Job.AttemptCount, AttemptedAt: at, CompletedAt: at.Add(time.Second),
		Status: dispatch.AttemptFailure, ResponseCode: 500, ResponseBody: "late",
	}, dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 500", NextAttemptAt: at, ClaimDeferred: true})
	if err != nil || applied {
		t.Fatalf("the late record: applied %v (%v), want not applied", applied, err)
	}
	attempts, err := st.ListAttempts(t.Context(), c.Job.ID)
	if err != nil || len(attempts) != 1 {
		t.Fatalf("ListAttempts: %d attempts (%v), want 1", len(attempts), err)
	}
	if a := attempts[0]; a.Status != dispatch.AttemptSuccess || a.ResponseCode != 200 {
		t.Errorf("attempt 1 is %s %d after the late record, want the holder's SUCCESS 200", a.Status, a.ResponseCode)
	}
}

// A pointer handed over is no message: it comes back only when given back
// by its handle (Unmark, by the mark it was handed under). A copy of it
// that finds the job busy (a processing request sent twice) must leave
// that mark, or the give-back finds nothing, and should the holder's
// attempt fail, its retry waits for the stale sweep (15 minutes) instead
// of its backoff.
func TestAHandedJobFoundBusyCanStillBeGivenBack(t *testing.T) {
	t.Parallel()
	st, _, dbURL := storetest.New(t, store.Options{NodeID: 1})
	st.HandOffTo(stuckHandoff{})
	other := secondStore(t, dbURL, store.Options{NodeID: 2})
	j := createJob(t, st)
	held := claimHanded(t, other, j, now(), dispatch.Claimed) // by statement: another replica
	claimHanded(t, other, j, now(), dispatch.ClaimBusy)       // the copy
	if err := other.Unmark(t.Context(), []int64{j.ID}, *j.QueuedAt); err != nil {
		t.Fatal(err)
	}
	next := time.Now().Add(time.Second)
	recordAs(t, other, held, dispatch.AttemptFailure, 503, dispatch.Transition{Status: dispatch.StatusFailed, NextAttemptAt: next, Handed: true}, true)
	if got := getJob(t, st, j.ID); got.QueuedAt != nil || got.Status != dispatch.StatusFailed {
		t.Errorf("the retry is %s, queued at %v; want FAILED and unsent, for the outbox to send it in a second", got.Status, got.QueuedAt)
	}
}

// A queue message's first receive that finds its job busy (a copy of the
// pointer claimed it a moment before) notes the pointer as due back when
// the claim ends, as any other receive does: it is on the queue (an
// in-process offer has none). Left at its send time, the sweep, reckoning
// from that, could send a spare pointer for a job only waiting out a
// claim.
func TestAFirstReceiveThatFindsItsJobBusyNotesItsPointerDueBack(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	j := createJob(t, st)
	t0 := now().Add(time.Second)
	var sent []dispatch.Unsent
	if _, err := st.PublishDue(t.Context(), t0, 10, recordSend(&sent)); err != nil || len(sent) != 1 {
		t.Fatalf("publish: %v, %d sent", err, len(sent))
	}
	if err := st.ConfirmSent(t.Context(), sent); err != nil {
		t.Fatal(err)
	}
	first := claim(t, st, j.ID, t0, dispatch.Claimed)

	// The processor's context for a queue message's first receive.
	ctx := handoff.WithFirstReceive(handoff.WithHandle(t.Context(), handoff.Handle{ID: j.ID, Mark: sent[0].Mark}))
	c, err := st.ClaimJob(ctx, j.ID, t0.Add(time.Second), lease)
	if err != nil || c.State != dispatch.ClaimBusy {
		t.Fatalf("the second copy's claim: %v, %v; want busy", c.State, err)
	}
	if q := getJob(t, st, j.ID).QueuedAt; q == nil || !q.Equal(*first.Job.ClaimedUntil) {
		t.Errorf("the pointer is noted due back at %v, want when the claim ends, %v", q, first.Job.ClaimedUntil)
	}
}
