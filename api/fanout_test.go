package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// setupStore is setup over a store made with opts.
func setupStore(t *testing.T, opts store.Options) *fixture {
	t.Helper()
	st, pool, _ := storetest.New(t, opts)
	f := &fixture{store: st, pool: pool, notifier: &countingNotifier{}}
	st.HandOffTo(f.notifier)
	srv := httptest.NewServer(api.New(st, nil, api.Config{
		APITokens: []string{apiToken}, AdminToken: adminToken, MaxPayload: maxPayload,
		JobRules: dispatch.JobRules{AllowHTTP: true}, Logger: slog.New(slog.DiscardHandler),
	}, prometheus.NewRegistry()).Handler())
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// An event matching more ACTIVE subscriptions than the fan-out cap is
// refused with 422 naming the count and the cap, and nothing is stored;
// at the cap it is published.
func TestPublishEventBeyondMaxFanout(t *testing.T) {
	t.Parallel()
	f := setupStore(t, store.Options{NodeID: 1, MaxFanout: 3})
	var ids []string
	for range 4 {
		var s subscriptionOut
		f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"s","url":"https://example.com/hook","eventTypes":["order.*"]}`).
			want(t, http.StatusCreated).decode(t, &s)
		ids = append(ids, s.ID)
	}
	event := `{"source":"shop","type":"order.created","data":{"id":1},"idempotencyKey":"e-1"}`
	var e apiError
	f.do(t, "POST", "/api/dispatch/events", event).want(t, http.StatusUnprocessableEntity).decode(t, &e)
	if e.Error.Code != dispatch.EUnprocessable || !strings.Contains(e.Error.Message, "matches 4 ACTIVE subscriptions") ||
		!strings.Contains(e.Error.Message, "at most 3") {
		t.Errorf("refusal %+v does not name the count and the cap", e.Error)
	}
	var list struct {
		TotalItems int `json:"totalItems"`
	}
	f.do(t, "GET", "/api/dispatch/events", "").want(t, http.StatusOK).decode(t, &list)
	if list.TotalItems != 0 || f.countJobs(t) != 0 {
		t.Fatalf("a refused event left %d events and %d jobs", list.TotalItems, f.countJobs(t))
	}

	f.do(t, "DELETE", "/api/dispatch/subscriptions/"+ids[0], "").want(t, http.StatusNoContent)
	var out eventOut
	f.do(t, "POST", "/api/dispatch/events", event).want(t, http.StatusCreated).decode(t, &out)
	if len(out.Jobs) != 3 || f.countJobs(t) != 3 {
		t.Fatalf("at the cap: %d jobs in the answer, %d stored; want 3", len(out.Jobs), f.countJobs(t))
	}
}
