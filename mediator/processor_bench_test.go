package mediator_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
)

// BenchmarkProcess is the processing endpoint's work for one successful,
// signed delivery, against the real database and a loopback receiver:
// load and claim the job, sign, POST, record the attempt and the state.
// Deliveries run one after another, so no claim or finish shares a batch;
// allocs/op is the figure to watch, ns/op depends on the machine.
func BenchmarkProcess(b *testing.B) {
	s := setupProcessor(b, mediator.ProcessorConfig{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(rcv.Close)
	ctx := context.Background()
	creds := &dispatch.Credentials{BearerToken: "tok", SigningSecret: "whsec_secret",
		Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST", AllowedTargets: []string{rcv.URL}}
	if err := s.store.CreateCredentials(ctx, creds); err != nil {
		b.Fatal(err)
	}
	var ids []int64
	for len(ids) < b.N {
		batch := make([]*dispatch.Job, min(100, b.N-len(ids)))
		for i := range batch {
			batch[i] = &dispatch.Job{
				Source: "orders", Type: "order.created", TargetURL: rcv.URL, Protocol: dispatch.ProtocolHTTPWebhook,
				Payload: `{"orderId":42,"lines":[{"sku":"A-1","qty":2}]}`, PayloadContentType: "application/json",
				Status: dispatch.StatusPending, MaxRetries: 3, RetryStrategy: dispatch.RetryExponential,
				CredentialsID: creds.ID, Metadata: map[string]string{"tenant": "acme"},
			}
		}
		out, _, err := s.store.CreateJobs(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		for _, j := range out {
			ids = append(ids, j.ID)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d, err := s.proc.Process(ctx, dispatch.Pointer{ID: dispatch.FormatID(ids[i]), PoolCode: dispatch.DefaultPool, MediationType: "HTTP"})
		if err != nil || !d.Done || d.JobStatus != dispatch.StatusCompleted {
			b.Fatalf("Process: %+v, %v", d, err)
		}
	}
}
