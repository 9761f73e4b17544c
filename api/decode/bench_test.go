package decode

import (
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// typicalJobBody is a create-job request as a producer typically sends it:
// a small JSON payload, one custom header, credentials and metadata.
const typicalJobBody = `{
  "source": "order-service",
  "type": "order.created",
  "groupId": "customer-cus_c9f0f895fb98ab91",
  "targetUrl": "https://hooks.example.com/dispatch/orders",
  "headers": {"X-Tenant": "acme"},
  "payload": "{\"orderId\":\"ord_8f14e45fceea167a\",\"customerId\":\"cus_c9f0f895fb98ab91\",\"amount\":99.99,\"currency\":\"EUR\",\"items\":3}",
  "credentialsId": "7311097302432047104",
  "metadata": {"tenant": "acme", "region": "eu-west-1"},
  "maxRetries": 5,
  "idempotencyKey": "order-ord_8f14e45fceea167a-created"
}`

func BenchmarkParseCreateJob(b *testing.B) {
	body := []byte(typicalJobBody)
	now := time.Date(2025, 10, 4, 12, 0, 0, 0, time.UTC)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CreateJob(body, dispatch.JobRules{}, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseCreateJobs100(b *testing.B) {
	body := []byte(`{"jobs":[` + strings.Repeat(typicalJobBody+",", 99) + typicalJobBody + `]}`)
	now := time.Date(2025, 10, 4, 12, 0, 0, 0, time.UTC)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		jobs, errs, err := CreateJobs(body, dispatch.JobRules{}, now, 100)
		if err != nil || len(jobs) != 100 || errs[99] != nil {
			b.Fatalf("ParseCreateJobs: %d jobs, err %v", len(jobs), err)
		}
	}
}
