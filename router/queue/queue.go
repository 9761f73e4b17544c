// Package queue is the SQS FIFO queue client the publisher sends to and the
// router receives from: sends, receives, deletes and visibility changes in
// batches, the queue's depth, and the high-throughput FIFO queue it creates.
package queue

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// Config names the queue.
type Config struct {
	URL    string // used as is when set
	Name   string // looked up (and created when Create) when URL is empty
	Create bool
	// VisibilityTimeout is the visibility timeout of a queue Create makes
	// (0: DefaultVisibilityTimeout); give it the mediation timeout, so a
	// message in flight comes back only after its mediation has ended.
	VisibilityTimeout time.Duration
	// Endpoint overrides the SDK's endpoint chain (tests); normally the
	// SDK reads AWS_ENDPOINT_URL_SQS itself.
	Endpoint string
	// CallTimeout bounds every SQS call (a receive: its long-poll wait
	// plus this). A peer that accepts and never answers costs at most
	// this much; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
}

// DefaultCallTimeout bounds one SQS call when Config.CallTimeout is 0.
const DefaultCallTimeout = 10 * time.Second

// DefaultVisibilityTimeout is the visibility timeout of a queue Create
// makes when Config.VisibilityTimeout is 0.
const DefaultVisibilityTimeout = 60 * time.Second

// CreateAttributes are the attributes of the queue Config.Create
// makes: FIFO in high-throughput mode (deduplication and the throughput
// limit per message group: dispatch sends every job to its own group
// unless it has a groupId, and a job id never repeats), encrypted with
// SQS-managed keys, pointers kept for SQS's maximum of 14 days.
func CreateAttributes(visibility time.Duration) map[string]string {
	if visibility <= 0 {
		visibility = DefaultVisibilityTimeout
	}
	secs := min(int((visibility+time.Second-1)/time.Second), 43200) // SQS's maximum, 12 hours
	return map[string]string{
		"FifoQueue":                 "true",
		"ContentBasedDeduplication": "false",
		"DeduplicationScope":        "messageGroup",
		"FifoThroughputLimit":       "perMessageGroupId",
		"VisibilityTimeout":         strconv.Itoa(secs),
		"MessageRetentionPeriod":    "1209600",
		"SqsManagedSseEnabled":      "true",
	}
}

// maxReceiveWait is SQS's longest long-poll wait.
const maxReceiveWait = 20 * time.Second

// Queue is an SQS FIFO queue. Its URL is resolved on first use and again
// after the queue is found missing, so a process started while SQS is down,
// or outliving a queue that was re-created, recovers by itself.
type Queue struct {
	api *sqs.Client
	cfg Config
	mu  sync.Mutex
	url string

	// depthSem lets one depth reading run at a time; the last one is kept
	// (lastDepth), so callers that accept a recent reading share it.
	depthSem  chan struct{}
	depthMu   sync.Mutex
	lastDepth DepthReading
}

// Open loads the AWS configuration through the SDK's standard chain.
// It does not contact SQS; the first call that needs the queue does.
func Open(ctx context.Context, cfg Config) (*Queue, error) {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	// The SDK's own HTTP client has no response timeout: a peer that
	// accepts and never answers would hold a call forever whenever a
	// caller's context has no deadline. Every call here gets one too.
	httpClient := awshttp.NewBuildableClient().
		WithTimeout(maxReceiveWait + cfg.CallTimeout).
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = cfg.CallTimeout }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.ResponseHeaderTimeout = maxReceiveWait + cfg.CallTimeout
			tr.TLSHandshakeTimeout = cfg.CallTimeout
		})
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(httpClient))
	if err != nil {
		return nil, fmt.Errorf("queue: aws config: %w", err)
	}
	api := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		o.HTTPClient = detachedBodyClient{o.HTTPClient}
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if region := urlRegion(cfg.URL); region != "" && cfg.Endpoint == "" && o.BaseEndpoint == nil {
			// An AWS queue URL names the region the queue lives in: SQS
			// refuses a call signed for, or sent to, another one.
			o.Region = region
		}
		if o.Region == "" {
			o.Region = "us-east-1"
		}
	})
	return &Queue{api: api, cfg: cfg, url: cfg.URL, depthSem: make(chan struct{}, 1)}, nil
}

