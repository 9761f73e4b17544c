package store_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// claim claims job id at now and fails unless the outcome is want.
func claim(t *testing.T, st *store.Store, id int64, now time.Time, want dispatch.ClaimState) dispatch.Claim {
	t.Helper()
	c, err := st.ClaimJob(t.Context(), id, now, lease)
	if err != nil {
		t.Fatalf("ClaimJob(%d): %v", id, err)
	}
	if c.State != want {
		t.Fatalf("ClaimJob(%d) state = %v, want %v (job %s, attempt %d)", id, c.State, want, c.Job.Status, c.Job.AttemptCount)
	}
	return c
}

// finish claims job id at now and records one attempt leading to tr.
func finish(t *testing.T, st *store.Store, id int64, now time.Time, as dispatch.AttemptStatus, code int, tr dispatch.Transition) dispatch.Job {
	t.Helper()
	c := claim(t, st, id, now, dispatch.Claimed)
	tr.ClaimDeferred = c.Deferred
	applied, err := st.FinishAttempt(t.Context(), dispatch.Attempt{
		JobID: id, AttemptNumber: c.Job.AttemptCount, AttemptedAt: now, CompletedAt: now.Add(20 * time.Millisecond),
		Status: as, ResponseCode: code,
	}, tr)
	if err != nil || !applied {
		t.Fatalf("FinishAttempt(%d): applied %v, err %v", id, applied, err)
	}
	return getJob(t, st, id)
}

func failJob(t *testing.T, st *store.Store, id int64, now, next time.Time) dispatch.Job {
	t.Helper()
	return finish(t, st, id, now, dispatch.AttemptFailure, 503, dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503", NextAttemptAt: next})
}

func completeJob(t *testing.T, st *store.Store, id int64, now time.Time) dispatch.Job {
	t.Helper()
	return finish(t, st, id, now, dispatch.AttemptSuccess, 200, dispatch.Transition{Status: dispatch.StatusCompleted})
}

func errorJob(t *testing.T, st *store.Store, id int64, now time.Time) dispatch.Job {
	t.Helper()
	return finish(t, st, id, now, dispatch.AttemptFailure, 404, dispatch.Transition{Status: dispatch.StatusError, LastError: "HTTP 404 is not retryable"})
}

// now returns the current time as PostgreSQL stores it.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func TestClaimJob(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	j := createJob(t, st)

	c := claim(t, st, j.ID, t0, dispatch.Claimed)
	if c.Job.Status != dispatch.StatusInProgress || c.Job.AttemptCount != 1 {
		t.Errorf("claimed job: %s attempt %d, want IN_PROGRESS attempt 1", c.Job.Status, c.Job.AttemptCount)
	}
	if c.Job.ClaimedUntil == nil || !c.Job.ClaimedUntil.Equal(t0.Add(lease)) {
		t.Errorf("claimedUntil = %v, want %v", c.Job.ClaimedUntil, t0.Add(lease))
	}
	if got := getJob(t, st, j.ID); got.Status != dispatch.StatusInProgress || got.AttemptCount != 1 {
		t.Errorf("stored job: %s attempt %d, want IN_PROGRESS attempt 1", got.Status, got.AttemptCount)
	}

	// A second processor while the lease is live is told to come back.
	busy := claim(t, st, j.ID, t0.Add(lease-time.Second), dispatch.ClaimBusy)
	if !busy.Until.Equal(t0.Add(lease)) {
		t.Errorf("busy until %v, want the lease end %v", busy.Until, t0.Add(lease))
	}
	if got := getJob(t, st, j.ID); got.AttemptCount != 1 {
		t.Errorf("a busy claim spent an attempt: attemptCount %d", got.AttemptCount)
	}
	if n := len(attempts(t, st, j.ID)); n != 0 {
		t.Errorf("a busy claim wrote %d attempt rows", n)
	}

	// Once the lease has passed the holder is presumed dead: take over.
	t1 := t0.Add(lease + time.Second)
	taken := claim(t, st, j.ID, t1, dispatch.Claimed)
	if taken.Job.AttemptCount != 2 || !taken.Job.ClaimedUntil.Equal(t1.Add(lease)) {
		t.Errorf("taken over: attempt %d until %v, want attempt 2 until %v", taken.Job.AttemptCount, taken.Job.ClaimedUntil, t1.Add(lease))
	}
	as := attempts(t, st, j.ID)
	if len(as) != 1 || as[0].AttemptNumber != 1 || as[0].Status != dispatch.AttemptTimeout {
		t.Fatalf("attempts after takeover = %+v, want attempt 1 recorded as TIMEOUT", as)
	}
	if !as[0].AttemptedAt.Equal(t0) || as[0].ErrorMessage == "" {
		t.Errorf("lost attempt: attemptedAt %v (want %v), error %q", as[0].AttemptedAt, t0, as[0].ErrorMessage)
	}
}

