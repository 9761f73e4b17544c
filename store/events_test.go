package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

func newSubscription(types ...string) *dispatch.Subscription {
	return &dispatch.Subscription{
		Name: "sub", URL: "https://example.com/hook", EventTypes: types,
		Headers: map[string]string{"X-Sub": "1"}, MaxRetries: 4, RetryStrategy: dispatch.RetryLinear,
		Status: dispatch.SubscriptionActive,
	}
}

func createSubscription(t testing.TB, st *store.Store, mods ...func(*dispatch.Subscription)) dispatch.Subscription {
	t.Helper()
	sub := newSubscription("order.created")
	for _, m := range mods {
		m(sub)
	}
	out, err := st.CreateSubscription(t.Context(), sub)
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	return out
}

func publish(t testing.TB, st *store.Store, typ, data string, metadata map[string]string, key string) (dispatch.Event, bool) {
	t.Helper()
	var v any
	d := json.NewDecoder(strings.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("data: %v", err)
	}
	e, created, err := st.PublishEvent(t.Context(), &dispatch.Event{
		Source: "shop", Type: typ, Data: data, Metadata: metadata, IdempotencyKey: key}, v)
	if err != nil {
		t.Fatalf("PublishEvent: %v", err)
	}
	return e, created
}

func subIDs(jobs []dispatch.EventJob) map[int64]bool {
	m := map[int64]bool{}
	for _, j := range jobs {
		m[j.SubscriptionID] = true
	}
	return m
}

func TestPublishEventMatchesPatternsFilterAndStatus(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	exact := createSubscription(t, st)
	prefix := createSubscription(t, st, func(s *dispatch.Subscription) { s.EventTypes = []string{"invoice.paid", "order.*"} })
	all := createSubscription(t, st, func(s *dispatch.Subscription) { s.EventTypes = []string{"*"} })
	other := createSubscription(t, st, func(s *dispatch.Subscription) { s.EventTypes = []string{"invoice.*"} })
	creds := createCredentials(t, st)
	filtered := createSubscription(t, st, func(s *dispatch.Subscription) {
		s.Filter = map[string]string{"tenant": "acme"}
		s.URL = "https://example.com/acme"
		s.Headers = map[string]string{"X-Tenant": "acme"}
		s.MaxRetries = 9
		s.RetryStrategy = dispatch.RetryExponential
		s.CredentialsID = creds.ID
	})
	wrongTenant := createSubscription(t, st, func(s *dispatch.Subscription) { s.Filter = map[string]string{"tenant": "umbrella"} })
	pending := createSubscription(t, st, func(s *dispatch.Subscription) { s.Status = dispatch.SubscriptionPendingVerification })
	disabled := createSubscription(t, st, func(s *dispatch.Subscription) { s.Status = dispatch.SubscriptionDisabled })
	notPrefix := createSubscription(t, st, func(s *dispatch.Subscription) { s.EventTypes = []string{"order.created.*", "orders.*"} })

	e, created := publish(t, st, "order.created", `{"orderId": 7}`, map[string]string{"tenant": "acme", "region": "eu"}, "")
	if !created {
		t.Fatal("created = false for a new event")
	}
	got := subIDs(e.Jobs)
	for _, want := range []dispatch.Subscription{exact, prefix, all, filtered} {
		if !got[want.ID] {
			t.Errorf("no job for subscription %v %v", want.EventTypes, want.Filter)
		}
	}
	for _, not := range []dispatch.Subscription{other, wrongTenant, pending, disabled, notPrefix} {
		if got[not.ID] {
			t.Errorf("a job for subscription %v %v %s", not.EventTypes, not.Filter, not.Status)
		}
	}
	if len(e.Jobs) != 4 || countRows(t, pool, "dispatch_job") != 4 {
		t.Fatalf("jobs = %d (rows %d), want 4", len(e.Jobs), countRows(t, pool, "dispatch_job"))
	}
	// Each job copies its own subscription's delivery settings.
	subs := map[int64]dispatch.Subscription{exact.ID: exact, prefix.ID: prefix, all.ID: all, filtered.ID: filtered}
	for _, ej := range e.Jobs {
		j := getJob(t, st, ej.ID)
		sub := subs[j.SubscriptionID]
		if j.Payload != `{"orderId": 7}` || j.PayloadContentType != "application/json" || j.Source != "shop" ||
			j.Type != "order.created" || j.TargetURL != sub.URL || j.MaxRetries != sub.MaxRetries ||
			j.RetryStrategy != sub.RetryStrategy || j.CredentialsID != sub.CredentialsID ||
			!maps.Equal(j.Headers, sub.Headers) || j.EventID != e.ID || j.Status != dispatch.StatusPending || j.GroupID != "" {
			t.Errorf("job = %+v\nfor subscription %+v", j, sub)
		}
		if want := dispatch.EventJobKey(e.ID, sub.ID); j.IdempotencyKey != want {
			t.Errorf("idempotencyKey = %q, want %q", j.IdempotencyKey, want)
		}
		if j.Metadata["eventId"] != dispatch.FormatID(e.ID) || j.Metadata["subscriptionId"] != dispatch.FormatID(sub.ID) ||
			j.Metadata["tenant"] != "acme" {
			t.Errorf("metadata = %v", j.Metadata)
		}
	}
	// Jobs are found by the event id like any metadata.
	found, total, err := st.SearchJobs(t.Context(), dispatch.JobFilter{Metadata: map[string]string{"eventId": dispatch.FormatID(e.ID)}}, 0, 20)
	if err != nil || total != 4 || len(found) != 4 {
		t.Errorf("search by eventId: %d/%d, %v", len(found), total, err)
	}

	only, _ := publish(t, st, "shipment.sent", `null`, nil, "")
	if len(only.Jobs) != 1 || only.Jobs[0].SubscriptionID != all.ID {
		t.Errorf("an event only * wants: jobs %v", only.Jobs)
	}
}

