package sqsfake_test

// Conformance tests for the SQS stand-in, written against the AWS SDK only.
// Each test names the behaviour real SQS documents, and the same suite runs
// against any endpoint:
//
//	SQS_CONFORMANCE_ENDPOINT=http://localhost:9324 go test ./localstack/sqsfake/   # e.g. ElasticMQ
//	SQS_CONFORMANCE_ENDPOINT=https://sqs.eu-west-1.amazonaws.com go test ./localstack/sqsfake/  # real SQS (AWS_* credentials)
//
// Without the variable each test starts its own stand-in on a loopback
// httptest server.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/dispatchhq/dispatch/localstack/sqsfake"
)

const endpointEnv = "SQS_CONFORMANCE_ENDPOINT"

type env struct {
	api      *sqs.Client
	endpoint string
	external bool
	clock    *clock // nil against an external endpoint
}

// clock is a test clock that runs with real time plus whatever the test
// skipped ahead.
type clock struct {
	mu   sync.Mutex
	skip time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skip)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.skip += d
	c.mu.Unlock()
}

func setup(t *testing.T) env {
	t.Helper()
	ctx := context.Background()
	if ep := os.Getenv(endpointEnv); ep != "" {
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			t.Fatalf("aws config: %v", err)
		}
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		return env{api: sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(ep) }), endpoint: ep, external: true}
	}
	c := &clock{}
	ts := httptest.NewUnstartedServer(sqsfake.New(sqsfake.Options{Now: c.Now}).Handler())
	ts.Config.ConnContext = sqsfake.ConnContext
	ts.Start()
	t.Cleanup(ts.Close)
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	if err != nil {
		t.Fatalf("aws config: %v", err)
	}
	api := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(ts.URL) })
	return env{api: api, endpoint: ts.URL, clock: c}
}

func uniqueName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// fifo creates a FIFO queue with the given extra attributes, deleted at cleanup.
func (e env) fifo(t *testing.T, attrs map[string]string) string {
	t.Helper()
	a := map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}
	for k, v := range attrs {
		a[k] = v
	}
	return e.create(t, uniqueName("conf")+".fifo", a)
}

func (e env) create(t *testing.T, name string, attrs map[string]string) string {
	t.Helper()
	out, err := e.api.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		_, _ = e.api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	return url
}

func (e env) send(t *testing.T, url, group, dedup, body string) *sqs.SendMessageOutput {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
	if group != "" {
		in.MessageGroupId = aws.String(group)
	}
	if dedup != "" {
		in.MessageDeduplicationId = aws.String(dedup)
	}
	out, err := e.api.SendMessage(context.Background(), in)
	if err != nil {
		t.Fatalf("SendMessage %q: %v", body, err)
	}
	return out
}

// receive receives up to max messages. Each call carries its own
// ReceiveRequestAttemptId, as a careful client of a FIFO queue does: when
// the SDK retries a receive whose answer it lost (seen on a loaded
// machine: the first try's messages stayed in flight and the retry found
// the group held), the retry gets the same messages.
func (e env) receive(t *testing.T, url string, max, wait int32) []types.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(wait+10)*time.Second)
	defer cancel()
	in := &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: max, WaitTimeSeconds: wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	}
	if strings.HasSuffix(url, ".fifo") {
		in.ReceiveRequestAttemptId = aws.String(uniqueName("attempt"))
	}
	out, err := e.api.ReceiveMessage(ctx, in)
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

func (e env) del(t *testing.T, url string, m types.Message) {
	t.Helper()
	if _, err := e.api.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
}

func (e env) setVisibility(t *testing.T, url string, m types.Message, seconds int32) {
	t.Helper()
	if _, err := e.api.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: seconds}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
}

// poll starts a 20 s long poll for up to 10 messages in the background; its
// messages arrive on the channel (nil after an error, which is reported).
// The poll is cancelled when the test ends.
func (e env) poll(t *testing.T, url string) <-chan []types.Message {
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan []types.Message, 1)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		out, err := e.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 20})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("ReceiveMessage: %v", err)
			}
			got <- nil
			return
		}
		got <- out.Messages
	}()
	return got
}

