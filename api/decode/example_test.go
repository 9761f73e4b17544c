package decode_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api/decode"
)

// A create-job body is validated as a whole: every bad field is reported at
// once, and a valid body gets the defaults filled in.
func ExampleCreateJob() {
	now := time.Date(2025, 10, 4, 12, 0, 0, 0, time.UTC)
	_, err := decode.CreateJob([]byte(`{
		"source": "orders",
		"targetUrl": "http://example.com/hook",
		"payload": "{}",
		"maxRetries": 0
	}`), dispatch.JobRules{}, now)
	var de *dispatch.Error
	if errors.As(err, &de) {
		for _, d := range de.Details {
			fmt.Printf("%s %s\n", d.Field, d.Message)
		}
	}

	j, _ := decode.CreateJob([]byte(`{"source":"orders","type":"order.created",
		"targetUrl":"https://example.com/hook","payload":"{}"}`), dispatch.JobRules{}, now)
	fmt.Println(j.Status, j.MaxRetries, j.RetryStrategy, j.Protocol, j.PayloadContentType)
	// Output:
	// type is required
	// targetUrl must use https
	// maxRetries must be from 1 to 50 (the total number of attempts)
	// PENDING 5 exponential HTTP_WEBHOOK application/json
}
