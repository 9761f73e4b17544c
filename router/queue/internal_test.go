package queue

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// closingBody reads as io.EOF once closed, as smithy-go's request bodies do.
type closingBody struct {
	mu     sync.Mutex
	r      io.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *closingBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

type clientFunc func(*http.Request) (*http.Response, error)

func (f clientFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// The SDK closes the request body once the response is in, while net/http
// may still read it (its check for bytes beyond Content-Length). The body
// the transport reads must not end early then, or net/http closes the
// connection under the response being read.
func TestRequestBodyOutlivesTheSDKClosingIt(t *testing.T) {
	const payload = `{"QueueUrl":"http://127.0.0.1:9324/000000000000/q.fifo","MaxNumberOfMessages":10}`
	var sent *http.Request
	c := detachedBodyClient{next: clientFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})}
	sdkBody := &closingBody{r: strings.NewReader(payload)}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9324/", sdkBody)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(payload))
	if _, err := c.Do(req); err != nil {
		t.Fatal(err)
	}
	_ = sdkBody.Close() // what smithy-go does as soon as Do returns
	got, err := io.ReadAll(sent.Body)
	if err != nil || string(got) != payload {
		t.Fatalf("the transport read %q, %v after the SDK closed its body; want the whole body", got, err)
	}
	if sent.ContentLength != int64(len(payload)) {
		t.Errorf("ContentLength = %d, want %d", sent.ContentLength, len(payload))
	}
}

// A queue named by its AWS URL is called in the region the URL names,
// whatever AWS_REGION says (or without it): SQS refuses a call for a queue
// of another region. Any other URL (ElasticMQ, LocalStack) leaves the
// region to the SDK's configuration.
func TestAQueueURLNamesItsRegion(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_SQS", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "us-east-1")
	for url, want := range map[string]string{
		"https://sqs.eu-west-1.amazonaws.com/123456789012/dispatch.fifo":  "eu-west-1",
		"https://ap-south-1.queue.amazonaws.com/123456789012/jobs.fifo":   "ap-south-1",
		"https://sqs.cn-north-1.amazonaws.com.cn/123456789012/jobs.fifo":  "cn-north-1",
		"http://localhost:9324/000000000000/dispatch.fifo":                "us-east-1",
		"https://sqs.eu-west-1.example.com/123456789012/dispatch.fifo":    "us-east-1",
		"https://evil.sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo": "us-east-1",
	} {
		q, err := Open(t.Context(), Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		if got := q.api.Options().Region; got != want {
			t.Errorf("queue %s: region %q, want %q", url, got, want)
		}
	}
	// Through an endpoint of its own (a proxy, a VPC endpoint), the region
	// is the configuration's.
	q, err := Open(t.Context(), Config{URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/dispatch.fifo", Endpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.api.Options().Region; got != "us-east-1" {
		t.Errorf("through an endpoint: region %q, want the configuration's us-east-1", got)
	}
}