func TestPublishEventIsIdempotent(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	createSubscription(t, st)
	createSubscription(t, st)
	first, created := publish(t, st, "order.created", `{}`, nil, "evt-1")
	if !created || len(first.Jobs) != 2 {
		t.Fatalf("first publish: created %v, jobs %d", created, len(first.Jobs))
	}
	createSubscription(t, st) // a new subscriber does not change a repeated publish
	again, created := publish(t, st, "order.created", `{"changed":true}`, nil, "evt-1")
	if created || again.ID != first.ID || fmt.Sprint(again.Jobs) != fmt.Sprint(first.Jobs) {
		t.Fatalf("repeat: created %v, event %d jobs %v; want %d %v", created, again.ID, again.Jobs, first.ID, first.Jobs)
	}
	if n := countRows(t, pool, "dispatch_event"); n != 1 {
		t.Errorf("%d events stored, want 1", n)
	}
	if n := countRows(t, pool, "dispatch_job"); n != 2 {
		t.Errorf("%d jobs stored, want 2", n)
	}

	// Concurrent publishes with one key make one event and one set of jobs.
	var wg sync.WaitGroup
	ids := make([]int64, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, _, err := st.PublishEvent(t.Context(), &dispatch.Event{Source: "s", Type: "order.created", Data: `1`, IdempotencyKey: "evt-2"}, nil)
			if err != nil {
				t.Errorf("PublishEvent: %v", err)
			}
			ids[i] = e.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent publishes answered events %v", ids)
		}
	}
	if n := countRows(t, pool, "dispatch_job"); n != 2+3 {
		t.Errorf("%d jobs stored, want 5", n)
	}
}

func TestPublishEventOrderingGroup(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	sub := createSubscription(t, st, func(s *dispatch.Subscription) { s.OrderingKey = "/customer/id" })
	cases := []struct {
		data string
		want string
	}{
		{`{"customer":{"id":"c-1"}}`, "sub-" + dispatch.FormatID(sub.ID) + "-c-1"},
		{`{"customer":{"id":42}}`, "sub-" + dispatch.FormatID(sub.ID) + "-42"},
		{`{"customer":{}}`, ""},
		{`{"customer":{"id":"has space"}}`, "sub-" + dispatch.FormatID(sub.ID) + "-h~"},
		{`{"customer":{"id":"` + strings.Repeat("x", 200) + `"}}`, "sub-" + dispatch.FormatID(sub.ID) + "-h~"},
	}
	for _, c := range cases {
		e, _ := publish(t, st, "order.created", c.data, nil, "")
		j := getJob(t, st, e.Jobs[0].ID)
		if !strings.HasPrefix(j.GroupID, c.want) || (c.want == "" && j.GroupID != "") {
			t.Errorf("data %.40s: groupId %q, want %q…", c.data, j.GroupID, c.want)
		}
		if len(j.GroupID) > dispatch.MaxGroupIDLen {
			t.Errorf("groupId is %d characters", len(j.GroupID))
		}
	}
}