// urlRegion is the AWS region of an SQS queue URL
// (https://sqs.eu-west-1.amazonaws.com/… or the legacy
// https://eu-west-1.queue.amazonaws.com/…; .amazonaws.com.cn in China),
// or "" for any other URL (ElasticMQ, LocalStack, a proxy).
func urlRegion(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	host := strings.ToLower(u.Hostname())
	for _, suffix := range []string{".amazonaws.com", ".amazonaws.com.cn"} {
		rest, ok := strings.CutSuffix(host, suffix)
		if !ok {
			continue
		}
		if r, ok := strings.CutPrefix(rest, "sqs."); ok && r != "" && !strings.Contains(r, ".") {
			return r
		}
		if r, ok := strings.CutSuffix(rest, ".queue"); ok && r != "" && !strings.Contains(r, ".") {
			return r
		}
	}
	return ""
}

// detachedBodyClient sends each request with a body of its own.
//
// The SDK (smithy-go) closes a request's body as soon as the response is
// in, and that body then reads as io.EOF. net/http's write loop can still be
// finishing the request at that moment: its last step reads the body once
// more to check that nothing follows Content-Length. It takes the EOF for a
// failed write and closes the connection under the response body the SDK
// is still reading, and the call fails with "deserialization failed … use of
// closed network connection" on an answer SQS had already sent. For a
// ReceiveMessage that answer carried messages which SQS now counts as in
// flight: up to ten of them stalled for the queue's visibility timeout. On a
// loaded 2-core machine it happened in about one 5,000-job bench run in
// three. The copy costs one small allocation per call (the bodies are a
// few hundred bytes of JSON).
type detachedBodyClient struct{ next sqs.HTTPClient }

func (c detachedBodyClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("queue: read request body: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	return c.next.Do(req)
}

// URL returns the queue URL, looking it up (and creating the queue when
// configured to) if it is not known yet.
func (q *Queue) URL(ctx context.Context) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.url != "" {
		return q.url, nil
	}
	ctx, cancel := q.callCtx(ctx, 0)
	defer cancel()
	out, err := q.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q.cfg.Name)})
	if err == nil {
		q.url = aws.ToString(out.QueueUrl)
		return q.url, nil
	}
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) || !q.cfg.Create {
		return "", fmt.Errorf("queue: look up %s: %w", q.cfg.Name, q.hintMissing(err))
	}
	created, err := q.api.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(q.cfg.Name),
		Attributes: CreateAttributes(q.cfg.VisibilityTimeout),
	})
	if err != nil {
		return "", fmt.Errorf("queue: create %s: %w", q.cfg.Name, err)
	}
	q.url = aws.ToString(created.QueueUrl)
	return q.url, nil
}

// KnownURL is the queue's URL if it is known (configured, or looked up
// already), "" otherwise. It makes no call.
func (q *Queue) KnownURL() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.url
}

// Name is the queue's name: the last segment of its URL, or as configured.
func (q *Queue) Name() string {
	if q.cfg.URL != "" {
		return q.cfg.URL[strings.LastIndex(q.cfg.URL, "/")+1:]
	}
	return q.cfg.Name
}

// callCtx bounds one SQS call: CallTimeout, plus extra (a long poll's wait).
func (q *Queue) callCtx(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, q.cfg.CallTimeout+extra)
}

// checkMissing forgets a looked-up URL when SQS says the queue is gone,
// and says what to do about it.
func (q *Queue) checkMissing(err error) error {
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) && q.cfg.URL == "" {
		q.mu.Lock()
		q.url = ""
		q.mu.Unlock()
	}
	return q.hintMissing(err)
}

// missingError is SQS's answer that a queue does not exist (the SDK's
// error, which errors.As still finds), with what to do about it.
type missingError struct {
	err  error
	hint string
}

func (e *missingError) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e *missingError) Unwrap() error { return e.err }

