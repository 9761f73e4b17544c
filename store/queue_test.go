package store_test

import (
	"slices"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// A job keeps the queue and pool it names, and its pointer is sent with
// them; a job naming none has neither (the defaults).
func TestJobKeepsItsQueueAndPool(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	named := createJob(t, st, func(j *dispatch.Job) { j.QueueURL, j.PoolCode = "http://sqs/1/slow.fifo", "SLOW" })
	plain := createJob(t, st)
	batch, _, err := st.CreateJobs(t.Context(), []*dispatch.Job{newJob(func(j *dispatch.Job) { j.QueueURL, j.PoolCode = "b.fifo", "B" })})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []dispatch.Job{named, plain, batch[0]} {
		got := getJob(t, st, want.ID)
		if got.QueueURL != want.QueueURL || got.PoolCode != want.PoolCode {
			t.Errorf("job %d reads back with queue %q, pool %q; stored with %q, %q", want.ID, got.QueueURL, got.PoolCode, want.QueueURL, want.PoolCode)
		}
	}
	if named.QueueURL != "http://sqs/1/slow.fifo" || named.PoolCode != "SLOW" || batch[0].QueueURL != "b.fifo" {
		t.Errorf("created: %+v, %+v", named, batch[0])
	}
	var got []dispatch.Unsent
	if _, err := st.PublishDue(t.Context(), now(), 100, recordSend(&got)); err != nil {
		t.Fatal(err)
	}
	byID := map[int64]dispatch.Unsent{}
	for _, u := range got {
		byID[u.ID] = u
	}
	if u := byID[named.ID]; u.QueueURL != "http://sqs/1/slow.fifo" || u.PoolCode != "SLOW" {
		t.Errorf("the named job's pointer goes out as %+v", u)
	}
	if u := byID[plain.ID]; u.QueueURL != "" || u.PoolCode != "" {
		t.Errorf("the plain job's pointer goes out as %+v", u)
	}
}

// The outbox leaves out the jobs of queues it is told to skip (failing),
// so that they cannot fill every batch; "" skips the default queue's.
func TestPublishDueExceptSkipsFailingQueues(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	var down []dispatch.Job
	for range 5 {
		down = append(down, createJob(t, st, func(j *dispatch.Job) { j.QueueURL = "down.fifo" }))
	}
	up := createJob(t, st, func(j *dispatch.Job) { j.QueueURL = "up.fifo" })
	plain := createJob(t, st)
	var got []dispatch.Unsent
	// A batch of 2: without the skip, the failing queue's older jobs fill it.
	if _, err := st.PublishDueExcept(t.Context(), now(), 2, []string{"down.fifo"}, recordSend(&got)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unsentIDs(got), sortedIDs(up, plain)) {
		t.Errorf("sent %v, want the other queues' %v", unsentIDs(got), sortedIDs(up, plain))
	}
	got = nil
	if _, err := st.PublishDueExcept(t.Context(), now(), 100, []string{""}, recordSend(&got)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unsentIDs(got), sortedIDs(down...)) {
		t.Errorf("sent %v, want the failing queue's jobs %v once it is not skipped", unsentIDs(got), sortedIDs(down...))
	}
}

// A subscription's queue and pool are its jobs'.
func TestSubscriptionGivesItsJobsItsQueueAndPool(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	sub := createSubscription(t, st, func(s *dispatch.Subscription) { s.QueueURL, s.PoolCode = "slow.fifo", "SLOW" })
	createSubscription(t, st)
	if got, err := st.GetSubscription(t.Context(), sub.ID); err != nil || got.QueueURL != "slow.fifo" || got.PoolCode != "SLOW" {
		t.Fatalf("subscription reads back as %+v, %v", got, err)
	}
	e, _ := publish(t, st, "order.created", `{"id": 1}`, nil, "")
	if len(e.Jobs) != 2 {
		t.Fatalf("event made %d jobs, want 2", len(e.Jobs))
	}
	for _, ej := range e.Jobs {
		j := getJob(t, st, ej.ID)
		want := [2]string{}
		if ej.SubscriptionID == sub.ID {
			want = [2]string{"slow.fifo", "SLOW"}
		}
		if got := [2]string{j.QueueURL, j.PoolCode}; got != want {
			t.Errorf("job of subscription %d names %v, want %v", ej.SubscriptionID, got, want)
		}
	}
	// A change clears them.
	updated, err := st.UpdateSubscription(t.Context(), sub.ID, func(s *dispatch.Subscription) error {
		s.QueueURL, s.PoolCode = "", ""
		return nil
	})
	if err != nil || updated.QueueURL != "" || updated.PoolCode != "" {
		t.Errorf("updated: %+v, %v", updated, err)
	}
}