// A holder presumed dead that records after all (its claim was taken
// over) replaces the takeover's TIMEOUT placeholder with what really
// happened, and leaves the job to the new holder.
func TestALateRecordReplacesTheTakeoversPlaceholder(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	j := createJob(t, st)
	t0 := now()
	slow := claim(t, st, j.ID, t0, dispatch.Claimed)
	claim(t, st, j.ID, t0.Add(lease+time.Second), dispatch.Claimed)

	applied, err := st.FinishAttempt(t.Context(), dispatch.Attempt{
		JobID: j.ID, AttemptNumber: slow.Job.AttemptCount, AttemptedAt: t0, CompletedAt: t0.Add(time.Second),
		Status: dispatch.AttemptSuccess, ResponseCode: 200,
	}, dispatch.Transition{Status: dispatch.StatusCompleted})
	if err != nil || applied {
		t.Fatalf("the late record: applied %v (%v), want not applied", applied, err)
	}
	as := attempts(t, st, j.ID)
	if len(as) != 1 || as[0].Status != dispatch.AttemptSuccess || as[0].ResponseCode != 200 {
		t.Errorf("attempts = %+v, want attempt 1 as its holder recorded it (SUCCESS 200)", as)
	}
	if got := getJob(t, st, j.ID); got.Status != dispatch.StatusInProgress || got.AttemptCount != 2 {
		t.Errorf("job %s attempt %d, want the new holder's IN_PROGRESS attempt 2", got.Status, got.AttemptCount)
	}
}

func TestClaimJobOutcomes(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)

	tests := []struct {
		name string
		// prepare returns the job to claim and when to claim it.
		prepare func(t *testing.T) (int64, time.Time)
		want    dispatch.ClaimState
		// wantStatus is the job's stored status afterwards.
		wantStatus dispatch.Status
	}{
		{
			name:       "missing",
			prepare:    func(t *testing.T) (int64, time.Time) { return 987654321, now() },
			want:       dispatch.ClaimMissing,
			wantStatus: "",
		},
		{
			name: "cancelled",
			prepare: func(t *testing.T) (int64, time.Time) {
				j := createJob(t, st)
				if _, err := st.CancelJob(t.Context(), j.ID); err != nil {
					t.Fatal(err)
				}
				return j.ID, now()
			},
			want:       dispatch.ClaimTerminal,
			wantStatus: dispatch.StatusCancelled,
		},
		{
			name: "completed",
			prepare: func(t *testing.T) (int64, time.Time) {
				j := createJob(t, st)
				t0 := now()
				completeJob(t, st, j.ID, t0)
				return j.ID, t0.Add(time.Hour)
			},
			want:       dispatch.ClaimTerminal,
			wantStatus: dispatch.StatusCompleted,
		},
		{
			name: "expired before delivery",
			prepare: func(t *testing.T) (int64, time.Time) {
				exp := now().Add(time.Hour)
				j := createJob(t, st, func(j *dispatch.Job) { j.ExpiresAt = &exp })
				return j.ID, exp.Add(time.Hour)
			},
			want:       dispatch.ClaimTerminal,
			wantStatus: dispatch.StatusExpired,
		},
		{
			name: "failed, backing off",
			prepare: func(t *testing.T) (int64, time.Time) {
				j := createJob(t, st)
				t0 := now()
				failJob(t, st, j.ID, t0, t0.Add(10*time.Minute))
				return j.ID, t0.Add(time.Minute)
			},
			want:       dispatch.ClaimNotDue,
			wantStatus: dispatch.StatusFailed,
		},
		{
			name: "failed, due again",
			prepare: func(t *testing.T) (int64, time.Time) {
				j := createJob(t, st)
				t0 := now()
				failJob(t, st, j.ID, t0, t0.Add(10*time.Minute))
				return j.ID, t0.Add(10 * time.Minute)
			},
			want:       dispatch.Claimed,
			wantStatus: dispatch.StatusInProgress,
		},
		{
			name: "scheduled for later",
			prepare: func(t *testing.T) (int64, time.Time) {
				t0 := now()
				at := t0.Add(time.Hour)
				j := createJob(t, st, func(j *dispatch.Job) { j.ScheduledFor = &at })
				return j.ID, t0
			},
			want:       dispatch.ClaimNotDue,
			wantStatus: dispatch.StatusPending,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, at := tt.prepare(t)
			before, _ := st.GetJob(t.Context(), id)
			c := claim(t, st, id, at, tt.want)
			if tt.wantStatus == "" {
				return
			}
			got := getJob(t, st, id)
			if got.Status != tt.wantStatus {
				t.Errorf("status = %s, want %s", got.Status, tt.wantStatus)
			}
			if tt.want != dispatch.Claimed && got.AttemptCount != before.AttemptCount {
				t.Errorf("attemptCount %d → %d without a claim", before.AttemptCount, got.AttemptCount)
			}
			if tt.want == dispatch.ClaimNotDue && !c.Until.Equal(*before.NextAttemptAt) {
				t.Errorf("not due until %v, want %v", c.Until, before.NextAttemptAt)
			}
			if tt.wantStatus == dispatch.StatusExpired && (got.CompletedAt == nil || got.LastError == "") {
				t.Errorf("expired job: completedAt %v, lastError %q", got.CompletedAt, got.LastError)
			}
		})
	}
}