func bodies(msgs []types.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = aws.ToString(m.Body)
	}
	return out
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// SQS: "Long polling ... returns messages as soon as they become available"
// — one message ends a 20 s poll at once, whatever MaxNumberOfMessages is.
func TestLongPollReturnsOnFirstMessage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	start := time.Now()
	got := e.poll(t, url)
	e.send(t, url, "g", "d1", "hello")
	select {
	case msgs := <-got:
		if len(msgs) != 1 || aws.ToString(msgs[0].Body) != "hello" {
			t.Fatalf("long poll returned %v, want the one message", bodies(msgs))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("long poll with one message ready took %v; SQS returns it at once", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a 20 s long poll with MaxNumberOfMessages=10 did not return after one message was sent; SQS returns as soon as one is available")
	}
}

// SQS: a long poll with nothing to receive returns an empty answer at the
// end of WaitTimeSeconds, not before.
func TestLongPollWaitsWhenEmpty(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	start := time.Now()
	msgs := e.receive(t, url, 10, 1)
	if len(msgs) != 0 {
		t.Fatalf("empty queue returned %v", bodies(msgs))
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("an empty 1 s long poll returned after %v; SQS waits the full WaitTimeSeconds", d)
	}
}

// SQS FIFO: "messages are delivered in the order they are sent" within a
// group, and SequenceNumber "increases over time" per message.
func TestFIFOOrderAndSequenceNumbers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	var seqs []*big.Int
	var raw []string
	for i := range 25 {
		out := e.send(t, url, "g", fmt.Sprint("d", i), fmt.Sprint(i))
		n, ok := new(big.Int).SetString(aws.ToString(out.SequenceNumber), 10)
		if !ok {
			t.Fatalf("SendMessage on a FIFO queue returned SequenceNumber %q; SQS returns a decimal number", aws.ToString(out.SequenceNumber))
		}
		if len(seqs) > 0 && n.Cmp(seqs[len(seqs)-1]) <= 0 {
			t.Fatalf("SequenceNumber %v after %v: SQS sequence numbers increase", n, seqs[len(seqs)-1])
		}
		seqs = append(seqs, n)
		raw = append(raw, aws.ToString(out.SequenceNumber))
	}
	var order []string
	for len(order) < 25 {
		msgs := e.receive(t, url, 10, 1)
		if len(msgs) == 0 {
			t.Fatalf("queue ran dry after %d of 25 messages", len(order))
		}
		for _, m := range msgs {
			order = append(order, aws.ToString(m.Body))
			if got, want := m.Attributes["SequenceNumber"], raw[len(order)-1]; got != want {
				t.Errorf("message %s has SequenceNumber %s, SendMessage said %s", aws.ToString(m.Body), got, want)
			}
			e.del(t, url, m)
		}
	}
	for i, b := range order {
		if b != strconv.Itoa(i) {
			t.Fatalf("received %v; SQS FIFO delivers a group in send order", order)
		}
	}
}

// SQS FIFO: "you can't receive messages with the same message group ID
// while one of them is in flight"; other groups are not held.
func TestFIFOGroupHeldWhileInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	e.send(t, url, "a", "a1", "a1")
	e.send(t, url, "a", "a2", "a2")
	e.send(t, url, "b", "b1", "b1")

	first := e.receive(t, url, 1, 1)
	if len(first) != 1 || aws.ToString(first[0].Body) != "a1" {
		t.Fatalf("first receive got %v, want [a1]", bodies(first))
	}
	next := e.receive(t, url, 10, 1)
	if fmt.Sprint(bodies(next)) != "[b1]" {
		t.Fatalf("while a1 is in flight a receive got %v, want only [b1]: SQS holds group a", bodies(next))
	}
	e.del(t, url, next[0])
	if again := e.receive(t, url, 10, 1); len(again) != 0 {
		t.Fatalf("group a is still held by a1 but a receive got %v", bodies(again))
	}
	e.del(t, url, first[0])
	last := e.receive(t, url, 10, 1)
	if fmt.Sprint(bodies(last)) != "[a2]" {
		t.Fatalf("after a1 was deleted a receive got %v, want [a2]", bodies(last))
	}
}

// SQS FIFO: a receive returns "as many messages with the same message group
// ID as possible", in order; a message whose visibility is changed to 0
// comes back before the rest of its group, and the group stays held while
// any of its messages is in flight.
func TestFIFOVisibilityChangeKeepsOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	for _, b := range []string{"m1", "m2", "m3"} {
		e.send(t, url, "g", b, b)
	}
	one := e.receive(t, url, 1, 1)
	if fmt.Sprint(bodies(one)) != "[m1]" {
		t.Fatalf("got %v, want [m1]", bodies(one))
	}
	e.setVisibility(t, url, one[0], 0)
	all := e.receive(t, url, 10, 1)
	if fmt.Sprint(bodies(all)) != "[m1 m2 m3]" {
		t.Fatalf("after m1 was released a receive got %v, want [m1 m2 m3]: the released message comes back first", bodies(all))
	}
	if rc := all[0].Attributes["ApproximateReceiveCount"]; rc != "2" {
		t.Errorf("m1's ApproximateReceiveCount = %s, want 2", rc)
	}
	// Release the later two; m1 still in flight holds the group.
	e.setVisibility(t, url, all[2], 0)
	e.setVisibility(t, url, all[1], 0)
	if held := e.receive(t, url, 10, 1); len(held) != 0 {
		t.Fatalf("m1 is in flight but a receive got %v: SQS holds the group", bodies(held))
	}
	e.setVisibility(t, url, all[0], 0)
	again := e.receive(t, url, 10, 1)
	if fmt.Sprint(bodies(again)) != "[m1 m2 m3]" {
		t.Fatalf("after releasing m3, m2, then m1 a receive got %v, want [m1 m2 m3]", bodies(again))
	}
}