// hintMissing returns err with a hint when SQS says the queue does not
// exist, and err as it is otherwise. A queue given by name is created at
// the next call when Create is set: that needs no hint.
func (q *Queue) hintMissing(err error) error {
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) {
		return err
	}
	switch {
	case q.cfg.URL != "":
		return &missingError{err: err, hint: "create the queue, or correct its URL; dispatch creates a queue only when " +
			"given its name instead of its URL, with DISPATCH_QUEUE_CREATE=true"}
	case !q.cfg.Create:
		return &missingError{err: err, hint: "create the queue, or set DISPATCH_QUEUE_CREATE=true to have dispatch create it"}
	}
	return err
}

// VisibilityTimeout reads the queue's default visibility timeout.
func (q *Queue) VisibilityTimeout(ctx context.Context) (time.Duration, error) {
	url, err := q.URL(ctx)
	if err != nil {
		return 0, err
	}
	ctx, cancel := q.callCtx(ctx, 0)
	defer cancel()
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout},
	})
	if err != nil {
		return 0, fmt.Errorf("queue: attributes: %w", q.checkMissing(err))
	}
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	if err != nil {
		return 0, fmt.Errorf("queue: visibility timeout %q: %w", out.Attributes["VisibilityTimeout"], err)
	}
	return time.Duration(n) * time.Second, nil
}

// Depth is the queue's message counts, as SQS approximates them.
type Depth struct {
	Visible  int64 // ApproximateNumberOfMessages: waiting to be received
	InFlight int64 // ApproximateNumberOfMessagesNotVisible: received, not deleted
	Delayed  int64 // ApproximateNumberOfMessagesDelayed
}

// DepthReading is a reading of a queue's depth: the counts, or why they
// could not be read, and when the reading started (zero: never read).
type DepthReading struct {
	Depth Depth
	Err   error
	At    time.Time
}

// Depth reads the queue's approximate message counts (one
// GetQueueAttributes call).
func (q *Queue) Depth(ctx context.Context) (Depth, error) {
	r := q.DepthWithin(ctx, 0)
	return r.Depth, r.Err
}

// LastDepth is the queue's last depth reading, made by Depth or
// DepthWithin; it makes no call.
func (q *Queue) LastDepth() DepthReading {
	q.depthMu.Lock()
	defer q.depthMu.Unlock()
	return q.lastDepth
}

// DepthWithin returns a reading of the queue's depth that started at most
// maxAge before this call: the last one when it is that recent, else a new
// one (one GetQueueAttributes call). One reading runs at a time: callers
// that arrive while it runs wait for it and share it. A failed reading is
// kept too, so a queue that does not answer is not asked again sooner.
func (q *Queue) DepthWithin(ctx context.Context, maxAge time.Duration) DepthReading {
	since := time.Now().Add(-maxAge)
	select {
	case q.depthSem <- struct{}{}:
	case <-ctx.Done():
		return DepthReading{Err: fmt.Errorf("queue: attributes: %w", ctx.Err()), At: time.Now()}
	}
	defer func() { <-q.depthSem }()
	if last := q.LastDepth(); !last.At.IsZero() && !last.At.Before(since) {
		return last
	}
	r := DepthReading{At: time.Now()}
	r.Depth, r.Err = q.readDepth(ctx)
	q.depthMu.Lock()
	q.lastDepth = r
	q.depthMu.Unlock()
	return r
}

func (q *Queue) readDepth(ctx context.Context) (Depth, error) {
	url, err := q.URL(ctx)
	if err != nil {
		return Depth{}, err
	}
	ctx, cancel := q.callCtx(ctx, 0)
	defer cancel()
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed},
	})
	if err != nil {
		return Depth{}, fmt.Errorf("queue: attributes: %w", q.checkMissing(err))
	}
	var d Depth
	for name, n := range map[types.QueueAttributeName]*int64{
		types.QueueAttributeNameApproximateNumberOfMessages:           &d.Visible,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible: &d.InFlight,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed:    &d.Delayed,
	} {
		v, err := strconv.ParseInt(out.Attributes[string(name)], 10, 64)
		if err != nil {
			return Depth{}, fmt.Errorf("queue: %s %q: %w", name, out.Attributes[string(name)], err)
		}
		*n = v
	}
	return d, nil
}

