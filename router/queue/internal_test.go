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
