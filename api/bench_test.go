package api_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// BenchmarkCreateJobsBatch serves POST /api/dispatch/jobs/batch with 100
// jobs of dispatch-bench's shape, from reading the body to the written
// answer, over a real store: a batch's allocations (docs/benchmarks.md).
func BenchmarkCreateJobsBatch(b *testing.B) {
	st, _, _ := storetest.New(b, store.Options{NodeID: 1})
	st.HandOffTo(&countingNotifier{})
	cfg := api.Config{APITokens: []string{apiToken}, AdminToken: adminToken, InternalToken: internalToken,
		MaxPayload: 1 << 20, JobRules: dispatch.JobRules{AllowHTTP: true}, RotationGrace: time.Hour,
		Logger: slog.New(slog.DiscardHandler)}
	h := api.New(st, &fakeProcessor{}, cfg, prometheus.NewRegistry()).Handler()
	one := `{"source":"bench","type":"order.created","targetUrl":"http://127.0.0.1:9/hooks/orders",` +
		`"payload":"{\"order\":\"ord_123456789\",\"amount\":4200,\"currency\":\"EUR\",\"items\":[1,2,3]}",` +
		`"metadata":{"tenant":"acme"}}`
	body := []byte(`{"jobs":[` + strings.Repeat(one+",", 99) + one + `]}`)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/api/dispatch/jobs/batch", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+apiToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || bytes.Count(rec.Body.Bytes(), []byte(`"status":201`)) != 100 {
			b.Fatalf("not every job was created: %d %.300s", rec.Code, rec.Body.Bytes())
		}
	}
}
