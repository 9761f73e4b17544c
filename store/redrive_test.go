package store_test

import (
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
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

// Two redrives whose jobs share groups take their groups' locks together,
// in order. Taken one replay at a time, a redrive holding g1 and waiting
// for g2 met one holding g2 and waiting for g1, and PostgreSQL ended one of
// them: the operator got a 500 and nothing replayed.
func TestRedrivesSharingGroupsNeverDeadlock(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	for round := range 6 {
		source := "round-" + strconv.Itoa(round)
		// Redrives of two each: one takes [g1 g2], the other [g2 g1].
		for _, g := range []string{"g1", "g2", "g2", "g1"} {
			j := createJob(t, st, withSource(source), withGroup(source+"-"+g))
			errorJob(t, st, j.ID, now())
		}
		filter := dispatch.JobFilter{Source: source, Statuses: []dispatch.Status{dispatch.StatusError}}
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			errs     [2]error
			replayed [2]int
		)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := st.ReplayJobs(t.Context(), filter, 2)
				errs[i], replayed[i] = err, len(res.Jobs)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: redrive %d: %v", round, i, err)
			}
		}
		// A redrive that locked originals the other had replayed meanwhile
		// answers with fewer (see ReplayJobs); one more call takes the rest.
		rest, err := st.ReplayJobs(t.Context(), filter, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n := replayed[0] + replayed[1] + len(rest.Jobs); n != 4 {
			t.Errorf("round %d: replayed %d, %d, then %d: want each of the 4 once", round, replayed[0], replayed[1], len(rest.Jobs))
		}
	}
}

// A redrive replays a group's jobs in their places' order, not their ids':
// an id follows the clock of the replica that made it, a place the order
// the creates committed in.
func TestARedriveKeepsEachGroupsOrder(t *testing.T) {
	t.Parallel()
	a, _, dbURL := storetest.New(t, store.Options{NewID: skewedIDs(1, 0)})
	b := secondStore(t, dbURL, store.Options{NewID: skewedIDs(0, -5*time.Second)})
	first := createJob(t, a, withGroup("customer-9"), withSource("skewed"))
	second := createJob(t, b, withGroup("customer-9"), withSource("skewed"))
	if second.ID >= first.ID || second.Seq <= first.Seq {
		t.Fatalf("second: id %d place %d; first: id %d place %d; want a lower id and a later place", second.ID, second.Seq, first.ID, first.Seq)
	}
	errorJob(t, a, first.ID, now())
	errorJob(t, a, second.ID, now())
	res, err := a.ReplayJobs(t.Context(), dispatch.JobFilter{Source: "skewed", Statuses: []dispatch.Status{dispatch.StatusError}}, 10)
	if err != nil || len(res.Jobs) != 2 {
		t.Fatalf("redrive: %+v, %v", res, err)
	}
	place := map[int64]int64{}
	for _, j := range res.Jobs {
		place[j.ReplayOf] = j.Seq
	}
	if place[first.ID] >= place[second.ID] {
		t.Errorf("the replay of the first job has place %d, of the second %d: want the group's order kept", place[first.ID], place[second.ID])
	}
}