func TestClaimJobGroupOrder(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	first := createJob(t, st, withGroup("customer-7"))
	second := createJob(t, st, withGroup("customer-7"))
	unrelated := createJob(t, st, withGroup("customer-8"))
	t0 := now()

	// The queue may hand out the later pointer first: it must wait.
	claim(t, st, second.ID, t0, dispatch.ClaimBlocked)
	if got := getJob(t, st, second.ID); got.Status != dispatch.StatusPending || got.AttemptCount != 0 {
		t.Errorf("blocked job is %s with %d attempts, want untouched PENDING", got.Status, got.AttemptCount)
	}
	claim(t, st, unrelated.ID, t0, dispatch.Claimed)

	// While the first is being delivered or backing off, the second still waits.
	failJob(t, st, first.ID, t0, t0.Add(time.Second))
	claim(t, st, second.ID, t0, dispatch.ClaimBlocked)

	completeJob(t, st, first.ID, t0.Add(2*time.Second))
	claim(t, st, second.ID, t0.Add(2*time.Second), dispatch.Claimed)
}

func TestClaimJobStaleClaimExhaustsRetries(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	j := createJob(t, st, withMaxRetries(1))
	t0 := now()
	claim(t, st, j.ID, t0, dispatch.Claimed)

	c := claim(t, st, j.ID, t0.Add(lease+time.Second), dispatch.ClaimTerminal)
	if c.Job.Status != dispatch.StatusError {
		t.Errorf("claim result job is %s, want ERROR", c.Job.Status)
	}
	got := getJob(t, st, j.ID)
	if got.Status != dispatch.StatusError || got.AttemptCount != 1 || got.LastError == "" || got.CompletedAt == nil {
		t.Errorf("job = %s, %d attempts, lastError %q, completedAt %v; want ERROR after its only attempt", got.Status, got.AttemptCount, got.LastError, got.CompletedAt)
	}
	as := attempts(t, st, j.ID)
	if len(as) != 1 || as[0].Status != dispatch.AttemptTimeout {
		t.Errorf("attempts = %+v, want the lost attempt as TIMEOUT", as)
	}
}

func TestClaimJobStaleClaimPastExpiryExpires(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	expires := t0.Add(time.Minute)
	j := createJob(t, st, func(j *dispatch.Job) { j.ExpiresAt = &expires })
	claim(t, st, j.ID, t0, dispatch.Claimed)

	// The holder died; by the time its claim is stale the job has expired:
	// it must not be delivered late.
	c := claim(t, st, j.ID, expires.Add(lease), dispatch.ClaimTerminal)
	if c.Job.Status != dispatch.StatusExpired {
		t.Errorf("claim result job is %s, want EXPIRED", c.Job.Status)
	}
	if as := attempts(t, st, j.ID); len(as) != 1 || as[0].Status != dispatch.AttemptTimeout {
		t.Errorf("attempts = %+v, want the lost attempt recorded as TIMEOUT", as)
	}
}

