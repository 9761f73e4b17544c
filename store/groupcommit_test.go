package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
)

// Many deliveries finishing at once are committed together (group commit),
// and each still gets its own answer: every attempt row is written and every
// job takes its own new state; a stale finish (its claim is gone) is
// reported as not applied without disturbing the rest.
func TestFinishAttemptConcurrentCallsEachGetTheirOwnOutcome(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	const n = 60
	jobs := make([]dispatch.Job, n)
	for i := range jobs {
		jobs[i] = createJob(t, st)
		claim(t, st, jobs[i].ID, t0, dispatch.Claimed)
	}
	applied := make([]bool, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := jobs[i%n]
			a := dispatch.Attempt{JobID: j.ID, AttemptNumber: 1, AttemptedAt: t0, CompletedAt: t0.Add(time.Duration(i) * time.Millisecond),
				Status: dispatch.AttemptSuccess, ResponseCode: 200}
			tr := dispatch.Transition{Status: dispatch.StatusCompleted}
			if i%3 == 1 {
				a.Status, a.ResponseCode = dispatch.AttemptFailure, 503
				tr = dispatch.Transition{Status: dispatch.StatusFailed, LastError: "HTTP 503", NextAttemptAt: t0.Add(time.Minute)}
			}
			if i == n { // a second finish of job 0's attempt 1: its claim is gone by then, or it loses the race
				tr = dispatch.Transition{Status: dispatch.StatusError, LastError: "late"}
			}
			applied[i], errs[i] = st.FinishAttempt(t.Context(), a, tr)
		}()
	}
	wg.Wait()
	for i := range n + 1 {
		if errs[i] != nil {
			t.Fatalf("finish %d: %v", i, errs[i])
		}
	}
	if applied[0] == applied[n] {
		t.Errorf("two finishes of job 0's attempt 1: applied %v and %v, want exactly one", applied[0], applied[n])
	}
	for i := 1; i < n; i++ {
		if !applied[i] {
			t.Errorf("finish %d was not applied", i)
		}
		got := getJob(t, st, jobs[i].ID)
		want := dispatch.StatusCompleted
		if i%3 == 1 {
			want = dispatch.StatusFailed
		}
		if got.Status != want {
			t.Errorf("job %d is %s, want %s", i, got.Status, want)
		}
		if want == dispatch.StatusFailed && (got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(t0.Add(time.Minute))) {
			t.Errorf("job %d next attempt %v, want %v", i, got.NextAttemptAt, t0.Add(time.Minute))
		}
		if atts, err := st.ListAttempts(t.Context(), jobs[i].ID); err != nil || len(atts) != 1 {
			t.Errorf("job %d has %d attempts (%v), want 1", i, len(atts), err)
		}
	}
}

// Claims arriving together share one statement and still exclude each
// other: of eight concurrent claims of one job exactly one wins, every other
// job is claimed once, and of two jobs of one group only the earlier is.
func TestClaimJobConcurrentClaimsShareAStatementAndStayExclusive(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	t0 := now()
	var ids []int64
	for range 30 {
		ids = append(ids, createJob(t, st).ID)
	}
	contested := createJob(t, st).ID
	first := createJob(t, st, withGroup("g")).ID
	second := createJob(t, st, withGroup("g")).ID
	calls := append(append([]int64{}, ids...), first, second)
	for range 8 {
		calls = append(calls, contested)
	}
	states := make([]dispatch.ClaimState, len(calls))
	var wg sync.WaitGroup
	for i, id := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.ClaimJob(t.Context(), id, t0, time.Minute)
			if err != nil {
				t.Errorf("claim %d: %v", id, err)
			}
			states[i] = c.State
		}()
	}
	wg.Wait()
	wins := 0
	for i, id := range calls {
		switch {
		case id == contested:
			if states[i] == dispatch.Claimed {
				wins++
			} else if states[i] != dispatch.ClaimBusy {
				t.Errorf("a losing claim of the contested job is %v, want ClaimBusy", states[i])
			}
		case id == second:
			if states[i] != dispatch.ClaimBlocked {
				t.Errorf("the group's second job: %v, want ClaimBlocked (its first is live)", states[i])
			}
		default:
			if states[i] != dispatch.Claimed {
				t.Errorf("job %d: %v, want Claimed", id, states[i])
			}
		}
	}
	if wins != 1 {
		t.Errorf("the contested job was claimed %d times, want exactly once", wins)
	}
	if got := getJob(t, st, contested); got.AttemptCount != 1 {
		t.Errorf("the contested job has %d attempts counted, want 1", got.AttemptCount)
	}
}

// Creates that arrive together are stored with one statement, and each
// caller still gets its own job; callers sharing an idempotency key get
// the one job that holds it, created once, whichever batch they landed in.
func TestCreateJobConcurrentCallsEachGetTheirOwnJob(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	const n = 80
	type result struct {
		job     dispatch.Job
		created bool
		err     error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := newJob(func(j *dispatch.Job) {
				j.Payload = fmt.Sprintf(`{"n":%d}`, i)
				if i%4 == 0 {
					j.IdempotencyKey = "shared"
				} else {
					j.IdempotencyKey = fmt.Sprintf("own-%d", i)
				}
			})
			r := &results[i]
			r.job, r.created, r.err = st.CreateJob(t.Context(), j)
		}()
	}
	wg.Wait()
	var sharedID int64
	sharedCreated := 0
	ids := map[int64]bool{}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("create %d: %v", i, r.err)
		}
		if i%4 == 0 {
			if sharedID == 0 {
				sharedID = r.job.ID
			}
			if r.job.ID != sharedID {
				t.Errorf("create %d with the shared key got job %d, another got %d", i, r.job.ID, sharedID)
			}
			if r.created {
				sharedCreated++
			}
			continue
		}
		if !r.created || r.job.Payload != fmt.Sprintf(`{"n":%d}`, i) || r.job.IdempotencyKey != fmt.Sprintf("own-%d", i) {
			t.Errorf("create %d: created %v, payload %s, key %s: not its own job", i, r.created, r.job.Payload, r.job.IdempotencyKey)
		}
		if ids[r.job.ID] {
			t.Errorf("create %d got job %d, which another create got too", i, r.job.ID)
		}
		ids[r.job.ID] = true
	}
	if sharedCreated != 1 {
		t.Errorf("%d creates with the shared key report created, want exactly 1", sharedCreated)
	}
	var stored int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM dispatch_job`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := n - n/4 + 1; stored != want {
		t.Errorf("%d jobs stored, want %d", stored, want)
	}
}

// Creates running side by side never pair an earlier creation time with
// later ids: the outbox sends by (next_attempt_at, id), so that order must
// be id order, or a group's later jobs reach the queue first and step
// aside one outbox pass at a time (a 20,000-job backlog drained at 98
// jobs/s instead of 3,000 when it was not).
func TestConcurrentCreatesKeepTimeAndIdOrderTogether(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				batch := make([]*dispatch.Job, 50)
				for i := range batch {
					batch[i] = newJob(func(j *dispatch.Job) { j.GroupID = "g" })
				}
				if _, _, err := st.CreateJobs(t.Context(), batch); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := st.CreateJob(t.Context(), newJob(func(j *dispatch.Job) { j.GroupID = "g" })); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rows, err := pool.Query(t.Context(), `SELECT id FROM dispatch_job ORDER BY next_attempt_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 8*10*51 {
		t.Fatalf("%d jobs stored, want %d", len(ids), 8*10*51)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] < ids[i-1] {
			t.Fatalf("by (next_attempt_at, id), job %d comes after job %d: the outbox would send them out of id order", ids[i], ids[i-1])
		}
	}
}