// SQS: "the total visibility timeout of a message is 12 hours maximum",
// counted from its receive; a change asking for more than is left is
// refused ("Total VisibilityTimeout for the message is beyond the limit"),
// not cut short. What is left is still granted.
func TestVisibilityEndsWithin12HoursOfTheReceive(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	e.send(t, url, "g", "m1", "m1")
	m := e.receive(t, url, 1, 1)
	if len(m) != 1 {
		t.Fatalf("received %d messages, want 1", len(m))
	}
	e.setVisibility(t, url, m[0], 7200) // still in flight an hour on
	if e.clock != nil {
		e.clock.Advance(time.Hour)
	} else {
		time.Sleep(2 * time.Second) // real time must pass against an external endpoint
	}
	_, err := e.api.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: m[0].ReceiptHandle, VisibilityTimeout: 43200})
	if code := errorCode(err); code != "InvalidParameterValue" {
		t.Fatalf("a change to 12 h after part of it had passed: %v (code %q), want InvalidParameterValue", err, code)
	}
	e.setVisibility(t, url, m[0], 3600) // well within what is left
}

// SQS: a message not deleted within its visibility timeout is received
// again, with a higher ApproximateReceiveCount and a new receipt handle.
func TestVisibilityTimeoutRedelivers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, map[string]string{"VisibilityTimeout": "1"})
	e.send(t, url, "g", "d", "again")
	first := e.receive(t, url, 1, 1)
	if len(first) != 1 || first[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("first receive: %v", first)
	}
	deadline := time.Now().Add(10 * time.Second)
	var second []types.Message
	for len(second) == 0 && time.Now().Before(deadline) {
		second = e.receive(t, url, 1, 2)
	}
	if len(second) != 1 {
		t.Fatal("a message whose 1 s visibility timeout ran out was not received again within 10 s")
	}
	if rc := second[0].Attributes["ApproximateReceiveCount"]; rc != "2" {
		t.Errorf("ApproximateReceiveCount = %s, want 2", rc)
	}
	if aws.ToString(second[0].ReceiptHandle) == aws.ToString(first[0].ReceiptHandle) {
		t.Error("the second receive reused the first receipt handle; SQS issues a new one per receive")
	}
	if aws.ToString(second[0].MessageId) != aws.ToString(first[0].MessageId) {
		t.Error("MessageId changed across receives; SQS keeps it")
	}
	e.del(t, url, second[0])
	if left := e.receive(t, url, 1, 1); len(left) != 0 {
		t.Fatalf("deleted message came back: %v", bodies(left))
	}
}

// SQS: a long poll already waiting receives a message as soon as it turns
// visible again after ChangeMessageVisibility shortened its timeout — not
// at the end of the poll's wait. (A retry scheduled for 1 s must not wait
// out a consumer's 20 s poll.)
func TestWaitingPollSeesMessageReleasedWithDelay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, map[string]string{"VisibilityTimeout": "60"})
	e.send(t, url, "g", "d", "retry me")
	first := e.receive(t, url, 1, 1)
	if len(first) != 1 {
		t.Fatalf("receive: %v", bodies(first))
	}
	got := e.poll(t, url)
	// Let the poll start waiting (nothing is visible: the message is in
	// flight for 60 s), then ask for the message back in 1 s.
	if msgs := e.receive(t, url, 1, 1); len(msgs) != 0 {
		t.Fatalf("in-flight message received again: %v", bodies(msgs))
	}
	released := time.Now()
	e.setVisibility(t, url, first[0], 1)
	select {
	case msgs := <-got:
		if len(msgs) != 1 {
			t.Fatalf("the waiting poll returned %v, want the released message", bodies(msgs))
		}
		if d := time.Since(released); d > 5*time.Second {
			t.Errorf("the waiting poll got the message %v after it was released for 1 s", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a waiting 20 s poll did not receive a message released with a 1 s visibility timeout within 15 s")
	}
}

// SQS: a per-receive VisibilityTimeout overrides the queue's, and
// ChangeMessageVisibility extends an in-flight message.
func TestReceiveVisibilityOverride(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, map[string]string{"VisibilityTimeout": "60"})
	e.send(t, url, "g", "d", "short")
	out, err := e.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, VisibilityTimeout: 1})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v %v", out, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var again []types.Message
	for len(again) == 0 && time.Now().Before(deadline) {
		again = e.receive(t, url, 1, 2)
	}
	if len(again) != 1 {
		t.Fatal("a message received with VisibilityTimeout=1 was not visible again within 10 s (queue default is 60 s)")
	}
	e.setVisibility(t, url, again[0], 60)
	if held := e.receive(t, url, 1, 2); len(held) != 0 {
		t.Fatal("a message whose visibility was extended to 60 s came back within 2 s")
	}
}

// SQS FIFO: "If a message with a particular message deduplication ID is
// sent successfully, any messages sent with the same message deduplication
// ID are accepted successfully but aren't delivered during the 5-minute
// deduplication interval" — also after the first was deleted.
func TestFIFODeduplication(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	a := e.send(t, url, "g", "same", "first")
	b := e.send(t, url, "g", "same", "second")
	if aws.ToString(a.MessageId) != aws.ToString(b.MessageId) {
		t.Errorf("duplicate send returned MessageId %s, the original was %s", aws.ToString(b.MessageId), aws.ToString(a.MessageId))
	}
	msgs := e.receive(t, url, 10, 1)
	if fmt.Sprint(bodies(msgs)) != "[first]" {
		t.Fatalf("received %v, want only [first]", bodies(msgs))
	}
	e.del(t, url, msgs[0])
	e.send(t, url, "g", "same", "third")
	if left := e.receive(t, url, 10, 1); len(left) != 0 {
		t.Fatalf("a deduplication id reused after its message was deleted delivered %v; SQS remembers it for 5 minutes", bodies(left))
	}

	if e.clock == nil {
		t.Log("the 5-minute window's end is checked only in process (it needs the stand-in's clock)")
		return
	}
	e.clock.Advance(5*time.Minute + time.Second)
	e.send(t, url, "g", "same", "fourth")
	if after := e.receive(t, url, 10, 1); fmt.Sprint(bodies(after)) != "[fourth]" {
		t.Fatalf("5 minutes later the same deduplication id delivered %v, want [fourth]", bodies(after))
	}
}

