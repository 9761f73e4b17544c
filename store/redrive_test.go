package store_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// Two redrives of the same dead letters that overlap (a client retrying a
// slow redrive) replay each original exactly once between them.
func TestReplayJobsConcurrentRedrivesReplayEachOnce(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	const n = 50
	for range n {
		j := createJob(t, st, withSource("billing"))
		errorJob(t, st, j.ID, now())
	}
	filter := dispatch.JobFilter{Statuses: []dispatch.Status{dispatch.StatusError}}
	for round := range 3 { // later rounds find nothing left to replay
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results [2][]dispatch.Job
			errs    [2]error
		)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var res dispatch.ReplayResult
				res, errs[i] = st.ReplayJobs(t.Context(), filter, 100)
				results[i] = res.Jobs
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: redrive %d: %v", round, i, err)
			}
		}
		if round == 0 && len(results[0])+len(results[1]) != n {
			t.Errorf("round 0: the two redrives answered %d and %d replays, want %d between them",
				len(results[0]), len(results[1]), n)
		}
		if round > 0 && len(results[0])+len(results[1]) != 0 {
			t.Errorf("round %d: replayed %d more", round, len(results[0])+len(results[1]))
		}
	}
	rows, err := pool.Query(t.Context(), `
		SELECT o.id, count(r.id) FROM dispatch_job o LEFT JOIN dispatch_job r ON r.replay_of = o.id
		WHERE o.status = 'ERROR' GROUP BY o.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	originals, twice := 0, 0
	for rows.Next() {
		var id, replays int64
		if err := rows.Scan(&id, &replays); err != nil {
			t.Fatal(err)
		}
		originals++
		if replays != 1 {
			twice++
			t.Errorf("original %d replayed %d times, want exactly once", id, replays)
		}
	}
	if originals != n {
		t.Errorf("%d originals, want %d", originals, n)
	}
}

// A dead letter whose credentials were deleted cannot be replayed; the
// redrive reports it and replays the rest, every time it runs.
func TestReplayJobsReportsJobsWithoutCredentialsAndReplaysTheRest(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	cred := createCredentials(t, st)
	orphan := createJob(t, st, func(j *dispatch.Job) { j.CredentialsID = cred.ID }) // oldest: picked first
	errorJob(t, st, orphan.ID, now())
	var rest []int64
	for range 3 {
		j := createJob(t, st)
		errorJob(t, st, j.ID, now())
		rest = append(rest, j.ID)
	}
	if err := st.DeleteCredentials(t.Context(), cred.ID); err != nil {
		t.Fatal(err)
	}
	filter := dispatch.JobFilter{Statuses: []dispatch.Status{dispatch.StatusError}}
	res, err := st.ReplayJobs(t.Context(), filter, 2)
	if err != nil {
		t.Fatalf("redrive: %v", err)
	}
	var replayed []int64
	for _, j := range res.Jobs {
		replayed = append(replayed, j.ReplayOf)
	}
	if !slices.Equal(replayed, rest[:2]) {
		t.Errorf("replayed %v, want the two oldest replayable jobs %v", replayed, rest[:2])
	}
	if len(res.Failed) != 1 || res.Failed[0].JobID != orphan.ID || !strings.Contains(res.Failed[0].Err.Error(), "credentials") {
		t.Errorf("failed = %+v, want job %d reported for its missing credentials", res.Failed, orphan.ID)
	}
	// The next redrive is not stuck on the same job either.
	res, err = st.ReplayJobs(t.Context(), filter, 2)
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ReplayOf != rest[2] {
		t.Errorf("second redrive: %+v, %v; want job %d replayed", res.Jobs, err, rest[2])
	}
}