func TestAcquireSlotLimitsAcrossCallers(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	limited := createSubscription(t, st, func(s *dispatch.Subscription) { s.RateLimitPerSecond = 5 })
	free := createSubscription(t, st)
	if slot, ok, _, err := st.AcquireSlot(t.Context(), free.ID, time.Minute); err != nil || !ok || slot != -1 {
		t.Fatalf("unlimited: slot %d ok %v err %v", slot, ok, err)
	}
	// 20 callers at once, as 20 processors would: 5 get a slot, the rest
	// are told when to come back.
	var (
		mu    sync.Mutex
		slots = map[int]bool{}
		held  int
		wg    sync.WaitGroup
	)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot, ok, until, err := st.AcquireSlot(t.Context(), limited.ID, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("AcquireSlot: %v", err)
			case ok:
				slots[slot] = true
			default:
				held++
				if until.IsZero() {
					t.Errorf("held back without a time to come back")
				}
			}
		}()
	}
	wg.Wait()
	if len(slots) != 5 || held != 15 {
		t.Fatalf("%d slots %v, %d held; want 5 and 15", len(slots), slots, held)
	}
	// A released slot is free again one second after the response.
	released := time.Now()
	if err := st.ReleaseSlot(t.Context(), limited.ID, 0); err != nil {
		t.Fatal(err)
	}
	_, ok, until, err := st.AcquireSlot(t.Context(), limited.ID, time.Minute)
	if err != nil || ok || until.Before(released.Add(800*time.Millisecond)) {
		t.Fatalf("right after release: ok %v until +%s err %v; want held for about 1s", ok, until.Sub(released), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		slot, ok, _, err := st.AcquireSlot(t.Context(), limited.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if slot != 0 || time.Since(released) < time.Second {
				t.Errorf("slot %d free after %s", slot, time.Since(released))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the released slot never came free")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Lowering the limit retires slots; deleting the subscription lifts it.
	if _, err := st.UpdateSubscription(t.Context(), limited.ID, func(s *dispatch.Subscription) error { s.RateLimitPerSecond = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSubscription(t.Context(), limited.ID); err != nil {
		t.Fatal(err)
	}
	if slot, ok, _, err := st.AcquireSlot(t.Context(), limited.ID, time.Minute); err != nil || !ok || slot != -1 {
		t.Errorf("deleted: slot %d ok %v err %v", slot, ok, err)
	}
}

// finishEventJob publishes an event and finishes the job it makes for sub
// with status at the given time.
func finishEventJob(t *testing.T, st *store.Store, pool *pgxpool.Pool, sub dispatch.Subscription, status string, at time.Time) {
	t.Helper()
	e, _ := publish(t, st, "order.created", `{}`, nil, "")
	if !subIDs(e.Jobs)[sub.ID] {
		t.Fatalf("the event made no job for subscription %d", sub.ID)
	}
	for _, j := range e.Jobs {
		if j.SubscriptionID == sub.ID {
			if _, err := pool.Exec(t.Context(), `UPDATE dispatch_job SET status = $2, completed_at = $3 WHERE id = $1`, j.ID, status, at); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// enabledAt moves when the subscription became ACTIVE to at.
func enabledAt(t *testing.T, pool *pgxpool.Pool, sub dispatch.Subscription, at time.Time) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `UPDATE dispatch_subscription SET enabled_at = $2 WHERE id = $1`, sub.ID, at); err != nil {
		t.Fatal(err)
	}
}

func TestDisableFailingSubscriptions(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	failing := createSubscription(t, st)
	recovered := createSubscription(t, st)
	young := createSubscription(t, st)
	now := time.Now().UTC()
	for _, s := range []dispatch.Subscription{failing, recovered, young} {
		enabledAt(t, pool, s, now.Add(-7*24*time.Hour)) // ACTIVE for a week
	}
	finishEventJob(t, st, pool, failing, "ERROR", now.Add(-6*24*time.Hour))
	finishEventJob(t, st, pool, failing, "ERROR", now.Add(-time.Hour))
	finishEventJob(t, st, pool, recovered, "ERROR", now.Add(-6*24*time.Hour))
	finishEventJob(t, st, pool, recovered, "COMPLETED", now.Add(-2*24*time.Hour))
	finishEventJob(t, st, pool, recovered, "ERROR", now.Add(-time.Hour))
	finishEventJob(t, st, pool, young, "ERROR", now.Add(-24*time.Hour))
	n, err := st.DisableFailingSubscriptions(t.Context(), now, 5*24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("disabled %d, err %v; want 1", n, err)
	}
	got, _ := st.GetSubscription(t.Context(), failing.ID)
	if got.Status != dispatch.SubscriptionDisabled || !strings.Contains(got.DisabledReason, "failed since") {
		t.Errorf("failing subscription: %s %q", got.Status, got.DisabledReason)
	}
	for _, s := range []dispatch.Subscription{recovered, young} {
		if got, _ := st.GetSubscription(t.Context(), s.ID); got.Status != dispatch.SubscriptionActive {
			t.Errorf("subscription %d is %s, want ACTIVE", s.ID, got.Status)
		}
	}
}

// TestReenabledSubscriptionStaysActiveUntilItFailsForAWholePeriodAgain: an
// operator's enable of an automatically disabled subscription is not undone
// by the next sweep; failures from before the enable do not count, and only
// a whole period of failures after it disables it again.
func TestReenabledSubscriptionStaysActiveUntilItFailsForAWholePeriodAgain(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	const after = 5 * 24 * time.Hour
	sub := createSubscription(t, st)
	now := time.Now().UTC()
	enabledAt(t, pool, sub, now.Add(-7*24*time.Hour))
	finishEventJob(t, st, pool, sub, "ERROR", now.Add(-6*24*time.Hour))
	if n, err := st.DisableFailingSubscriptions(t.Context(), now, after); err != nil || n != 1 {
		t.Fatalf("first sweep disabled %d, err %v; want 1", n, err)
	}

	on, err := st.SetSubscriptionStatus(t.Context(), sub.ID, dispatch.SubscriptionActive, "", dispatch.SubscriptionDisabled)
	if err != nil || on.Status != dispatch.SubscriptionActive {
		t.Fatalf("enable: %s %v", on.Status, err)
	}
	if on.EnabledAt.Before(now) {
		t.Errorf("enabledAt %v is before the enable (after %v)", on.EnabledAt, now)
	}
	// One failure since the enable: within the period after it, sweeps
	// (the next one, and the last one before the period is over) leave it
	// ACTIVE, and it receives the next event's job.
	finishEventJob(t, st, pool, on, "ERROR", on.EnabledAt.Add(time.Second))
	for _, at := range []time.Time{time.Now(), on.EnabledAt.Add(time.Minute), on.EnabledAt.Add(after)} {
		if n, err := st.DisableFailingSubscriptions(t.Context(), at, after); err != nil || n != 0 {
			t.Fatalf("sweep at enable+%v disabled %d, err %v; want 0", at.Sub(on.EnabledAt), n, err)
		}
	}
	if got, _ := st.GetSubscription(t.Context(), sub.ID); got.Status != dispatch.SubscriptionActive {
		t.Fatalf("after the sweeps the re-enabled subscription is %s (%q)", got.Status, got.DisabledReason)
	}
	if e, _ := publish(t, st, "order.created", `{"n":1}`, nil, ""); !subIDs(e.Jobs)[sub.ID] {
		t.Fatalf("the re-enabled subscription got no job of the next event: %+v", e.Jobs)
	}

	// Nothing but failures for a whole period since the enable: disabled
	// again, the reason naming when the streak began.
	finishEventJob(t, st, pool, on, "ERROR", on.EnabledAt.Add(time.Hour))
	sweep := on.EnabledAt.Add(time.Second + after)
	if n, err := st.DisableFailingSubscriptions(t.Context(), sweep, after); err != nil || n != 1 {
		t.Fatalf("sweep a whole period after the first failure since the enable disabled %d, err %v; want 1", n, err)
	}
	got, _ := st.GetSubscription(t.Context(), sub.ID)
	since := on.EnabledAt.Add(time.Second).UTC().Format("2006-01-02T15:04:05Z")
	if got.Status != dispatch.SubscriptionDisabled || !strings.Contains(got.DisabledReason, "failed since "+since) {
		t.Errorf("disabled again: %s %q, want the streak from %s", got.Status, got.DisabledReason, since)
	}
}

// TestHandshakeAndURLChangesKeepUnverifiedURLsInactive: a subscription
// created to be verified is ACTIVE only while its url is the one that
// passed the handshake, whatever path changes it.
func TestHandshakeAndURLChangesKeepUnverifiedURLsInactive(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	sub := createSubscription(t, st, func(s *dispatch.Subscription) {
		s.Status, s.VerifyRequired = dispatch.SubscriptionPendingVerification, true
	})
	if !sub.VerifyRequired || sub.VerifiedURL != "" {
		t.Fatalf("created %+v", sub)
	}
	_, err := st.CreateSubscription(t.Context(), &dispatch.Subscription{Name: "x", URL: "https://example.com/x", EventTypes: []string{"*"},
		MaxRetries: 1, RetryStrategy: dispatch.RetryFixed, Status: dispatch.SubscriptionActive, VerifyRequired: true})
	wantCode(t, err, dispatch.EConflict)

	// A handshake's outcome applies only to the url and status it started
	// from.
	got, applied, err := st.ApplyHandshake(t.Context(), sub.ID, "https://example.com/other", dispatch.SubscriptionPendingVerification, "")
	if err != nil || applied || got.Status != dispatch.SubscriptionPendingVerification {
		t.Fatalf("a handshake of another url: applied %v, %s, %v", applied, got.Status, err)
	}
	got, applied, err = st.ApplyHandshake(t.Context(), sub.ID, sub.URL, dispatch.SubscriptionDisabled, "")
	if err != nil || applied || got.Status != dispatch.SubscriptionPendingVerification {
		t.Fatalf("a handshake from another status: applied %v, %s, %v", applied, got.Status, err)
	}
	before := time.Now()
	got, applied, err = st.ApplyHandshake(t.Context(), sub.ID, sub.URL, dispatch.SubscriptionPendingVerification, "")
	if err != nil || !applied || got.Status != dispatch.SubscriptionActive || got.VerifiedURL != sub.URL || got.EnabledAt.Before(before.Add(-time.Second)) {
		t.Fatalf("a passed handshake: applied %v, %+v, %v", applied, got, err)
	}

	// Disable and enable: the url passed, so no handshake is needed.
	for _, want := range []dispatch.SubscriptionStatus{dispatch.SubscriptionDisabled, dispatch.SubscriptionActive} {
		if got, err = st.SetSubscriptionStatus(t.Context(), sub.ID, want, ""); err != nil || got.Status != want {
			t.Fatalf("set %s: %s %v", want, got.Status, err)
		}
	}
	// A new url waits for its handshake, with the reason.
	got, err = st.UpdateSubscription(t.Context(), sub.ID, func(s *dispatch.Subscription) error {
		s.URL = "https://example.com/new"
		return nil
	})
	if err != nil || got.Status != dispatch.SubscriptionPendingVerification || got.DisabledReason != dispatch.ReasonURLChanged || got.VerifiedURL != sub.URL {
		t.Fatalf("after a url change: %+v %v", got, err)
	}
	if e, _ := publish(t, st, "order.created", `{}`, nil, ""); subIDs(e.Jobs)[sub.ID] {
		t.Errorf("an unverified url got an event's job")
	}
	// Disabled, then enabled: refused while the new url has not passed;
	// a DISABLED one keeps its status when its url changes.
	if _, err = st.SetSubscriptionStatus(t.Context(), sub.ID, dispatch.SubscriptionDisabled, "disabled by request"); err != nil {
		t.Fatal(err)
	}
	_, err = st.SetSubscriptionStatus(t.Context(), sub.ID, dispatch.SubscriptionActive, "", dispatch.SubscriptionDisabled)
	if !errors.Is(err, dispatch.ErrUnverified) {
		t.Fatalf("enable of an unverified url: %v, want ErrUnverified", err)
	}
	got, err = st.UpdateSubscription(t.Context(), sub.ID, func(s *dispatch.Subscription) error {
		s.URL, s.VerifiedURL = "https://example.com/newer", "https://example.com/newer" // VerifiedURL is not the change's to set
		return nil
	})
	if err != nil || got.Status != dispatch.SubscriptionDisabled || got.DisabledReason != "disabled by request" || got.VerifiedURL != sub.URL {
		t.Fatalf("a url change of a DISABLED one: %+v %v", got, err)
	}
	// The table refuses an unverified ACTIVE row, whatever writes it.
	if _, err := pool.Exec(t.Context(), `UPDATE dispatch_subscription SET status = 'ACTIVE' WHERE id = $1`, sub.ID); err == nil {
		t.Errorf("the table took an ACTIVE row whose url did not pass the handshake")
	}
	// A failed handshake forgets the url that passed before.
	got, applied, err = st.ApplyHandshake(t.Context(), sub.ID, got.URL, dispatch.SubscriptionDisabled, "verification failed: HTTP 404")
	if err != nil || !applied || got.Status != dispatch.SubscriptionPendingVerification || got.VerifiedURL != "" || got.DisabledReason != "verification failed: HTTP 404" {
		t.Fatalf("a failed handshake: applied %v, %+v, %v", applied, got, err)
	}
}

func TestSubscriptionUpdateAndDelete(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	sub := createSubscription(t, st)
	_, err := st.UpdateSubscription(t.Context(), sub.ID, func(s *dispatch.Subscription) error {
		s.CredentialsID = 12345
		return nil
	})
	wantCode(t, err, dispatch.EInvalid)
	up, err := st.UpdateSubscription(t.Context(), sub.ID, func(s *dispatch.Subscription) error {
		s.Name, s.RateLimitPerSecond = "renamed", 3
		return nil
	})
	if err != nil || up.Name != "renamed" || up.RateLimitPerSecond != 3 || up.URL != sub.URL {
		t.Fatalf("update: %+v %v", up, err)
	}
	_, err = st.SetSubscriptionStatus(t.Context(), sub.ID, dispatch.SubscriptionActive, "", dispatch.SubscriptionDisabled)
	if err != nil {
		t.Errorf("enable an ACTIVE one: %v", err)
	}
	pend := createSubscription(t, st, func(s *dispatch.Subscription) { s.Status = dispatch.SubscriptionPendingVerification })
	_, err = st.SetSubscriptionStatus(t.Context(), pend.ID, dispatch.SubscriptionActive, "", dispatch.SubscriptionDisabled)
	wantCode(t, err, dispatch.EConflict)
	e, _ := publish(t, st, "order.created", `{}`, nil, "")
	if err := st.DeleteSubscription(t.Context(), sub.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, st.DeleteSubscription(t.Context(), sub.ID), dispatch.ENotFound)
	if j := getJob(t, st, e.Jobs[0].ID); j.Status != dispatch.StatusPending {
		t.Errorf("the deleted subscription's job is %s", j.Status)
	}
	list, total, err := st.ListSubscriptions(t.Context(), dispatch.SubscriptionFilter{EventType: "order.created", Status: dispatch.SubscriptionActive}, 0, 10)
	if err != nil || total != 0 || len(list) != 0 {
		t.Errorf("list after delete: %d %d %v", len(list), total, err)
	}
}

func TestPublishEventRetriesWhenNodeIDsCollide(t *testing.T) {
	t.Parallel()
	// Two stores on one database with the same snowflake node, as two
	// replicas with the same DISPATCH_NODE_ID would be.
	a, pool := setup(t)
	b, err := store.New(pool, store.Options{NodeID: 1, Sealer: newSealer(t, newKey(t), nil)})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		createSubscription(t, a)
	}
	var wg sync.WaitGroup
	for _, st := range []*store.Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, _, err := st.PublishEvent(t.Context(), &dispatch.Event{Source: "s", Type: "order.created", Data: `{}`}, nil); err != nil {
					t.Errorf("PublishEvent: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := countRows(t, pool, "dispatch_job"); n != 4*20*5 {
		t.Errorf("%d jobs, want %d", n, 4*20*5)
	}
}