// SQS FIFO with ContentBasedDeduplication: the SHA-256 of the body is the
// deduplication id.
func TestFIFOContentBasedDeduplication(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, map[string]string{"ContentBasedDeduplication": "true"})
	e.send(t, url, "g", "", "same body")
	e.send(t, url, "g", "", "same body")
	e.send(t, url, "g", "", "other body")
	var got []string
	for {
		msgs := e.receive(t, url, 10, 1)
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			got = append(got, aws.ToString(m.Body))
			e.del(t, url, m)
		}
	}
	if fmt.Sprint(got) != "[same body other body]" {
		t.Fatalf("received %v, want [same body other body]", got)
	}
	// Without content-based deduplication a FIFO send needs an id.
	plain := e.fifo(t, nil)
	_, err := e.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(plain),
		MessageBody: aws.String("x"), MessageGroupId: aws.String("g")})
	if code := errorCode(err); code != "InvalidParameterValue" {
		t.Fatalf("FIFO send without MessageDeduplicationId: error %v (code %q), want InvalidParameterValue", err, code)
	}
}

// SQS: MessageSystemAttributeNames (and the deprecated AttributeNames)
// select the system attributes a receive returns.
func TestMessageSystemAttributeNames(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	e.send(t, url, "grp", "dd", "x")
	out, err := e.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
	})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v %v", out, err)
	}
	a := out.Messages[0].Attributes
	if a["MessageGroupId"] != "grp" {
		t.Errorf("MessageGroupId = %q, want grp", a["MessageGroupId"])
	}
	if _, ok := a["SentTimestamp"]; ok {
		t.Errorf("asked for MessageGroupId only, got %v", a)
	}
	e.setVisibility(t, url, out.Messages[0], 0)

	out, err = e.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v %v", out, err)
	}
	a = out.Messages[0].Attributes
	for _, k := range []string{"SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
		"SenderId", "SequenceNumber", "MessageDeduplicationId", "MessageGroupId"} {
		if a[k] == "" {
			t.Errorf("All did not return %s (got %v)", k, a)
		}
	}
	if a["ApproximateReceiveCount"] != "2" || a["MessageDeduplicationId"] != "dd" {
		t.Errorf("attributes %v: want ApproximateReceiveCount 2 and MessageDeduplicationId dd", a)
	}
	e.setVisibility(t, url, out.Messages[0], 0)

	out, err = e.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1,
		AttributeNames: []types.QueueAttributeName{"ApproximateReceiveCount"}, //nolint:staticcheck // the deprecated field is what is tested
	})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v %v", out, err)
	}
	if rc := out.Messages[0].Attributes["ApproximateReceiveCount"]; rc != "3" {
		t.Errorf("deprecated AttributeNames: ApproximateReceiveCount = %q, want 3", rc)
	}
}

// SQS: message attributes round-trip, with MD5OfMessageAttributes as SQS
// computes it (the SDK checks body MD5s itself).
func TestMessageAttributes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	sent, err := e.api.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String("with attrs"), MessageGroupId: aws.String("g"),
		MessageDeduplicationId: aws.String("d"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"kind":  {DataType: aws.String("String"), StringValue: aws.String("order")},
			"count": {DataType: aws.String("Number"), StringValue: aws.String("3")},
			"raw":   {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
		},
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	out, err := e.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v %v", out, err)
	}
	m := out.Messages[0]
	if aws.ToString(m.MessageAttributes["kind"].StringValue) != "order" || !bytes.Equal(m.MessageAttributes["raw"].BinaryValue, []byte{0, 1, 2}) {
		t.Errorf("attributes did not round-trip: %+v", m.MessageAttributes)
	}
	if aws.ToString(m.MD5OfMessageAttributes) != aws.ToString(sent.MD5OfMessageAttributes) || aws.ToString(sent.MD5OfMessageAttributes) == "" {
		t.Errorf("MD5OfMessageAttributes: send %q, receive %q", aws.ToString(sent.MD5OfMessageAttributes), aws.ToString(m.MD5OfMessageAttributes))
	}
}

