package queue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// DISPATCH_QUEUE_CREATE makes a FIFO queue in high-throughput mode whose
// visibility timeout covers a mediation; read back through the SDK from
// the endpoint (the stand-in, or any SQS in DISPATCH_TEST_SQS).
func TestCreatedQueueIsHighThroughputFIFO(t *testing.T) {
	sqstest.SetEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	api := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(sqstest.Endpoint()) })
	for _, tc := range []struct {
		name       string
		visibility time.Duration
		want       string
	}{
		{"default visibility", 0, "60"},
		{"the mediation timeout, rounded up", 95*time.Second + time.Millisecond, "96"},
		{"capped at 12 hours", 24 * time.Hour, "43200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			name := "create-" + hex.EncodeToString(b) + ".fifo"
			q, err := queue.Open(ctx, queue.Config{Name: name, Create: true, Endpoint: sqstest.Endpoint(), VisibilityTimeout: tc.visibility})
			if err != nil {
				t.Fatal(err)
			}
			url, err := q.URL(ctx)
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
			t.Cleanup(func() { _, _ = api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) })
			out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range map[string]string{
				"FifoQueue":                 "true",
				"ContentBasedDeduplication": "false",
				"DeduplicationScope":        "messageGroup",
				"FifoThroughputLimit":       "perMessageGroupId",
				"VisibilityTimeout":         tc.want,
				"MessageRetentionPeriod":    "1209600",
				"SqsManagedSseEnabled":      "true",
			} {
				if got := out.Attributes[k]; got != v {
					t.Errorf("created queue's %s = %q, want %q", k, got, v)
				}
			}
			if vis, err := q.VisibilityTimeout(ctx); err != nil || strconv.Itoa(int(vis/time.Second)) != tc.want {
				t.Errorf("VisibilityTimeout() = %v, %v; want %ss", vis, err, tc.want)
			}
		})
	}
}
