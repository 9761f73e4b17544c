// Package sqstest gives each test its own FIFO queue on the bundled SQS
// emulator (or any SQS endpoint in DISPATCH_TEST_SQS). It fails, never
// skips, when the endpoint does not answer: run `make up`.
package sqstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/dispatchhq/dispatch/router/queue"
)

var envOnce sync.Once

// Endpoint is the SQS endpoint tests use.
func Endpoint() string {
	if v := os.Getenv("DISPATCH_TEST_SQS"); v != "" {
		return v
	}
	if v := os.Getenv("AWS_ENDPOINT_URL_SQS"); v != "" {
		return v
	}
	return "http://127.0.0.1:9324"
}

// SetEnv fills in the AWS variables a local endpoint needs, when unset. It
// runs once per test binary, before any test goes parallel.
func SetEnv() {
	envOnce.Do(func() {
		// The endpoint is pinned too: no test may ever reach real AWS.
		for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
			"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_SQS": Endpoint()} {
			if os.Getenv(k) == "" {
				os.Setenv(k, v)
			}
		}
	})
}

// Queue is a test's own FIFO queue.
type Queue struct {
	Name     string
	URL      string
	Endpoint string
	API      *sqs.Client
}

// Config returns the queue.Config that opens this queue.
func (q Queue) Config() queue.Config {
	return queue.Config{URL: q.URL, Endpoint: q.Endpoint}
}

// New creates a FIFO queue with the given visibility timeout for t and
// deletes it at cleanup.
func New(t testing.TB, visibility time.Duration) Queue {
	t.Helper()
	SetEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatalf("sqstest: aws config: %v", err)
	}
	api := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(Endpoint()) })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t-" + hex.EncodeToString(b) + ".fifo"
	out, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			"FifoQueue": "true", "ContentBasedDeduplication": "false",
			"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second)),
		},
	})
	if err != nil {
		t.Fatalf("sqstest: the SQS endpoint %s does not answer (run `make up`): %v", Endpoint(), err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		_, _ = api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	return Queue{Name: name, URL: url, Endpoint: Endpoint(), API: api}
}

// Open returns a queue.Queue for q.
func (q Queue) Open(t testing.TB) *queue.Queue {
	t.Helper()
	rq, err := queue.Open(context.Background(), q.Config())
	if err != nil {
		t.Fatalf("sqstest: open: %v", err)
	}
	return rq
}

// Attributes returns all of the queue's attributes.
func (q Queue) Attributes(ctx context.Context) (map[string]string, error) {
	out, err := q.API.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}
