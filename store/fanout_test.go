package store_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// rowCounts is how many events and jobs the database holds.
func rowCounts(t *testing.T, pool *pgxpool.Pool) (events, jobs int) {
	t.Helper()
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM dispatch_event), (SELECT count(*) FROM dispatch_job)`).Scan(&events, &jobs); err != nil {
		t.Fatal(err)
	}
	return events, jobs
}

// publishRefused publishes and checks that the error is an
// EUnprocessable naming each of want.
func publishRefused(t *testing.T, st *store.Store, data string, want ...string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		t.Fatal(err)
	}
	_, _, err := st.PublishEvent(t.Context(), &dispatch.Event{Source: "shop", Type: "order.created", Data: data, IdempotencyKey: "k-1"}, v)
	if dispatch.ErrorCode(err) != dispatch.EUnprocessable {
		t.Fatalf("PublishEvent: %v, want %s", err, dispatch.EUnprocessable)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

// An event that matches more ACTIVE subscriptions than MaxFanout is refused
// whole: no event, no job. At the cap it fans out as usual. Subscriptions
// that are not ACTIVE do not count.
func TestPublishEventRefusesMoreMatchesThanMaxFanout(t *testing.T) {
	t.Parallel()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1, MaxFanout: 3})
	var subs []dispatch.Subscription
	for range 4 {
		subs = append(subs, createSubscription(t, st))
	}
	createSubscription(t, st, func(s *dispatch.Subscription) { s.Status = dispatch.SubscriptionDisabled })
	createSubscription(t, st, func(s *dispatch.Subscription) { s.Status = dispatch.SubscriptionPendingVerification })

	publishRefused(t, st, `{"n":1}`, "4 ACTIVE subscriptions", "at most 3")
	if events, jobs := rowCounts(t, pool); events != 0 || jobs != 0 {
		t.Fatalf("a refused event left %d events and %d jobs", events, jobs)
	}

	if err := st.DeleteSubscription(t.Context(), subs[0].ID); err != nil {
		t.Fatal(err)
	}
	e, created := publish(t, st, "order.created", `{"n":1}`, nil, "k-1") // the refused key is free
	if !created || len(e.Jobs) != 3 {
		t.Fatalf("at the cap: created %v with %d jobs, want 3", created, len(e.Jobs))
	}
	if events, jobs := rowCounts(t, pool); events != 1 || jobs != 3 {
		t.Fatalf("after one event to 3 subscriptions: %d events, %d jobs", events, jobs)
	}
}

// The data is copied into every job: an event whose data times its
// matches exceeds MaxFanoutBytes is refused whole as well.
func TestPublishEventRefusesMoreBytesThanMaxFanoutBytes(t *testing.T) {
	t.Parallel()
	st, pool, _ := storetest.New(t, store.Options{NodeID: 1, MaxFanoutBytes: 1000})
	for range 4 {
		createSubscription(t, st)
	}
	data := `{"pad":"` + strings.Repeat("x", 241) + `"}` // 251 bytes: 4 copies are 1004
	publishRefused(t, st, data, strconv.Itoa(len(data))+" bytes", "4 jobs", "1004 bytes", "at most 1000")
	if events, jobs := rowCounts(t, pool); events != 0 || jobs != 0 {
		t.Fatalf("a refused event left %d events and %d jobs", events, jobs)
	}
	data = `{"pad":"` + strings.Repeat("x", 240) + `"}` // 250 bytes: 4 copies are 1000
	if e, created := publish(t, st, "order.created", data, nil, ""); !created || len(e.Jobs) != 4 {
		t.Fatalf("at the byte cap: created %v with %d jobs, want 4", created, len(e.Jobs))
	}
}