func TestFinishAttempt(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)

	t.Run("completed", func(t *testing.T) {
		j := createJob(t, st)
		claimAt := j.CreatedAt.Add(time.Second)
		c := claim(t, st, j.ID, claimAt, dispatch.Claimed)
		done := j.CreatedAt.Add(1500 * time.Millisecond)
		applied, err := st.FinishAttempt(t.Context(), dispatch.Attempt{
			JobID: j.ID, AttemptNumber: c.Job.AttemptCount, AttemptedAt: claimAt, CompletedAt: done,
			Status: dispatch.AttemptSuccess, ResponseCode: 200, ResponseBody: "ok",
		}, dispatch.Transition{Status: dispatch.StatusCompleted})
		if err != nil || !applied {
			t.Fatalf("FinishAttempt: applied %v, err %v", applied, err)
		}
		got := getJob(t, st, j.ID)
		if got.Status != dispatch.StatusCompleted || got.ClaimedUntil != nil {
			t.Errorf("job %s claimedUntil %v, want COMPLETED and unclaimed", got.Status, got.ClaimedUntil)
		}
		if got.CompletedAt == nil || !got.CompletedAt.Equal(done) {
			t.Errorf("completedAt = %v, want %v", got.CompletedAt, done)
		}
		if got.DurationMillis == nil || *got.DurationMillis != 1500 {
			t.Errorf("durationMillis = %v, want 1500 (creation to completion)", got.DurationMillis)
		}
		as := attempts(t, st, j.ID)
		if len(as) != 1 || as[0].Status != dispatch.AttemptSuccess || as[0].ResponseCode != 200 || as[0].ResponseBody != "ok" || as[0].DurationMillis != 500 {
			t.Errorf("attempts = %+v, want one SUCCESS 200 of 500 ms", as)
		}
	})

	t.Run("failed", func(t *testing.T) {
		j := createJob(t, st)
		t0 := now()
		next := t0.Add(5 * time.Minute)
		got := failJob(t, st, j.ID, t0, next)
		if got.Status != dispatch.StatusFailed || got.LastError != "HTTP 503" || got.CompletedAt != nil || got.DurationMillis != nil {
			t.Errorf("job = %s lastError %q completedAt %v duration %v; want FAILED, not completed", got.Status, got.LastError, got.CompletedAt, got.DurationMillis)
		}
		if got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(next) {
			t.Errorf("nextAttemptAt = %v, want %v", got.NextAttemptAt, next)
		}
	})

	t.Run("claim taken over", func(t *testing.T) {
		j := createJob(t, st)
		t0 := now()
		claim(t, st, j.ID, t0, dispatch.Claimed)
		claim(t, st, j.ID, t0.Add(lease+time.Second), dispatch.Claimed) // attempt 2 now

		// The first holder was slow, not dead: its result still arrives.
		applied, err := st.FinishAttempt(t.Context(), dispatch.Attempt{
			JobID: j.ID, AttemptNumber: 1, AttemptedAt: t0, CompletedAt: t0.Add(lease + 2*time.Second),
			Status: dispatch.AttemptSuccess, ResponseCode: 200,
		}, dispatch.Transition{Status: dispatch.StatusCompleted})
		if err != nil {
			t.Fatalf("FinishAttempt: %v", err)
		}
		if applied {
			t.Errorf("applied = true for an attempt whose claim was taken over")
		}
		got := getJob(t, st, j.ID)
		if got.Status != dispatch.StatusInProgress || got.AttemptCount != 2 {
			t.Errorf("job = %s attempt %d, want still IN_PROGRESS under attempt 2", got.Status, got.AttemptCount)
		}
		as := attempts(t, st, j.ID)
		if len(as) != 1 || as[0].AttemptNumber != 1 || as[0].Status != dispatch.AttemptSuccess || as[0].ResponseCode != 200 {
			t.Errorf("attempts = %+v, want attempt 1 recorded with its real outcome", as)
		}
	})

	t.Run("attempt and transition are one transaction", func(t *testing.T) {
		j := createJob(t, st)
		t0 := now()
		claim(t, st, j.ID, t0, dispatch.Claimed)
		_, err := st.FinishAttempt(t.Context(), dispatch.Attempt{
			JobID: j.ID, AttemptNumber: 1, AttemptedAt: t0, CompletedAt: t0, Status: dispatch.AttemptSuccess,
		}, dispatch.Transition{Status: "NOT_A_STATUS"}) // the job update fails a CHECK
		if err == nil {
			t.Fatal("FinishAttempt with an impossible status succeeded")
		}
		if as := attempts(t, st, j.ID); len(as) != 0 {
			t.Errorf("attempt row written although the job update failed: %+v", as)
		}
		if got := getJob(t, st, j.ID); got.Status != dispatch.StatusInProgress {
			t.Errorf("job = %s, want IN_PROGRESS", got.Status)
		}
	})
}