// SQS: a batch send carries each entry's message attributes, and a
// receive that names attributes gets only those (the router asks for
// traceparent and tracestate), with their MD5 as SQS computes it.
func TestBatchMessageAttributesByName(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	attr := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sent, err := e.api.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url),
		Entries: []types.SendMessageBatchRequestEntry{
			{Id: aws.String("0"), MessageBody: aws.String("traced"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d0"),
				MessageAttributes: map[string]types.MessageAttributeValue{"traceparent": attr(parent), "tracestate": attr("k=v"), "other": attr("x")}},
			{Id: aws.String("1"), MessageBody: aws.String("plain"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d1")},
		}})
	if err != nil || len(sent.Successful) != 2 {
		t.Fatalf("send batch: %+v %v", sent, err)
	}
	out, err := e.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageAttributeNames: []string{"traceparent", "tracestate"}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("receive: %+v %v", out, err)
	}
	for _, m := range out.Messages {
		switch aws.ToString(m.Body) {
		case "traced":
			if len(m.MessageAttributes) != 2 || aws.ToString(m.MessageAttributes["traceparent"].StringValue) != parent ||
				aws.ToString(m.MessageAttributes["tracestate"].StringValue) != "k=v" {
				t.Errorf("traced message's attributes: %+v, want traceparent and tracestate only", m.MessageAttributes)
			}
			if aws.ToString(m.MD5OfMessageAttributes) == "" {
				t.Errorf("no MD5OfMessageAttributes on the traced message")
			}
		case "plain":
			if len(m.MessageAttributes) != 0 {
				t.Errorf("a message sent without attributes came with %+v", m.MessageAttributes)
			}
		}
	}
}

// SQS batch calls: up to 10 entries, distinct ids, per-entry results.
func TestBatchCalls(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, map[string]string{"VisibilityTimeout": "60"})
	ctx := context.Background()
	entries := func(n int, prefix string) []types.SendMessageBatchRequestEntry {
		var out []types.SendMessageBatchRequestEntry
		for i := range n {
			out = append(out, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint("e", i)),
				MessageBody: aws.String(fmt.Sprint(prefix, i)), MessageGroupId: aws.String(fmt.Sprint("g", i)),
				MessageDeduplicationId: aws.String(fmt.Sprint(prefix, i))})
		}
		return out
	}
	out, err := e.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries(10, "m")})
	if err != nil || len(out.Successful) != 10 || len(out.Failed) != 0 {
		t.Fatalf("SendMessageBatch of 10: %v, %d ok, %d failed", err, len(out.Successful), len(out.Failed))
	}
	_, err = e.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries(11, "x")})
	if code := errorCode(err); code != "AWS.SimpleQueueService.TooManyEntriesInBatchRequest" && code != "TooManyEntriesInBatchRequest" {
		t.Errorf("11 entries: %v (code %q), want TooManyEntriesInBatchRequest", err, code)
	}
	dup := entries(2, "y")
	dup[1].Id = dup[0].Id
	_, err = e.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: dup})
	if code := errorCode(err); code != "AWS.SimpleQueueService.BatchEntryIdsNotDistinct" && code != "BatchEntryIdsNotDistinct" {
		t.Errorf("repeated ids: %v (code %q), want BatchEntryIdsNotDistinct", err, code)
	}
	// A bad entry fails alone.
	mixed := entries(2, "z")
	mixed[1].MessageGroupId = nil
	out, err = e.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: mixed})
	if err != nil || len(out.Successful) != 1 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "e1" || !out.Failed[0].SenderFault {
		t.Errorf("one entry without a group: %v %+v", err, out)
	}

	var got []types.Message
	for len(got) < 11 {
		msgs := e.receive(t, url, 10, 1)
		if len(msgs) == 0 {
			break
		}
		got = append(got, msgs...)
	}
	if len(got) != 11 {
		t.Fatalf("received %d messages, want 11", len(got))
	}
	var vis []types.ChangeMessageVisibilityBatchRequestEntry
	var dels []types.DeleteMessageBatchRequestEntry
	for i, m := range got[:10] {
		vis = append(vis, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(fmt.Sprint("v", i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 120})
		dels = append(dels, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint("d", i)), ReceiptHandle: m.ReceiptHandle})
	}
	vis[9].ReceiptHandle = aws.String("not-a-receipt-handle")
	cv, err := e.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: vis})
	if err != nil || len(cv.Successful) != 9 || len(cv.Failed) != 1 || aws.ToString(cv.Failed[0].Id) != "v9" {
		t.Errorf("ChangeMessageVisibilityBatch with one bad handle: %v %+v", err, cv)
	}
	dm, err := e.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: dels})
	if err != nil || len(dm.Successful) != 10 || len(dm.Failed) != 0 {
		t.Fatalf("DeleteMessageBatch: %v %+v", err, dm)
	}
	attrs := e.attributes(t, url)
	if attrs["ApproximateNumberOfMessages"] != "0" || attrs["ApproximateNumberOfMessagesNotVisible"] != "1" {
		t.Errorf("after deleting 10 of 11 (1 in flight): %v", attrs)
	}
}

func (e env) attributes(t *testing.T, url string) map[string]string {
	t.Helper()
	out, err := e.api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	return out.Attributes
}

