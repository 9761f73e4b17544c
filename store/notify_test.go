package store_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// countingHandoff takes every pointer handed to it (while it has room) and
// counts the outbox passes the store asks for.
type countingHandoff struct {
	room    atomic.Bool
	notices atomic.Int64
}

func (h *countingHandoff) Reserve(int) bool            { return h.room.Load() }
func (h *countingHandoff) Hand([]dispatch.Unsent, int) {}
func (h *countingHandoff) Notify()                     { h.notices.Add(1) }

// The store is the publisher's one source of news besides its timer: after
// every commit that leaves the outbox work no hand-off took, it asks for a
// pass, and after a handed create it does not.
func TestStoreAsksForAnOutboxPassAfterWorkItCouldNotHand(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	h := &countingHandoff{}
	h.room.Store(true)
	st.HandOffTo(h)
	asked := func(what string, want bool, do func()) {
		t.Helper()
		before := h.notices.Load()
		do()
		if got := h.notices.Load() > before; got != want {
			t.Errorf("%s: asked for an outbox pass = %v, want %v", what, got, want)
		}
	}

	asked("a create handed over", false, func() { createJob(t, st) })
	var grouped, second dispatch.Job
	asked("a grouped create (never handed: the outbox sends groups in order)", true, func() {
		grouped = createJob(t, st, withGroup("g"))
	})
	second = createJob(t, st, withGroup("g"))
	retried := createJob(t, st, withGroup("r"))
	asked("a grouped job left FAILED, to be retried (its group waits)", false, func() {
		failJob(t, st, retried.ID, now(), now().Add(time.Hour))
	})
	asked("a grouped job completed (its group's next job is due)", true, func() { completeJob(t, st, grouped.ID, now()) })
	asked("a grouped job cancelled", true, func() {
		if _, err := st.CancelJob(t.Context(), second.ID); err != nil {
			t.Fatal(err)
		}
	})
	asked("a replay", true, func() {
		if _, err := st.ReplayJob(t.Context(), grouped.ID); err != nil {
			t.Fatal(err)
		}
	})
	h.room.Store(false)
	asked("a create with no room to hand it", true, func() { createJob(t, st) })
	h.room.Store(true)
	ungrouped := createJob(t, st)
	asked("an ungrouped job completed", false, func() { completeJob(t, st, ungrouped.ID, now()) })
}
