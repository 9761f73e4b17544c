package store_test

import (
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// Creates of one group are written one after another: a create waits for
// the group's lock, which another create of the group holds until it
// commits, before it draws its place in the group. Places then follow
// commit order, and a group's later job cannot commit, and be delivered,
// before an earlier one. Creates of other groups do not wait.
func TestCreatesOfOneGroupCommitInTheirOrder(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	// A create of group g in flight, holding the group's lock.
	if _, err := tx.Exec(t.Context(), `SELECT pg_advisory_xact_lock(`+store.GroupLockSpace+`, hashtext('g'))`); err != nil {
		t.Fatal(err)
	}

	other := createJob(t, st, withGroup("h"))
	done := make(chan dispatch.Job, 1)
	go func() {
		j, _, err := st.CreateJob(t.Context(), newJob(withGroup("g")))
		if err != nil {
			t.Error(err)
		}
		done <- j
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = `+store.GroupLockSpace+` AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case <-done:
			t.Fatal("a create of group g committed while another create of g held the group")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the create of group g never waited for the group's lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-done:
		if j.Seq <= other.Seq {
			t.Errorf("place %d for the create that waited, %d for the one before it; want a later place", j.Seq, other.Seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the create of group g did not finish once the group was free")
	}
}