// SQS: GetQueueAttributes reports the queue's settings and approximate
// counts of visible and in-flight messages.
func TestQueueAttributes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, map[string]string{"VisibilityTimeout": "45"})
	for i := range 5 {
		e.send(t, url, fmt.Sprint("g", i), fmt.Sprint(i), "x")
	}
	e.receive(t, url, 2, 1)
	a := e.attributes(t, url)
	want := map[string]string{"VisibilityTimeout": "45", "FifoQueue": "true", "ContentBasedDeduplication": "false",
		"ApproximateNumberOfMessages": "3", "ApproximateNumberOfMessagesNotVisible": "2", "ApproximateNumberOfMessagesDelayed": "0"}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, a[k], v, a)
		}
	}
	if a["QueueArn"] == "" || a["CreatedTimestamp"] == "" {
		t.Errorf("QueueArn/CreatedTimestamp missing: %v", a)
	}
	one, err := e.api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
	if err != nil || len(one.Attributes) != 1 || one.Attributes["VisibilityTimeout"] != "45" {
		t.Errorf("asking for VisibilityTimeout alone: %v %v", one, err)
	}
	if _, err := e.api.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{
		QueueUrl: aws.String(url), Attributes: map[string]string{"VisibilityTimeout": "7"}}); err != nil {
		t.Fatalf("SetQueueAttributes: %v", err)
	}
	if v := e.attributes(t, url)["VisibilityTimeout"]; v != "7" {
		t.Errorf("VisibilityTimeout after SetQueueAttributes = %q, want 7", v)
	}
	_, err = e.api.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{
		QueueUrl: aws.String(url), Attributes: map[string]string{"VisibilityTimeout": "50000"}})
	if code := errorCode(err); code != "InvalidAttributeValue" && code != "InvalidParameterValue" {
		t.Errorf("VisibilityTimeout 50000: %v (code %q), want an invalid-value error", err, code)
	}
}

// SQS queue lifecycle: CreateQueue is idempotent for the same attributes
// and refuses different ones; GetQueueUrl, ListQueues, PurgeQueue and
// DeleteQueue; a deleted queue answers QueueDoesNotExist.
func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	name := uniqueName("life") + ".fifo"
	url := e.create(t, name, map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"})
	again, err := e.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}})
	if err != nil || aws.ToString(again.QueueUrl) != url {
		t.Errorf("CreateQueue again with the same attributes: %v %v, want %s", again, err, url)
	}
	_, err = e.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": "31"}})
	var exists *types.QueueNameExists
	if !errors.As(err, &exists) {
		t.Errorf("CreateQueue with a different VisibilityTimeout: %v, want QueueNameExists", err)
	}
	got, err := e.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil || aws.ToString(got.QueueUrl) != url {
		t.Errorf("GetQueueUrl: %v %v", got, err)
	}
	list, err := e.api.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(name[:len(name)-5])})
	if err != nil || len(list.QueueUrls) != 1 || list.QueueUrls[0] != url {
		t.Errorf("ListQueues by prefix: %v %v", list, err)
	}
	_, err = e.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("bad name!")})
	if code := errorCode(err); code != "InvalidParameterValue" {
		t.Errorf("CreateQueue with a bad name: %v (code %q)", err, code)
	}
	_, err = e.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(uniqueName("nofifo") + ".fifo")})
	if code := errorCode(err); code != "InvalidParameterValue" {
		t.Errorf("a .fifo name without FifoQueue=true: %v (code %q)", err, code)
	}

	for i := range 3 {
		e.send(t, url, "g", fmt.Sprint(i), "x")
	}
	if _, err := e.api.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatalf("PurgeQueue: %v", err)
	}
	if msgs := e.receive(t, url, 10, 1); len(msgs) != 0 {
		t.Errorf("purged queue returned %v", bodies(msgs))
	}

	if _, err := e.api.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	var missingQ *types.QueueDoesNotExist
	if _, err := e.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)}); !errors.As(err, &missingQ) {
		t.Errorf("GetQueueUrl of a deleted queue: %v, want QueueDoesNotExist", err)
	}
	_, err = e.api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("z")})
	if !errors.As(err, &missingQ) {
		t.Errorf("SendMessage to a deleted queue: %v, want QueueDoesNotExist", err)
	}
}

