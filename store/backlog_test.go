package store_test

import (
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// The backlog counts the live jobs by state and the due ones the outbox
// has still to send, and dates the longest wait from when its job became
// due: a scheduled job waits from its time, not its creation, and a
// retry waits from when it is due again.
func TestBacklog(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	ctx := t.Context()
	b, err := st.Backlog(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b != (dispatch.Backlog{}) {
		t.Fatalf("empty store: backlog %+v, want zero", b)
	}

	jobs := createJobs(t, st, 6) // no hand-off in this Store: all wait for the outbox
	later := time.Now().Add(time.Hour)
	createJob(t, st, func(j *dispatch.Job) { j.ScheduledFor = &later })
	t0 := now()
	claim(t, st, jobs[0].ID, t0, dispatch.Claimed)                      // IN_PROGRESS
	failJob(t, st, jobs[1].ID, t0, t0.Add(time.Hour))                   // FAILED, due in an hour
	completeJob(t, st, jobs[2].ID, t0)                                  // finished
	failJob(t, st, jobs[3].ID, t0, jobs[0].CreatedAt.Add(-time.Minute)) // FAILED, overdue since before any creation

	b, err = st.Backlog(ctx, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := dispatch.Backlog{Pending: 3, InProgress: 1, Failed: 2, Unsent: 4} // 4, 5 and 3 due; 0 claimed (never sent)
	got := b
	got.OldestDue = nil
	if got != want {
		t.Errorf("backlog %+v, want %+v", got, want)
	}
	if wantDue := jobs[0].CreatedAt.Add(-time.Minute); b.OldestDue == nil || !b.OldestDue.Equal(wantDue) {
		t.Errorf("oldest due %v, want %v (the overdue retry)", b.OldestDue, wantDue)
	}

	// Sent to the queue, the due jobs leave the outbox and still wait.
	if _, err := st.PublishDue(ctx, t0.Add(time.Second), 100, func(due []dispatch.Unsent) ([]int64, error) {
		ids := make([]int64, len(due))
		for i, u := range due {
			ids[i] = u.ID
		}
		return ids, nil
	}); err != nil {
		t.Fatal(err)
	}
	completeJob(t, st, jobs[3].ID, t0.Add(2*time.Second))
	b, err = st.Backlog(ctx, t0.Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if b.Unsent != 0 || b.Failed != 1 || b.Pending != 3 {
		t.Errorf("after the send: backlog %+v, want 0 unsent, 1 failed, 3 pending", b)
	}
	if b.OldestDue == nil || !b.OldestDue.Equal(jobs[4].CreatedAt) {
		t.Errorf("oldest due %v, want job 4's creation %v", b.OldestDue, jobs[4].CreatedAt)
	}
}

// The backlog reads the live jobs through their indexes: behind a long
// finished history, its statement scans no partition of dispatch_job.
func TestBacklogReadsOnlyLiveJobs(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	for range 40 {
		createJobs(t, st, 100)
	}
	if _, err := pool.Exec(ctx, `UPDATE dispatch_job SET status = 'COMPLETED', completed_at = now(), queued_at = now()
		WHERE id IN (SELECT id FROM dispatch_job ORDER BY id OFFSET 50)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	e := explain(t, pool, false, store.BacklogQuery, time.Now())
	plan := e.plan
	for _, v := range e.nodes {
		if v["Node Type"] == "Seq Scan" && e.onFilled(v) {
			t.Errorf("the backlog statement scans %s, which holds the history", v["Relation Name"])
		}
	}
	if t.Failed() {
		t.Logf("plan:\n%s", plan)
	}
	b, err := st.Backlog(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b.Pending != 50 || b.Unsent != 50 {
		t.Errorf("backlog %+v, want 50 pending and unsent", b)
	}
}

// A group whose first job backs off holds its later jobs back: the claim
// refuses them and the queue keeps the group behind the first's pointer.
// They are not behind, so they neither age the backlog (which would raise
// DispatchFallingBehind and backlog.old for the whole backoff of one
// failing target) nor, once stepped aside for their group, count as the
// outbox's (DispatchOutboxNotDraining). The unsent count is what the
// publisher then sends.
func TestBacklogLeavesOutJobsHeldByTheirGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		hold       func(t *testing.T, st *store.Store, second dispatch.Job, at time.Time) // the second job's pointer
		wantUnsent int64
	}{
		{"queued behind the first", func(t *testing.T, st *store.Store, _ dispatch.Job, at time.Time) {
			publishAll(t, st, at)
		}, 0},
		{"stepped aside for the first", func(t *testing.T, st *store.Store, second dispatch.Job, at time.Time) {
			publishAll(t, st, at)
			claim(t, st, second.ID, at, dispatch.ClaimBlocked) // marked unsent, with a new pointer generation
		}, 0},
		// A first pointer goes out at once, held or not (the queue keeps
		// the group's order): it is the outbox's until sent, but it waits
		// for its group, not for delivery.
		{"first pointer not sent yet", func(*testing.T, *store.Store, dispatch.Job, time.Time) {}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, _ := setup(t)
			ctx := t.Context()
			first := createJob(t, st, withGroup("customer-7"))
			second := createJob(t, st, withGroup("customer-7"))
			t0 := now()
			failJob(t, st, first.ID, t0, t0.Add(time.Hour)) // backs off for an hour
			tt.hold(t, st, second, t0.Add(time.Second))

			at := t0.Add(2 * time.Second)
			b, err := st.Backlog(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			if b.Pending != 1 || b.Failed != 1 || b.Unsent != tt.wantUnsent {
				t.Errorf("backlog %+v, want 1 pending, 1 failed, %d unsent", b, tt.wantUnsent)
			}
			if b.OldestDue != nil {
				t.Errorf("oldest due %v, want none: the only due job waits for its group", b.OldestDue)
			}
			if sent := publishAll(t, st, at); int64(sent) != b.Unsent {
				t.Errorf("the publisher sent %d, the backlog counted %d unsent", sent, b.Unsent)
			}

			// Once the first is retried and delivered, the second waits
			// for delivery.
			later := t0.Add(time.Hour)
			completeJob(t, st, first.ID, later)
			if b, err = st.Backlog(ctx, later); err != nil {
				t.Fatal(err)
			}
			if b.OldestDue == nil || !b.OldestDue.Equal(second.CreatedAt) {
				t.Errorf("after the first finished: oldest due %v, want the second's creation %v", b.OldestDue, second.CreatedAt)
			}
		})
	}
}

// The backlog finds each group's first live job once, not an earlier live
// job for each job held: with a look-up per held job, one failing target's
// long group takes the read past its timeout, and /metrics loses the
// backlog and the Overview its numbers exactly while a target is down
// (docs/benchmarks.md, "A long-held group").
func TestBacklogLooksUpAHeldGroupOnce(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	const held = 90 // publishAll sends 100 at most
	batch := make([]*dispatch.Job, held+1)
	for i := range batch {
		batch[i] = newJob(withGroup("down"))
	}
	jobs, _, err := st.CreateJobs(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	t0 := now().Add(time.Second)
	publishAll(t, st, t0)
	failJob(t, st, jobs[0].ID, t0, t0.Add(time.Hour))
	// Half the held jobs stepped aside (their pointers came by early).
	for _, j := range jobs[1 : 1+held/2] {
		claim(t, st, j.ID, t0.Add(time.Second), dispatch.ClaimBlocked)
	}
	free := createJob(t, st)

	at := t0.Add(2 * time.Second)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
		t.Fatal(err)
	}
	var b dispatch.Backlog
	if err := tx.QueryRow(ctx, store.BacklogQuery, at).Scan(&b.Pending, &b.InProgress, &b.Failed, &b.Unsent, &b.OldestDue); err != nil {
		t.Fatal(err)
	}
	var calls int64
	if err := tx.QueryRow(ctx, `SELECT COALESCE(sum(calls), 0) FROM pg_stat_xact_user_functions
		WHERE funcname = 'dispatch_live_predecessor'`).Scan(&calls); err != nil {
		t.Fatal(err)
	}
	if calls > 1 {
		t.Errorf("the backlog looked up an earlier live job %d times for one group of %d held jobs", calls, held)
	}
	if b.Pending != held+1 || b.Failed != 1 || b.Unsent != 1 {
		t.Errorf("backlog %+v, want %d pending, 1 failed, 1 unsent (the job without a group)", b, held+1)
	}
	if b.OldestDue == nil || !b.OldestDue.Equal(free.CreatedAt) {
		t.Errorf("oldest due %v, want the job without a group's creation %v", b.OldestDue, free.CreatedAt)
	}
}

// publishAll sends every job due at now, as the publisher would, and
// returns how many it sent.
func publishAll(t *testing.T, st *store.Store, now time.Time) int {
	t.Helper()
	n, err := st.PublishDue(t.Context(), now, 100, func(due []dispatch.Unsent) ([]int64, error) {
		ids := make([]int64, len(due))
		for i, u := range due {
			ids[i] = u.ID
		}
		return ids, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