func TestUnclaim(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)

	t.Run("first attempt returns to FAILED without spending it", func(t *testing.T) {
		j := createJob(t, st)
		t0 := now()
		next := t0.Add(30 * time.Second)
		c := claim(t, st, j.ID, t0, dispatch.Claimed)
		if err := st.Unclaim(t.Context(), c.Job, next, "circuit open"); err != nil {
			t.Fatalf("Unclaim: %v", err)
		}
		got := getJob(t, st, j.ID)
		if got.Status != dispatch.StatusFailed || got.AttemptCount != 0 || got.ClaimedUntil != nil {
			t.Errorf("job = %s attempt %d claimedUntil %v, want FAILED with 0 attempts, unclaimed", got.Status, got.AttemptCount, got.ClaimedUntil)
		}
		if !got.NextAttemptAt.Equal(next) || got.LastError != "circuit open" {
			t.Errorf("nextAttemptAt %v lastError %q, want %v and the reason", got.NextAttemptAt, got.LastError, next)
		}
		if as := attempts(t, st, j.ID); len(as) != 0 {
			t.Errorf("an unclaimed attempt was recorded: %+v", as)
		}
	})

	t.Run("retry returns to FAILED", func(t *testing.T) {
		j := createJob(t, st)
		t0 := now()
		next := t0.Add(30 * time.Second)
		failJob(t, st, j.ID, t0, t0)
		c := claim(t, st, j.ID, t0, dispatch.Claimed)
		if c.Job.AttemptCount != 2 {
			t.Fatalf("attemptCount %d, want 2", c.Job.AttemptCount)
		}
		if err := st.Unclaim(t.Context(), c.Job, next, "circuit open"); err != nil {
			t.Fatalf("Unclaim: %v", err)
		}
		got := getJob(t, st, j.ID)
		if got.Status != dispatch.StatusFailed || got.AttemptCount != 1 {
			t.Errorf("job = %s attempt %d, want FAILED with 1 attempt", got.Status, got.AttemptCount)
		}
		// The attempt given back can be spent later.
		claim(t, st, j.ID, next, dispatch.Claimed)
	})
}

// recordSend is a send func that reports every id it is handed as sent.
func recordSend(got *[]dispatch.Unsent) func([]dispatch.Unsent) ([]int64, error) {
	return func(us []dispatch.Unsent) ([]int64, error) {
		*got = append(*got, us...)
		out := make([]int64, len(us))
		for i, u := range us {
			out[i] = u.ID
		}
		return out, nil
	}
}

func unsentIDs(us []dispatch.Unsent) []int64 {
	out := make([]int64, len(us))
	for i, u := range us {
		out[i] = u.ID
	}
	slices.Sort(out)
	return out
}

func sortedIDs(jobs ...dispatch.Job) []int64 {
	out := ids(jobs)
	slices.Sort(out)
	return out
}

func TestPublishDue(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	a := createJob(t, st)
	b := createJob(t, st, withGroup("g1"))
	later := t0.Add(time.Hour)
	scheduled := createJob(t, st, func(j *dispatch.Job) { j.ScheduledFor = &later })
	cancelled := createJob(t, st)
	if _, err := st.CancelJob(t.Context(), cancelled.ID); err != nil {
		t.Fatal(err)
	}
	pubAt := now()

	var got []dispatch.Unsent
	n, err := st.PublishDue(t.Context(), pubAt, 100, recordSend(&got))
	if err != nil || n != 2 {
		t.Fatalf("PublishDue = %d, %v; want 2", n, err)
	}
	if !slices.Equal(unsentIDs(got), sortedIDs(a, b)) {
		t.Errorf("sent %v, want the due jobs %v (not the scheduled or cancelled one)", unsentIDs(got), sortedIDs(a, b))
	}
	for _, u := range got {
		if u.ID == b.ID && u.MessageGroupID() != "g1" {
			t.Errorf("job %d sent with group %q, want g1", u.ID, u.MessageGroupID())
		}
	}
	if q := getJob(t, st, a.ID).QueuedAt; q == nil || !q.Equal(pubAt) {
		t.Errorf("queuedAt = %v, want %v", q, pubAt)
	}
	if q := getJob(t, st, scheduled.ID).QueuedAt; q != nil {
		t.Errorf("scheduled job marked queued at %v", q)
	}

	// Sent jobs are not sent again.
	got = nil
	if n, err := st.PublishDue(t.Context(), now(), 100, recordSend(&got)); err != nil || n != 0 || len(got) != 0 {
		t.Errorf("second PublishDue sent %d (%v), err %v; want nothing", n, unsentIDs(got), err)
	}

	// The scheduled job is due once its time has come.
	got = nil
	if n, err := st.PublishDue(t.Context(), later, 100, recordSend(&got)); err != nil || n != 1 || !slices.Equal(unsentIDs(got), sortedIDs(scheduled)) {
		t.Errorf("PublishDue at scheduledFor sent %v (%d), err %v; want %d", unsentIDs(got), n, err, scheduled.ID)
	}
}