// SQS: a long poll on a queue deleted meanwhile ends with QueueDoesNotExist
// (or empty), never hangs past its wait.
func TestLongPollOnDeletedQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if e.external {
		t.Log("real SQS may answer this poll empty; only the bound on its duration is checked")
	}
	ctx := context.Background()
	url := e.fifo(t, nil)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := e.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 5})
		done <- err
	}()
	if _, err := e.api.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	select {
	case <-done:
		if d := time.Since(start); d > 7*time.Second {
			t.Errorf("poll took %v", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a long poll on a deleted queue did not end within 15 s")
	}
}

// SQS standard queues: no group holds anything back, and DelaySeconds
// keeps a message invisible for that long.
func TestStandardQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	url := e.create(t, uniqueName("std"), map[string]string{"VisibilityTimeout": "30"})
	for i := range 3 {
		e.send(t, url, "", "", fmt.Sprint("s", i))
	}
	msgs := e.receive(t, url, 10, 1)
	for len(msgs) < 3 {
		more := e.receive(t, url, 10, 1)
		if len(more) == 0 {
			break
		}
		msgs = append(msgs, more...)
	}
	if len(msgs) != 3 {
		t.Fatalf("standard queue: received %d of 3", len(msgs))
	}
	_, err := e.api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("later"), DelaySeconds: 2})
	if err != nil {
		t.Fatalf("send with delay: %v", err)
	}
	if early := e.receive(t, url, 10, 0); len(early) != 0 {
		t.Fatalf("a message with DelaySeconds=2 was received at once: %v", bodies(early))
	}
	if d := e.attributes(t, url)["ApproximateNumberOfMessagesDelayed"]; d != "1" {
		t.Errorf("ApproximateNumberOfMessagesDelayed = %q, want 1", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	var late []types.Message
	for len(late) == 0 && time.Now().Before(deadline) {
		late = e.receive(t, url, 10, 2)
	}
	if fmt.Sprint(bodies(late)) != "[later]" {
		t.Fatalf("delayed message: got %v", bodies(late))
	}
}

// SQS error shapes of the JSON protocol reach the SDK as typed errors or
// codes.
func TestErrorShapes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	url := e.fifo(t, nil)
	_, err := e.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 11})
	if code := errorCode(err); code != "InvalidParameterValue" {
		t.Errorf("MaxNumberOfMessages=11: %v (code %q), want InvalidParameterValue", err, code)
	}
	_, err = e.api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")})
	if code := errorCode(err); code != "MissingParameter" {
		t.Errorf("FIFO send without MessageGroupId: %v (code %q), want MissingParameter", err, code)
	}
	_, err = e.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("garbage")})
	var badHandle *types.ReceiptHandleIsInvalid
	var status interface{ HTTPStatusCode() int }
	if !errors.As(err, &badHandle) || !errors.As(err, &status) || status.HTTPStatusCode() != http.StatusNotFound {
		t.Errorf("DeleteMessage with a garbage handle: %v, want ReceiptHandleIsInvalid with SQS's 404", err)
	}
	_, err = e.api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("bad \x01 char"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d")})
	var contents *types.InvalidMessageContents
	if !errors.As(err, &contents) {
		t.Errorf("a body with U+0001: %v, want InvalidMessageContents", err)
	}
	var missingQ *types.QueueDoesNotExist
	_, err = e.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url + "-nope")})
	if !errors.As(err, &missingQ) {
		t.Errorf("GetQueueAttributes of a missing queue: %v, want QueueDoesNotExist", err)
	}
	// A message is released only while in flight.
	e.send(t, url, "g", "d1", "x")
	m := e.receive(t, url, 1, 1)
	e.setVisibility(t, url, m[0], 0)
	_, err = e.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m[0].ReceiptHandle, VisibilityTimeout: 10})
	var notInflight *types.MessageNotInflight
	if !errors.As(err, &notInflight) {
		t.Errorf("ChangeMessageVisibility of a visible message: %v, want MessageNotInflight", err)
	}
}

// The stand-in answers any malformed request with a 400 and carries on
// (real SQS does too). These requests are raw HTTP: the SDK cannot send them.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if e.external {
		t.Log("raw malformed requests go to the external endpoint too")
	}
	cases := []struct {
		name, target, body, method string
	}{
		{"no X-Amz-Target", "", `{"QueueName":"x"}`, "POST"},
		{"unknown operation", "AmazonSQS.Explode", `{}`, "POST"},
		{"not JSON", "AmazonSQS.CreateQueue", `{{{`, "POST"},
		{"wrong types", "AmazonSQS.ReceiveMessage", `{"QueueUrl": 5, "MaxNumberOfMessages": "ten"}`, "POST"},
		{"null body", "AmazonSQS.SendMessageBatch", `null`, "POST"},
		{"array body", "AmazonSQS.DeleteMessageBatch", `[1,2,3]`, "POST"},
		{"empty body", "AmazonSQS.SendMessage", ``, "POST"},
		{"entries of nulls", "AmazonSQS.SendMessageBatch", `{"QueueUrl":"http://x/0/q.fifo","Entries":[null,null]}`, "POST"},
		{"GET", "AmazonSQS.ListQueues", ``, "GET"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, e.endpoint, bytes.NewBufferString(c.body))
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		if c.target != "" {
			req.Header.Set("X-Amz-Target", c.target)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: the endpoint stopped answering: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("%s: status %d, want a 4xx", c.name, resp.StatusCode)
		}
	}
	if _, err := e.api.ListQueues(context.Background(), &sqs.ListQueuesInput{}); err != nil {
		t.Fatalf("after malformed requests the endpoint no longer serves ListQueues: %v", err)
	}
}

// No artificial cap: SQS queues hold any number of messages. The
// npm emulator this replaced failed every receive past 20,000.
func TestManyMessages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	n := 30000
	if v, err := strconv.Atoi(os.Getenv("SQS_CONFORMANCE_MANY")); err == nil && v > 0 {
		n = v
	}
	url := e.fifo(t, map[string]string{"VisibilityTimeout": "300"})
	ctx := context.Background()
	var sent atomic.Int64
	var wg sync.WaitGroup
	batches := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var entries []types.SendMessageBatchRequestEntry
				for i := b; i < min(b+10, n); i++ {
					entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i - b)),
						MessageBody: aws.String(strconv.Itoa(i)), MessageGroupId: aws.String(fmt.Sprint("g", i%500)),
						MessageDeduplicationId: aws.String(strconv.Itoa(i))})
				}
				out, err := e.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err != nil || len(out.Failed) > 0 {
					t.Errorf("send batch at %d: %v %v", b, err, out)
					return
				}
				sent.Add(int64(len(out.Successful)))
			}
		}()
	}
	for b := 0; b < n; b += 10 {
		batches <- b
	}
	close(batches)
	wg.Wait()
	if sent.Load() != int64(n) {
		t.Fatalf("sent %d of %d", sent.Load(), n)
	}
	if v := e.attributes(t, url)["ApproximateNumberOfMessages"]; v != strconv.Itoa(n) {
		t.Errorf("ApproximateNumberOfMessages = %s, want %d", v, n)
	}
	got := 0
	for range 20 {
		msgs := e.receive(t, url, 10, 1)
		if len(msgs) == 0 {
			t.Fatalf("receive with %d messages queued returned nothing", n)
		}
		got += len(msgs)
	}
	if got < 20 {
		t.Fatalf("20 receives with %d queued returned %d messages", n, got)
	}
}

