package queue_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// A queue that does not exist is an error that keeps SQS's own words and
// says what to do: create it, or let dispatch create it
// (DISPATCH_QUEUE_CREATE, which creates only queues given by name).
func TestMissingQueueSaysWhatToDo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "missing-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".fifo"
	url := strings.TrimRight(sqstest.Endpoint(), "/") + "/000000000000/" + name
	for _, tc := range []struct {
		how  string
		cfg  queue.Config
		says string
	}{
		{"by name", queue.Config{Name: name}, "(create the queue, or set DISPATCH_QUEUE_CREATE=true to have dispatch create it)"},
		{"by URL", queue.Config{URL: url}, "(create the queue, or correct its URL; dispatch creates a queue only when given its name"},
	} {
		t.Run(tc.how, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Endpoint, cfg.CallTimeout = sqstest.Endpoint(), 5*time.Second
			q, err := queue.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, depthErr := q.Depth(ctx)
			_, receiveErr := q.Receive(ctx, 1, time.Second, 30*time.Second, "")
			_, sendErr := q.SendBatch(ctx, []queue.Entry{{Body: "1", GroupID: "g", DeduplicationID: "1"}})
			for op, err := range map[string]error{"Depth": depthErr, "Receive": receiveErr, "SendBatch": sendErr} {
				var missing *types.QueueDoesNotExist
				if !errors.As(err, &missing) {
					t.Fatalf("%s of a missing queue: %v, want QueueDoesNotExist", op, err)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.says) || !strings.Contains(msg, "NonExistentQueue") {
					t.Errorf("%s of a missing queue: %q, want SQS's error and %q", op, msg, tc.says)
				}
			}
		})
	}
}