func TestPublishDuePartialSend(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	a, b, c := createJob(t, st), createJob(t, st), createJob(t, st)

	// The queue accepted only a; b and c stay unsent.
	n, err := st.PublishDue(t.Context(), now(), 100, func(us []dispatch.Unsent) ([]int64, error) {
		return []int64{a.ID}, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("PublishDue = %d, %v; want 1", n, err)
	}
	if getJob(t, st, a.ID).QueuedAt == nil || getJob(t, st, b.ID).QueuedAt != nil || getJob(t, st, c.ID).QueuedAt != nil {
		t.Errorf("only the reported job should be marked queued")
	}

	// A failing send marks nothing.
	_, err = st.PublishDue(t.Context(), now(), 100, func(us []dispatch.Unsent) ([]int64, error) {
		return nil, errors.New("queue unavailable")
	})
	if err == nil {
		t.Errorf("PublishDue hid the send error")
	}

	var got []dispatch.Unsent
	if _, err := st.PublishDue(t.Context(), now(), 100, recordSend(&got)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unsentIDs(got), sortedIDs(b, c)) {
		t.Errorf("retry sent %v, want the unsent %v", unsentIDs(got), sortedIDs(b, c))
	}
}

func TestPublishDueConcurrentReplicas(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	var all []dispatch.Job
	for range 6 {
		all = append(all, createJob(t, st))
	}
	at := now()

	entered := make(chan []dispatch.Unsent, 2)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)

	// Each send holds its batch until both replicas are inside send, so the
	// two transactions overlap for certain.
	send := func(us []dispatch.Unsent) ([]int64, error) {
		entered <- us
		<-release
		out := make([]int64, len(us))
		for i, u := range us {
			out[i] = u.ID
		}
		return out, nil
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := st.PublishDue(t.Context(), at, 3, send)
			errs <- err
		}()
	}
	var batches [][]dispatch.Unsent
	timeout := time.After(10 * time.Second)
	for len(batches) < 2 {
		select {
		case us := <-entered:
			batches = append(batches, us)
		case <-timeout:
			unblock()
			t.Fatalf("only %d of 2 publishers got work: the second waited on the first's locks (no SKIP LOCKED?)", len(batches))
		}
	}
	unblock()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("PublishDue: %v", err)
		}
	}
	first, second := unsentIDs(batches[0]), unsentIDs(batches[1])
	for _, id := range first {
		if slices.Contains(second, id) {
			t.Errorf("job %d handed to both publishers: %v and %v", id, first, second)
		}
	}
	union := append(slices.Clone(first), second...)
	slices.Sort(union)
	if !slices.Equal(union, sortedIDs(all...)) {
		t.Errorf("publishers sent %v together, want every due job %v", union, sortedIDs(all...))
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	const requeueAfter = 5 * time.Minute

	exp := t0.Add(time.Hour)
	expiring := createJob(t, st, func(j *dispatch.Job) { j.ExpiresAt = &exp })
	expiringFailed := createJob(t, st, func(j *dispatch.Job) { j.ExpiresAt = &exp })
	failJob(t, st, expiringFailed.ID, now(), t0.Add(10*time.Hour))
	notYet := t0.Add(3 * time.Hour)
	notExpiring := createJob(t, st, func(j *dispatch.Job) { j.ExpiresAt = &notYet })
	inFlight := createJob(t, st, func(j *dispatch.Job) { j.ExpiresAt = &exp })
	claim(t, st, inFlight.ID, now(), dispatch.Claimed)

	expired, _, err := st.Sweep(t.Context(), t0.Add(2*time.Hour), requeueAfter)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if expired != 2 {
		t.Errorf("expired = %d, want 2", expired)
	}
	for _, tt := range []struct {
		job  dispatch.Job
		want dispatch.Status
	}{
		{expiring, dispatch.StatusExpired},
		{expiringFailed, dispatch.StatusExpired},
		{notExpiring, dispatch.StatusPending},
		{inFlight, dispatch.StatusInProgress},
	} {
		if got := getJob(t, st, tt.job.ID); got.Status != tt.want {
			t.Errorf("job %d: status %s, want %s", tt.job.ID, got.Status, tt.want)
		}
	}
}

