package store_test

import (
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
				var res []dispatch.Job
				res, errs[i] = st.ReplayJobs(t.Context(), filter, 100)
				results[i] = res
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