// A redrive that cannot take its groups within the read timeout (another
// redrive, or a long create, holds one) replays nothing and says so as a
// 503 to try again, as a dry run that takes too long does: not a 500.
func TestARedriveHeldUpByItsGroupsIsUnavailable(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	j := createJob(t, st, withSource("held"), withGroup("held-g"))
	errorJob(t, st, j.ID, now())
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context()) //nolint:errcheck // only holds the lock
	if _, err := tx.Exec(t.Context(), `SELECT pg_advisory_xact_lock(`+store.GroupLockSpace+`, hashtext('held-g'))`); err != nil {
		t.Fatal(err)
	}
	_, err = st.ReplayJobs(t.Context(), dispatch.JobFilter{Source: "held", Statuses: []dispatch.Status{dispatch.StatusError}}, 10)
	if dispatch.ErrorCode(err) != dispatch.EUnavailable {
		t.Fatalf("a redrive held up by its group: %v, want %s", err, dispatch.EUnavailable)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	var replays int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM dispatch_job WHERE replay_of = $1`, j.ID).Scan(&replays); err != nil || replays != 0 {
		t.Errorf("%d replays (%v), want none", replays, err)
	}
}

// A redrive holds each payload it replays (the original's, the replay's,
// the answer's): one call replays at most RedriveBytes of them, and the
// rest are left for the next call, each replayed once in the end.
func TestARedriveReplaysABoundedSizeOfPayloadsACall(t *testing.T) {
	t.Parallel()
	// Stored compressed (a tiny body) or as it is (a body of its size):
	// either way at most the bound of payloads is replayed a call.
	const size = store.RedriveBytes/3 + 1 // three would pass the bound
	payloads := map[string]string{
		"compressible": strings.Repeat("x", size),
		"random":       randomText(size),
	}
	for name, big := range payloads {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, _ := setup(t)
			const n = 5
			for range n {
				j := createJob(t, st, withSource("big"), func(j *dispatch.Job) { j.Payload = big })
				errorJob(t, st, j.ID, now())
			}
			filter := dispatch.JobFilter{Source: "big", Statuses: []dispatch.Status{dispatch.StatusError}}
			seen := map[int64]bool{}
			for call := 0; len(seen) < n; call++ {
				if call == n {
					t.Fatalf("after %d calls %d of %d replayed", call, len(seen), n)
				}
				res, err := st.ReplayJobs(t.Context(), filter, 100)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Jobs) == 0 || len(res.Jobs) > 2 {
					t.Fatalf("call %d replayed %d jobs of %d bytes, want 1 or 2 (at most %d bytes)", call, len(res.Jobs), len(big), store.RedriveBytes)
				}
				for _, j := range res.Jobs {
					if seen[j.ReplayOf] || j.Payload != big {
						t.Errorf("original %d replayed again, or with another payload", j.ReplayOf)
					}
					seen[j.ReplayOf] = true
				}
				if left := len(seen) < n; res.More != left {
					t.Errorf("call %d: more = %v with %d of %d replayed", call, res.More, len(seen), n)
				}
			}
		})
	}
}

// A dead letter older than the retention is left alone by a redrive. It is
// kept only while its partition holds a live job; its replay, made later in
// a later partition, may have gone with that partition already, and the
// redrive would then send it again, as old as it is.
func TestARedriveLeavesDeadLettersPastTheRetention(t *testing.T) {
	t.Parallel()
	retention := 24 * time.Hour
	st, _, dbURL := storetest.New(t, store.Options{NodeID: 1, Retention: retention})
	if err := store.StartHistoryAt(t.Context(), st, time.Now().Add(-72*time.Hour), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	twoDaysAgo := secondStore(t, dbURL, store.Options{NewID: skewedIDs(2, -48*time.Hour)})
	old := createJob(t, twoDaysAgo, withSource("aged"))
	errorJob(t, st, old.ID, now())
	recent := createJob(t, st, withSource("aged"))
	errorJob(t, st, recent.ID, now())
	filter := dispatch.JobFilter{Source: "aged", Statuses: []dispatch.Status{dispatch.StatusError}}
	if n, err := st.CountReplayable(t.Context(), filter); err != nil || n != 1 {
		t.Errorf("dry run: %d, %v; want only the dead letter within the retention", n, err)
	}
	res, err := st.ReplayJobs(t.Context(), filter, 10)
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ReplayOf != recent.ID {
		t.Fatalf("redrive: %+v, %v; want only %d replayed", res.Jobs, err, recent.ID)
	}
}

// randomText is n bytes of text that does not compress.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawStdEncoding.EncodeToString(b)[:n]
}