// Ping checks that the queue answers.
func (q *Queue) Ping(ctx context.Context) error {
	_, err := q.VisibilityTimeout(ctx)
	return err
}

// Entry is one message to send.
type Entry struct {
	Body            string
	GroupID         string
	DeduplicationID string
	// Attributes are sent as String message attributes (the job's trace
	// context: traceparent, tracestate); nil sends none.
	Attributes map[string]string
}

// traceAttributes are the message attributes a receive asks for.
var traceAttributes = []string{"traceparent", "tracestate"}

// SendBatch sends up to 10 messages; it returns the indexes that succeeded.
func (q *Queue) SendBatch(ctx context.Context, entries []Entry) ([]int, error) {
	url, err := q.URL(ctx)
	if err != nil {
		return nil, err
	}
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
	for i, e := range entries {
		in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
			Id:                     aws.String(strconv.Itoa(i)),
			MessageBody:            aws.String(e.Body),
			MessageGroupId:         aws.String(e.GroupID),
			MessageDeduplicationId: aws.String(e.DeduplicationID),
			MessageAttributes:      messageAttributes(e.Attributes),
		})
	}
	ctx, cancel := q.callCtx(ctx, 0)
	defer cancel()
	out, err := q.api.SendMessageBatch(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("queue: send batch: %w", q.checkMissing(err))
	}
	ok := make([]int, 0, len(out.Successful))
	for _, s := range out.Successful {
		i, _ := strconv.Atoi(aws.ToString(s.Id))
		ok = append(ok, i)
	}
	if len(out.Failed) > 0 {
		f := out.Failed[0]
		se := &SendError{Failed: len(out.Failed), Of: len(entries), Message: aws.ToString(f.Code) + " " + aws.ToString(f.Message)}
		for _, f := range out.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && !f.SenderFault {
				se.Retry = append(se.Retry, i)
			}
		}
		slices.Sort(se.Retry)
		return ok, se
	}
	return ok, nil
}

// SendError is a SendBatch whose entries SQS did not all take.
type SendError struct {
	// Retry are the indexes of the entries SQS failed on its side (an
	// internal error, not the sender's fault), in order: worth sending
	// again at once.
	Retry   []int
	Failed  int    // entries not sent
	Of      int    // entries in the batch
	Message string // the first failure's code and message
}

func (e *SendError) Error() string {
	return fmt.Sprintf("queue: %d of %d messages not sent: %s", e.Failed, e.Of, e.Message)
}

// Message is one received message.
type Message struct {
	ID           string // SQS MessageId: stable across redeliveries
	Receipt      string // latest receipt handle
	Body         string
	GroupID      string
	ReceiveCount int
	// Attributes are its String message attributes of traceAttributes
	// (nil: none).
	Attributes map[string]string
}

func messageAttributes(attrs map[string]string) map[string]types.MessageAttributeValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(attrs))
	for k, v := range attrs {
		out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return out
}

// ErrReceiveAttemptVoid says a receive retried with an earlier attempt id
// was refused: the messages it handed out have changed since. Receive again
// with a new id.
var ErrReceiveAttemptVoid = errors.New("queue: receive attempt id no longer valid")

// NewReceiveAttempt returns a fresh ReceiveRequestAttemptId.
func NewReceiveAttempt() string { return rand.Text() }

