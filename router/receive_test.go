package router_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// losingProxy forwards SQS calls to the stand-in, but cuts the connection
// instead of passing on the first `lose` ReceiveMessage answers that carry
// messages: the queue has handed them out, the router never sees them.
func losingProxy(t *testing.T, upstream string, lose int32) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var lost atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" && bytes.Contains(answer, []byte(`"Messages"`)) &&
			lost.Add(1) <= lose {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(ts.Close)
	return ts, &lost
}

// A ReceiveMessage answer lost on the way (the connection breaks after SQS
// handed the messages out) would leave its messages invisible for the
// queue's whole visibility timeout, had the router not retried. It retries under the same
// ReceiveRequestAttemptId, so the FIFO queue hands the same messages to
// the retry at once. Here the answer is lost three times (the SDK's own
// retries, then the router's), and the messages still arrive well inside
// the 60 s visibility timeout.
func TestLostReceiveAnswerIsRecoveredAtOnce(t *testing.T) {
	q := sqstest.New(t, 60*time.Second)
	proxy, lost := losingProxy(t, q.Endpoint, 3)
	cfg := q.Config()
	cfg.Endpoint = proxy.URL
	rq, err := queue.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, q, rq, 4, nil) // sends go through the proxy too; it only loses receive answers
	b.send(t, "g", 1, 2, 3)
	med := b.med

	eventually(t, 20*time.Second, func() bool { return len(med.seen()) == 3 },
		"the three messages of a lost receive answer are mediated (without the attempt id they wait out the 60 s visibility timeout)")
	if got := med.seen(); got[0] != "1" || got[1] != "2" || got[2] != "3" {
		t.Errorf("mediated %v, want [1 2 3]", got)
	}
	if n := lost.Load(); n < 3 {
		t.Fatalf("the proxy cut %d answers, want 3: the test did not exercise a lost answer", n)
	}
}

// A receive is bounded by the queue's own call timeout (DISPATCH_SQS_TIMEOUT,
// 30 s here) past its long-poll wait, not by a shorter one of the router's:
// an answer 17 s into a 1 s poll is taken, not counted as a failed receive.
func TestAReceiveWaitsAsLongAsTheQueuesCallTimeout(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	answered := make(chan struct{})
	var slowed atomic.Bool
	rq := proxiedQueue(t, q, func(_ http.ResponseWriter, r *http.Request, _ []byte, forward func()) bool {
		if r.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" || !slowed.CompareAndSwap(false, true) {
			return false
		}
		select { // a slow answer, well within the call timeout
		case <-time.After(17 * time.Second):
		case <-r.Context().Done():
		}
		forward()
		close(answered)
		return true
	})
	b := setupOn(t, q, rq, 1, func(dispatch.Pointer, int) error { return nil })
	select {
	case <-answered:
	case <-time.After(40 * time.Second):
		t.Fatal("the slow receive was never answered")
	}
	for _, s := range b.router.Queues(t.Context()) {
		if s.ReceiveErrors != 0 {
			t.Errorf("queue %s: %d receive errors, want none: the slow answer came within the call timeout", s.Name, s.ReceiveErrors)
		}
	}
}
