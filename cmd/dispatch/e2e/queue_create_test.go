package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// With DISPATCH_QUEUE_CREATE the service creates its queue in FIFO
// high-throughput mode, with a visibility timeout that outlasts a
// mediation (DISPATCH_DELIVERY_TIMEOUT + 30s), and delivers through it.
func TestQueueCreateMakesAHighThroughputQueue(t *testing.T) {
	t.Parallel()
	name := randomName("created-") + ".fifo"
	in := start(t, "all", map[string]string{
		"DISPATCH_QUEUE_URL": "", "DISPATCH_QUEUE_NAME": name, "DISPATCH_QUEUE_CREATE": "true",
		"DISPATCH_DELIVERY_TIMEOUT": "5s",
	})
	api := in.queue.API
	ctx := context.Background()
	var url string
	eventually(t, 30*time.Second, func() bool {
		out, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err == nil {
			url = aws.ToString(out.QueueUrl)
		}
		return err == nil
	}, func() string { return "the queue " + name + " was not created" })
	t.Cleanup(func() { _, _ = api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) })
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"FifoQueue": "true", "DeduplicationScope": "messageGroup",
		"FifoThroughputLimit": "perMessageGroupId", "VisibilityTimeout": "35"} {
		if out.Attributes[k] != v {
			t.Errorf("the created queue's %s = %q, want %q", k, out.Attributes[k], v)
		}
	}
	rc := newReceiver(t, nil)
	job := in.createJob(jobBody(rc.URL, nil))
	in.waitStatus(job.ID, 30*time.Second, "COMPLETED")
}