// Receive long-polls for up to max (≤10) messages. attempt, when not
// empty, is the call's ReceiveRequestAttemptId: should the answer be lost
// (the call fails), a FIFO queue hands the same messages and receipt
// handles to a retry with the same id for five minutes, instead of keeping
// them invisible for their whole visibility timeout. The SDK's own retries
// reuse it; a caller retrying after an error should too.
func (q *Queue) Receive(ctx context.Context, max int, wait, visibility time.Duration, attempt string) ([]Message, error) {
	url, err := q.URL(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := q.callCtx(ctx, wait)
	defer cancel()
	out, err := q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                aws.String(url),
		MaxNumberOfMessages:     int32(max),
		WaitTimeSeconds:         int32(wait / time.Second),
		VisibilityTimeout:       int32(visibility / time.Second),
		ReceiveRequestAttemptId: optional(attempt),
		MessageAttributeNames:   traceAttributes,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameMessageGroupId,
			types.MessageSystemAttributeNameApproximateReceiveCount,
		},
	})
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "InvalidParameterValue" && strings.Contains(ae.ErrorMessage(), "ReceiveRequestAttemptId") {
			return nil, fmt.Errorf("%w: %v", ErrReceiveAttemptVoid, err)
		}
		return nil, fmt.Errorf("queue: receive: %w", q.checkMissing(err))
	}
	msgs := make([]Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		rc, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
		var attrs map[string]string
		for k, v := range m.MessageAttributes {
			if v.StringValue != nil {
				if attrs == nil {
					attrs = make(map[string]string, len(m.MessageAttributes))
				}
				attrs[k] = *v.StringValue
			}
		}
		msgs = append(msgs, Message{
			ID: aws.ToString(m.MessageId), Receipt: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			GroupID: m.Attributes["MessageGroupId"], ReceiveCount: rc, Attributes: attrs,
		})
	}
	return msgs, nil
}

// DeleteBatch deletes up to 10 messages by receipt handle.
func (q *Queue) DeleteBatch(ctx context.Context, receipts []string) error {
	url, err := q.URL(ctx)
	if err != nil {
		return err
	}
	in := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url)}
	for i, r := range receipts {
		in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r)})
	}
	ctx, cancel := q.callCtx(ctx, 0)
	defer cancel()
	out, err := q.api.DeleteMessageBatch(ctx, in)
	if err != nil {
		return fmt.Errorf("queue: delete batch: %w", q.checkMissing(err))
	}
	if len(out.Failed) > 0 {
		e := &DeleteError{Failed: len(out.Failed), Message: aws.ToString(out.Failed[0].Message)}
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if !f.SenderFault && err == nil && i >= 0 && i < len(receipts) {
				e.Retry = append(e.Retry, receipts[i])
			}
		}
		return e
	}
	return nil
}

// DeleteError is a DeleteBatch of which some entries failed. Those that
// failed on SQS's side (not the sender's fault: an internal error) are
// worth another try.
type DeleteError struct {
	Retry   []string // receipts of the entries that failed on SQS's side
	Failed  int
	Message string // the first failure's
}

func (e *DeleteError) Error() string {
	return fmt.Sprintf("queue: %d deletes failed: %s", e.Failed, e.Message)
}

// Visibility is a visibility change for one message.
type Visibility struct {
	Receipt string
	Timeout time.Duration
}

// ChangeVisibilityBatch changes up to 10 messages' visibility timeouts.
func (q *Queue) ChangeVisibilityBatch(ctx context.Context, changes []Visibility) error {
	url, err := q.URL(ctx)
	if err != nil {
		return err
	}
	in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url)}
	for i, c := range changes {
		in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(c.Receipt),
			VisibilityTimeout: int32(c.Timeout / time.Second),
		})
	}
	ctx, cancel := q.callCtx(ctx, 0)
	defer cancel()
	out, err := q.api.ChangeMessageVisibilityBatch(ctx, in)
	if err != nil {
		return fmt.Errorf("queue: change visibility: %w", q.checkMissing(err))
	}
	if len(out.Failed) > 0 {
		e := &VisibilityError{Message: aws.ToString(out.Failed[0].Message)}
		for _, f := range out.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(changes) {
				e.Receipts = append(e.Receipts, changes[i].Receipt)
				if !f.SenderFault {
					e.Retry = append(e.Retry, changes[i])
				}
			}
		}
		return e
	}
	return nil
}

// VisibilityError is a batch of visibility changes of which some failed:
// a message deleted meanwhile (its receipt no longer valid), say. Those
// that failed on SQS's side (not the sender's fault) are worth another try.
type VisibilityError struct {
	Receipts []string     // of the changes that failed
	Retry    []Visibility // the changes that failed on SQS's side
	Message  string       // the first failure's
}

func (e *VisibilityError) Error() string {
	return fmt.Sprintf("queue: %d visibility changes failed: %s", len(e.Receipts), e.Message)
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
