package store_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
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
	const key = "breaker:api.example.com"
	// A host never seen is closed: closing it says nothing.
	if changed, err := st.ReleaseAlert(ctx, key, "a", closed); err != nil || changed {
		t.Fatalf("closing an unknown breaker: changed %v, %v", changed, err)
	}
	// Two replicas' breakers open and close for the same host: the first
	// opening and the last closing change it.
	for _, step := range []struct {
		replica string
		open    bool
		want    bool
	}{{"a", true, true}, {"b", true, false}, {"a", true, false}, {"a", false, false}, {"b", false, true}, {"b", false, false}} {
		var changed bool
		var err error
		if step.open {
			changed, err = st.HoldAlert(ctx, key, step.replica, time.Minute, opened)
		} else {
			changed, err = st.ReleaseAlert(ctx, key, step.replica, closed)
		}
		if err != nil || changed != step.want {
			t.Fatalf("%s open %v: changed %v (want %v), %v", step.replica, step.open, changed, step.want, err)
		}
	}
	// The old backlog is one state for every replica.
	backlog := dispatch.AlertEvent{Kind: dispatch.AlertBacklogOld, Subject: "oldest pending job due since …"}
	for _, step := range []struct{ active, want bool }{{false, false}, {true, true}, {true, false}, {false, true}} {
		if changed, err := st.SetAlertState(ctx, "backlog", step.active, backlog); err != nil || changed != step.want {
			t.Fatalf("backlog %v: changed %v (want %v), %v", step.active, changed, step.want, err)
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
		!strings.Contains(got[dispatch.AlertBreakerOpened][0], "api.example.com") || len(got[dispatch.AlertBacklogOld]) != 1 {
		t.Errorf("breaker and backlog alerts %q", got)
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

// A process's hold of a breaker alert lasts its lease: one that ran out
// (its process stopped, or lost its breaker, without a release) counts as
// released, so the host's next opening, in any process, is alerted again;
// renewals find the holds that ran out.
func TestBreakerAlertHoldsRunOut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, pool := setup(t)
	opened := dispatch.AlertEvent{Kind: dispatch.AlertBreakerOpened, Subject: "api.example.com"}
	const key = "breaker:api.example.com"
	hold := func(holder string, want bool) {
		t.Helper()
		if changed, err := st.HoldAlert(ctx, key, holder, time.Minute, opened); err != nil || changed != want {
			t.Fatalf("%s opens: changed %v (want %v), %v", holder, changed, want, err)
		}
	}
	hold("a", true)
	hold("b", false)
	if lapsed, err := st.RenewAlertHolds(ctx, "a", []string{key, "breaker:other.example"}, time.Minute); err != nil ||
		!slices.Equal(lapsed, []string{"breaker:other.example"}) {
		t.Fatalf("renewal: lapsed %q, %v; want only the key a never held", lapsed, err)
	}
	// Both processes stop with their breakers open; their leases run out.
	if _, err := pool.Exec(ctx, `UPDATE dispatch_alert_hold SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if lapsed, err := st.RenewAlertHolds(ctx, "b", []string{key}, time.Minute); err != nil || !slices.Equal(lapsed, []string{key}) {
		t.Fatalf("renewal of a hold that ran out: lapsed %q, %v; want it", lapsed, err)
	}
	hold("c", true) // the host's next outage, in a process started since
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM dispatch_alert_event WHERE kind = $1`, dispatch.AlertBreakerOpened).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 2 {
		t.Errorf("%d breaker.opened events, want 2: the second outage was not alerted", events)
	}
	// Pruned once old: the holds of processes gone.
	if err := st.PruneAlerts(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT holder FROM dispatch_alert_hold ORDER BY holder`)
	if err != nil {
		t.Fatal(err)
	}
	holders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(holders, []string{"c"}) {
		t.Errorf("holds left after the prune: %q, %v; want c's only", holders, err)
	}
}

// Events are pruned per kind: those of a busy kind, sent to every
// destination, go once old, though another kind's windows have seen
// nothing since the destination was made; an event not sent yet stays.
func TestPruneAlertsForgetsSentEventsWhileAQuietKindWaits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, pool := setup(t)
	dest := &dispatch.AlertDestination{Name: "chat", Kind: dispatch.AlertSlack, URL: "https://hooks.example.com/services/x"}
	if err := st.CreateAlertDestination(ctx, dest); err != nil {
		t.Fatal(err)
	}
	record := func(kind, subject string) {
		t.Helper()
		if err := st.RecordAlert(ctx, dispatch.AlertEvent{Kind: kind, Subject: subject}); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		record(dispatch.AlertBreakerOpened, "api.example.com")
	}
	record(dispatch.AlertSubscriptionDisabled, "sent")
	now := time.Now()
	if n, err := st.FlushAlerts(ctx, now, time.Minute); err != nil || n != 2 {
		t.Fatalf("flush: %d jobs, %v; want 2", n, err)
	}
	// Inside the window: this one waits for the next alert.
	record(dispatch.AlertSubscriptionDisabled, "waiting")
	if n, err := st.FlushAlerts(ctx, now.Add(10*time.Second), time.Minute); err != nil || n != 0 {
		t.Fatalf("flush inside the window: %d jobs, %v; want none", n, err)
	}

	if err := st.PruneAlerts(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT kind || ' ' || subject FROM dispatch_alert_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{dispatch.AlertSubscriptionDisabled + " waiting"}; !slices.Equal(left, want) {
		t.Errorf("after the prune %d events are left (first %q), want only %q: every other one was sent",
			len(left), left[:min(3, len(left))], want)
	}
}

// What API callers wrote (a subscription's name, a job's source) reaches a
// Slack channel as text: it cannot mention the channel, post a link of
// its own or write lines that look like dispatch's.
func TestSlackAlertsShowCallersTextAsText(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, _ := setup(t)
	var mu sync.Mutex
	var texts []string
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Text string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		mu.Lock()
		texts = append(texts, body.Text)
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(slack.Close)
	dest := &dispatch.AlertDestination{Name: "chat", Kind: dispatch.AlertSlack, URL: slack.URL + "/services/x"}
	if err := st.CreateAlertDestination(ctx, dest); err != nil {
		t.Fatal(err)
	}

	const bait = "<!channel> <https://evil.example/login|dispatch: sign in again> & co\n• billing: all clear"
	for _, name := range []string{"orders " + bait, "billing"} {
		sub := createSubscription(t, st, func(s *dispatch.Subscription) { s.Name = name })
		if _, err := st.SetSubscriptionStatus(ctx, sub.ID, dispatch.SubscriptionDisabled, "disabled by request"); err != nil {
			t.Fatal(err)
		}
	}
	source, typ := "<!here>", "order.created\r\nfake line"
	exhausted := dispatch.AlertEvent{Kind: dispatch.AlertJobsExhausted, Subject: source + " / " + typ, Detail: "at least 1 job <@U024BE7LH>"}
	if _, err := st.CountExhausted(ctx, source, typ, time.Now().Truncate(time.Minute), 1, 1, exhausted); err != nil {
		t.Fatal(err)
	}
	if n, err := st.FlushAlerts(ctx, time.Now(), time.Minute); err != nil || n != 2 {
		t.Fatalf("flush: %d jobs, %v; want 2", n, err)
	}

	jobs, _, err := st.SearchJobs(ctx, dispatch.JobFilter{Source: dispatch.AlertSource}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	sender := mediator.NewSender(mediator.SenderConfig{Timeout: 5 * time.Second, Guard: mediator.Guard{AllowPrivate: true}})
	for _, j := range jobs {
		if j, err = st.GetJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if d := sender.Send(ctx, &j, nil); d.Status != dispatch.AttemptSuccess {
			t.Fatalf("the alert to the Slack receiver: %s %d %s", d.Status, d.Code, d.Err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(texts) != 2 {
		t.Fatalf("Slack got %d messages, want 2: %q", len(texts), texts)
	}
	for _, text := range texts {
		lines := strings.Split(text, "\n")
		if strings.ContainsAny(text, "<>") {
			t.Errorf("Slack would read markup (a mention or a link) in:\n%s", text)
		}
		switch {
		case strings.Contains(text, "subscriptions disabled"):
			if len(lines) != 3 || !strings.Contains(text, "orders &lt;!channel&gt; &lt;https://evil.example/login|dispatch: sign in again&gt; &amp; co • billing: all clear") {
				t.Errorf("the disables' alert is not the summary and one line per subscription, names as text:\n%s", text)
			}
		case strings.Contains(text, "exhausting retries"):
			if len(lines) != 2 || !strings.Contains(lines[0], "&lt;!here&gt; / order.created  fake line") ||
				!strings.HasSuffix(lines[1], "at least 1 job &lt;@U024BE7LH&gt;") {
				t.Errorf("the exhausted retries' alert is not its summary and one line, source and type as text:\n%s", text)
			}
		default:
			t.Errorf("unexpected alert:\n%s", text)
		}
	}
}