// SQS FIFO: "If a networking issue occurs after a ReceiveMessage action, and
// instead of a response you receive a generic error, it is possible to
// retry the same action with an identical ReceiveRequestAttemptId to
// retrieve the same set of messages, even if their visibility timeout has
// not yet expired." The retry returns the same messages and receipt
// handles; once one of them was deleted (or its visibility changed) the id
// is refused with InvalidParameterValue.
func TestReceiveRequestAttemptIdRetrievesALostAnswer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.fifo(t, nil)
	for _, b := range []string{"m1", "m2", "m3"} {
		e.send(t, url, "g", b, b)
	}
	e.send(t, url, "h", "h1", "h1")
	receive := func(attempt string, max int32) ([]types.Message, error) {
		out, err := e.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: max, WaitTimeSeconds: 1,
			ReceiveRequestAttemptId: aws.String(attempt),
		})
		if err != nil {
			return nil, err
		}
		return out.Messages, nil
	}
	first, err := receive("attempt-1", 3)
	if err != nil || fmt.Sprint(bodies(first)) != "[m1 m2 m3]" {
		t.Fatalf("first receive got %v, %v; want [m1 m2 m3]", bodies(first), err)
	}
	// The answer was "lost": retry with the same id.
	again, err := receive("attempt-1", 3)
	if err != nil {
		t.Fatalf("retry with the same ReceiveRequestAttemptId: %v", err)
	}
	if fmt.Sprint(bodies(again)) != "[m1 m2 m3]" {
		t.Fatalf("retry got %v, want the same [m1 m2 m3]", bodies(again))
	}
	for i := range first {
		if aws.ToString(again[i].ReceiptHandle) != aws.ToString(first[i].ReceiptHandle) {
			t.Errorf("retry gave %s another receipt handle", aws.ToString(again[i].Body))
		}
	}
	// A new attempt id is a new receive: group g is in flight, h1 is next.
	other, err := receive("attempt-2", 10)
	if err != nil || fmt.Sprint(bodies(other)) != "[h1]" {
		t.Fatalf("a receive with another attempt id got %v, %v; want [h1]", bodies(other), err)
	}
	// Once a message of the attempt is deleted, the attempt cannot be retried.
	e.del(t, url, first[0])
	// The router knows this refusal by its code and by the message naming
	// the parameter (router/queue, staleAttempt): both are checked here,
	// so that a change of SQS's wording shows against the real service.
	if _, err := receive("attempt-1", 3); errorCode(err) != "InvalidParameterValue" || !strings.Contains(err.Error(), "ReceiveRequestAttemptId") {
		t.Fatalf("retry after a delete: err %v, want InvalidParameterValue naming ReceiveRequestAttemptId", err)
	}
}

// On a FIFO queue a receipt handle expires with its visibility: deleting
// with it then fails and the message stays, to be received again (whose new
// handle deletes it). The stand-in once deleted it: a router deleting after
// its hold had lapsed passed the tests and would fail against SQS.
func TestFIFODeleteWithAnExpiredHandleFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	url := e.fifo(t, map[string]string{"VisibilityTimeout": "1"})
	e.send(t, url, "g", "d1", "x")
	first := e.receive(t, url, 1, 1)
	if len(first) != 1 {
		t.Fatalf("received %d messages, want 1", len(first))
	}
	if e.clock != nil {
		e.clock.Advance(2 * time.Second)
	} else {
		time.Sleep(2 * time.Second) // against a real endpoint: the visibility must end
	}
	_, err := e.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle})
	if code := errorCode(err); code != "InvalidParameterValue" {
		t.Errorf("a delete with the handle of a lapsed visibility: %v (code %q), want InvalidParameterValue", err, code)
	}
	again := e.receive(t, url, 1, 1)
	if len(again) != 1 || aws.ToString(again[0].MessageId) != aws.ToString(first[0].MessageId) {
		t.Fatalf("after the failed delete received %v, want the message again", bodies(again))
	}
	if _, err := e.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle}); errorCode(err) != "InvalidParameterValue" {
		t.Errorf("a delete with the first handle after the message was received again: %v, want InvalidParameterValue", err)
	}
	e.del(t, url, again[0])
	if left := e.receive(t, url, 1, 1); len(left) != 0 {
		t.Errorf("deleted with its current handle, the message came back: %v", bodies(left))
	}
}