func TestSweepRequeuesLostPointers(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	const requeueAfter = 5 * time.Minute
	send := func(us []dispatch.Unsent) ([]int64, error) { return unsentIDs(us), nil }

	stuck := createJob(t, st)
	t0 := now()
	if _, err := st.PublishDue(t.Context(), t0, 100, send); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(10 * time.Minute)
	recent := createJob(t, st)
	if _, err := st.PublishDue(t.Context(), t1, 100, send); err != nil {
		t.Fatal(err)
	}

	_, requeued, err := st.Sweep(t.Context(), t1.Add(time.Second), requeueAfter)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if requeued != 1 {
		t.Errorf("requeued = %d, want 1", requeued)
	}
	if q := getJob(t, st, stuck.ID).QueuedAt; q != nil {
		t.Errorf("stuck job still marked queued at %v", q)
	}
	if q := getJob(t, st, recent.ID).QueuedAt; q == nil {
		t.Errorf("a recently queued job was requeued")
	}

	// The publisher sends the stuck one again.
	var got []dispatch.Unsent
	if _, err := st.PublishDue(t.Context(), t1.Add(2*time.Second), 100, recordSend(&got)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unsentIDs(got), sortedIDs(stuck)) {
		t.Errorf("republished %v, want %d", unsentIDs(got), stuck.ID)
	}
}

func TestPublishDueMarksWhatWasSentEvenWhenALaterBatchFails(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	a, b := createJob(t, st), createJob(t, st)
	n, err := st.PublishDue(t.Context(), now().Add(time.Second), 10, func(due []dispatch.Unsent) ([]int64, error) {
		return []int64{a.ID}, errors.New("queue refused the second batch")
	})
	if err == nil || n != 1 {
		t.Fatalf("PublishDue = %d, %v; want 1 sent and the send error", n, err)
	}
	if getJob(t, st, a.ID).QueuedAt == nil {
		t.Error("the job SQS accepted is not marked queued: it would be sent again and again")
	}
	if getJob(t, st, b.ID).QueuedAt != nil {
		t.Error("the job SQS did not accept is marked queued")
	}
}

