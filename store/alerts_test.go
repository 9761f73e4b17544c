package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// alertTexts makes the due alert jobs at now and returns their Slack texts
// by type.
func alertTexts(t *testing.T, flush func(time.Time) (int, error), search func() []dispatch.Job, now time.Time) map[string][]string {
	t.Helper()
	if _, err := flush(now); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, j := range search() {
		var body struct{ Text string }
		if err := json.Unmarshal([]byte(j.Payload), &body); err != nil {
			t.Fatalf("payload %q: %v", j.Payload, err)
		}
		out[j.Type] = append(out[j.Type], body.Text)
	}
	return out
}

func TestAlertStatesAndCountsAlertOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := setup(t)
	dest := &dispatch.AlertDestination{Name: "chat", Kind: dispatch.AlertSlack, URL: "https://hooks.example.com/services/x"}
	if err := st.CreateAlertDestination(ctx, dest); err != nil {
		t.Fatal(err)
	}
	opened := dispatch.AlertEvent{Kind: dispatch.AlertBreakerOpened, Subject: "api.example.com"}
	closed := dispatch.AlertEvent{Kind: dispatch.AlertBreakerClosed, Subject: "api.example.com"}
	// A host never seen is closed: closing it says nothing.
	if changed, err := st.SetAlertState(ctx, "breaker:api.example.com", false, closed); err != nil || changed {
		t.Fatalf("closing an unknown breaker: changed %v, %v", changed, err)
	}
	// Two replicas' breakers open and close for the same host.
	for _, step := range []struct {
		active bool
		e      dispatch.AlertEvent
		want   bool
	}{{true, opened, true}, {true, opened, false}, {false, closed, true}, {false, closed, false}} {
		changed, err := st.SetAlertState(ctx, "breaker:api.example.com", step.active, step.e)
		if err != nil || changed != step.want {
			t.Fatalf("set %v: changed %v (want %v), %v", step.active, changed, step.want, err)
		}
	}
	// Exhausted retries: the threshold is crossed once per window.
	start := time.Now().Truncate(time.Minute)
	exhausted := dispatch.AlertEvent{Kind: dispatch.AlertJobsExhausted, Subject: "orders / order.created"}
	for i, step := range []struct {
		window time.Time
		n      int
		want   bool
	}{{start, 3, false}, {start, 4, true}, {start, 3, false}, {start.Add(time.Minute), 5, true}} {
		crossed, err := st.CountExhausted(ctx, "orders", "order.created", step.window, step.n, 5, exhausted)
		if err != nil || crossed != step.want {
			t.Fatalf("count %d: crossed %v (want %v), %v", i, crossed, step.want, err)
		}
	}

	search := func() []dispatch.Job {
		jobs, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Source: dispatch.AlertSource}, 0, 50)
		if err != nil {
			t.Fatal(err)
		}
		for i := range jobs { // the list leaves payloads out
			if jobs[i], err = st.GetJob(ctx, jobs[i].ID); err != nil {
				t.Fatal(err)
			}
		}
		return jobs
	}
	flush := func(now time.Time) (int, error) { return st.FlushAlerts(ctx, now, time.Minute) }
	now := time.Now()
	got := alertTexts(t, flush, search, now)
	if len(got[dispatch.AlertBreakerOpened]) != 1 || len(got[dispatch.AlertBreakerClosed]) != 1 ||
		!strings.Contains(got[dispatch.AlertBreakerOpened][0], "api.example.com") {
		t.Errorf("breaker alerts %q", got)
	}
	if texts := got[dispatch.AlertJobsExhausted]; len(texts) != 1 || !strings.Contains(texts[0], "2 sources/types exhausting retries") {
		t.Errorf("exhausted alerts %q", texts)
	}
	// Flushing again, inside the window or after it, makes nothing new.
	for _, at := range []time.Time{now, now.Add(2 * time.Minute)} {
		if n, err := flush(at); err != nil || n != 0 {
			t.Errorf("flush at %v again: %d jobs, %v", at, n, err)
		}
	}
}

// An event's id is taken when it is recorded, not when its transaction
// commits: a subscription disabled in a transaction still open while
// another's disable commits and a flush runs is alerted all the same, not
// left behind the destination's cursor and never sent.
func TestFlushAlertsSendsEventsCommittedLate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, pool := setup(t)
	dest := &dispatch.AlertDestination{Name: "chat", Kind: dispatch.AlertSlack, URL: "https://hooks.example.com/services/x"}
	if err := st.CreateAlertDestination(ctx, dest); err != nil {
		t.Fatal(err)
	}
	named := func(name string) func(*dispatch.Subscription) {
		return func(s *dispatch.Subscription) { s.Name = name }
	}
	slow, fast := createSubscription(t, st, named("slow-sub")), createSubscription(t, st, named("fast-sub"))
	const disable = `UPDATE dispatch_subscription SET status = 'DISABLED', disabled_reason = 'by request' WHERE id = $1`

	// The slow disable records its event (the lower id) and does not
	// commit yet; the fast one records the next and commits.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below; a failed test lets a waiting flush go
	if _, err := tx.Exec(ctx, disable, slow.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, disable, fast.ID); err != nil {
		t.Fatal(err)
	}

	// A flush runs meanwhile: it either ends or waits for the open
	// transaction. Then the slow disable commits.
	now := time.Now()
	flushed := make(chan error, 1)
	go func() {
		_, err := st.FlushAlerts(ctx, now, time.Minute)
		flushed <- err
	}()
	var flushErr error
	done := false
	deadline := time.After(10 * time.Second)
	for !done {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE relation = 'dispatch_alert_event'::regclass AND NOT granted)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case flushErr = <-flushed:
			done = true
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatal("the flush neither ended nor waited for the open transaction")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !done {
		flushErr = <-flushed
	}
	if flushErr != nil {
		t.Fatal(flushErr)
	}

	// After the window, a flush sends whatever is left.
	if _, err := st.FlushAlerts(ctx, now.Add(2*time.Minute), time.Minute); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Source: dispatch.AlertSource}, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, j := range jobs {
		if j, err = st.GetJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		var body struct{ Text string }
		if err := json.Unmarshal([]byte(j.Payload), &body); err != nil {
			t.Fatalf("payload %q: %v", j.Payload, err)
		}
		texts = append(texts, body.Text)
	}
	all := strings.Join(texts, "\n")
	for _, name := range []string{"slow-sub", "fast-sub"} {
		if !strings.Contains(all, name) {
			t.Errorf("no alert names %s; the alerts sent:\n%s", name, all)
		}
	}
}