func TestSweepLeavesAJobWaitingForItsGroupAlone(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	first := createJob(t, st, withGroup("g"))
	second := createJob(t, st, withGroup("g"))
	markQueued(t, st, t0)
	// The first job fails and backs off for an hour; the second is refused
	// while it waits, each time its pointer comes by.
	c := claim(t, st, first.ID, t0, dispatch.Claimed)
	if _, err := st.FinishAttempt(t.Context(), dispatch.Attempt{JobID: first.ID, AttemptNumber: c.Job.AttemptCount,
		AttemptedAt: t0, CompletedAt: t0, Status: dispatch.AttemptFailure, ResponseCode: 500},
		dispatch.Transition{Status: dispatch.StatusFailed, NextAttemptAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(40 * time.Minute)
	claim(t, st, second.ID, later, dispatch.ClaimBlocked)
	// 20 minutes on, well past a 15-minute requeue threshold for its
	// creation time, the second job's pointer is known to be due back at
	// the hour: the sweep must not send a copy.
	if _, requeued, err := st.Sweep(t.Context(), later.Add(20*time.Minute), 15*time.Minute); err != nil || requeued != 0 {
		t.Errorf("Sweep requeued %d (err %v), want 0: the waiting job's pointer is alive", requeued, err)
	}
}

// A group whose first job backs off for an hour holds its later jobs'
// pointers behind that job's on the queue, where none is received: they
// have no news for the whole backoff, and that is no sign of a lost
// pointer. The sweep leaves them queued; sent again, each would only wait
// in the outbox for its group. A group's first job whose pointer is lost
// is sent again, and the jobs behind it still wait for theirs.
func TestSweepLeavesJobsQueuedBehindTheirGroupAlone(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	batch := make([]*dispatch.Job, 8)
	for i := range batch {
		batch[i] = newJob(withGroup("backing-off"))
		if i >= 4 {
			batch[i] = newJob(withGroup("pointer-lost"))
		}
	}
	jobs, _, err := st.CreateJobs(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	var sent []dispatch.Unsent // as the publisher does: sent, then confirmed
	if _, err := st.PublishDue(t.Context(), t0.Add(time.Second), 100, recordSend(&sent)); err != nil {
		t.Fatal(err)
	}
	if err := st.ConfirmSent(t.Context(), sent); err != nil {
		t.Fatal(err)
	}
	failJob(t, st, jobs[0].ID, t0, t0.Add(time.Hour))

	later := t0.Add(40 * time.Minute)
	_, requeued, err := st.Sweep(t.Context(), later, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if requeued != 1 {
		t.Errorf("requeued %d, want 1: the first job of the group whose pointer was lost", requeued)
	}
	for i, j := range jobs {
		wantQueued := i != 4
		if q := getJob(t, st, j.ID).QueuedAt; (q != nil) != wantQueued {
			t.Errorf("job %d of 8 (group %s): queued at %v, want queued %v", i, j.GroupID, q, wantQueued)
		}
	}
}

// markQueued publishes every due job as if SQS took them all.
func markQueued(t *testing.T, st *store.Store, at time.Time) {
	t.Helper()
	if _, err := st.PublishDue(t.Context(), at.Add(time.Second), 1000, func(due []dispatch.Unsent) ([]int64, error) {
		ids := make([]int64, len(due))
		for i, u := range due {
			ids[i] = u.ID
		}
		return ids, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A job blocked behind a far-scheduled job of its group steps its pointer
// aside (the refused copy is acknowledged and the job marked unsent): the
// publisher sends it again as soon as no earlier job of its group is live,
// here at once when the predecessor is cancelled. (Issue 11 #2: it waited
// for the predecessor's schedule, 30 days, even after the cancel.)
func TestBlockedJobBehindAFarScheduledJobIsSentAgain(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	a := createJob(t, st, withGroup("g"), func(j *dispatch.Job) { at := t0.Add(30 * 24 * time.Hour); j.ScheduledFor = &at })
	b := createJob(t, st, withGroup("g"))
	markQueued(t, st, t0) // b goes out; a is not due
	claim(t, st, b.ID, t0.Add(2*time.Second), dispatch.ClaimBlocked)
	if got := getJob(t, st, b.ID); got.QueuedAt != nil {
		t.Errorf("b stepped aside but is still marked queued (%v): nothing would send it again", got.QueuedAt)
	}
	published := func(at time.Time) []int64 {
		var ids []int64
		if _, err := st.PublishDue(t.Context(), at, 1000, func(due []dispatch.Unsent) ([]int64, error) {
			for _, u := range due {
				ids = append(ids, u.ID)
			}
			return ids, nil
		}); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if ids := published(t0.Add(13 * time.Hour)); len(ids) != 0 {
		t.Errorf("published %v while a is still pending; b must stay behind it", ids)
	}
	if _, err := st.CancelJob(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	ids := published(time.Now().Add(time.Second))
	if len(ids) != 1 || ids[0] != b.ID {
		t.Fatalf("after a was cancelled the publisher sent %v, want b (%d) at once", ids, b.ID)
	}
	if got := getJob(t, st, b.ID); got.PointerGen != 1 {
		t.Errorf("b's pointer generation is %d, want 1 (a new deduplication id for the re-send)", got.PointerGen)
	}
}

// Pointers sent again wait for the earlier jobs of their group, so they
// reach the queue in group order whatever order they were marked unsent in.
func TestResentPointersWaitForTheirGroup(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	a := createJob(t, st, withGroup("g"))
	b := createJob(t, st, withGroup("g"))
	markQueued(t, st, t0)
	claim(t, st, b.ID, t0.Add(time.Second), dispatch.ClaimBlocked) // b's copy came first
	var sent [][]int64
	publish := func() {
		if _, err := st.PublishDue(t.Context(), time.Now().Add(time.Second), 1000, func(due []dispatch.Unsent) ([]int64, error) {
			var ids []int64
			for _, u := range due {
				ids = append(ids, u.ID)
			}
			sent = append(sent, ids)
			return ids, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	publish()
	if len(sent) != 0 {
		t.Fatalf("b was sent again %v while a is live", sent)
	}
	completeJob(t, st, a.ID, t0.Add(3*time.Second))
	publish()
	if len(sent) != 1 || len(sent[0]) != 1 || sent[0][0] != b.ID {
		t.Fatalf("after a completed the publisher sent %v, want [[b]]", sent)
	}
}
