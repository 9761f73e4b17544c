package router_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// hangingProxy forwards SQS requests to the real endpoint, except the
// ChangeMessageVisibilityBatch calls whose body matches hang: those it
// accepts and never answers (until the test ends).
type hangingProxy struct {
	*httptest.Server
	hung     chan struct{} // closed when the first call hangs
	hungOnce sync.Once
	stop     chan struct{}
}

func newHangingProxy(t *testing.T, upstream string, hang *regexp.Regexp) *hangingProxy {
	t.Helper()
	p := &hangingProxy{hung: make(chan struct{}), stop: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ChangeMessageVisibilityBatch" && hang.Match(body) {
			p.hungOnce.Do(func() { close(p.hung) })
			select {
			case <-r.Context().Done():
			case <-p.stop:
			}
			return
		}
		forwardTo(w, r, client, upstream, body)
	}))
	t.Cleanup(func() {
		p.Server.Close()
		client.CloseIdleConnections()
	})
	return p
}

// A heartbeat whose ChangeMessageVisibilityBatch call hangs does not stop
// the workers: a failed mediation's release does not wait for it, and the
// next message is mediated at once.
func TestHungHeartbeatDoesNotStopWorkers(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 3*time.Second) // heartbeat every second, extending to 3 s
	proxy := newHangingProxy(t, q.Endpoint, regexp.MustCompile(`"VisibilityTimeout":3[,}]`))
	rq, err := queue.Open(context.Background(), queue.Config{URL: q.URL, Endpoint: proxy.URL, CallTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	firstStarted := make(chan struct{})
	mediated := make(chan string, 10)
	med := &fakeMediator{fn: func(ptr dispatch.Pointer, call int) error {
		mediated <- ptr.ID
		if ptr.ID == "1" && call == 1 {
			close(firstStarted)
			<-proxy.hung // in flight while a heartbeat extending it hangs
			return &dispatch.RetryAfter{Delay: time.Second, Reason: "target failed"}
		}
		return nil
	}}
	runOneWorker(t, rq, med)
	t.Cleanup(func() { close(proxy.stop) }) // runs first: unblock the hung call

	b := &bundle{rq: rq}
	b.send(t, "a", 1)
	<-firstStarted
	b.send(t, "b", 2)
	if got := <-mediated; got != "1" {
		t.Fatalf("first mediation %s, want 1", got)
	}
	<-proxy.hung
	began := time.Now()
	select {
	case got := <-mediated:
		if got != "2" {
			t.Errorf("next mediation %s, want 2", got)
		}
		t.Logf("next message mediated %v after the heartbeat hung", time.Since(began).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatalf("no mediation within 5 s while a heartbeat call hangs: the workers wait for it")
	}
}

// syncLog is a concurrency-safe log sink.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// The router's start-up read of the queue's visibility timeout has a
// deadline: against a peer that never answers it gives up, says so, and
// tries again, rather than waiting forever in silence.
func TestStartupAgainstAHungQueueRetriesAndLogs(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	stop := make(chan struct{})
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the request's context ends when the client gives up
		select {                           // accept, never answer
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(peer.Close)
	t.Cleanup(func() { close(stop) }) // runs first
	rq, err := queue.Open(context.Background(), queue.Config{URL: peer.URL + "/000000000000/hung.fifo", Endpoint: peer.URL, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncLog
	r, err := router.New(rq, &fakeMediator{}, router.Config{
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 1}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	eventually(t, 5*time.Second, func() bool { return bytes.Contains([]byte(logs.String()), []byte("queue not available yet")) },
		"the start-up read gave up within its deadline and logged")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("router did not stop")
	}
}

// proxiedQueue opens q through a proxy that passes each SQS request to
// intercept first, with forward, which sends it on to the stand-in and
// writes the answer: unless intercept answered (true), by itself or by
// forward, the request goes on.
func proxiedQueue(t *testing.T, q sqstest.Queue, intercept func(w http.ResponseWriter, r *http.Request, body []byte, forward func()) bool) *queue.Queue {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		forward := func() { forwardTo(w, r, client, q.Endpoint, body) }
		if !intercept(w, r, body, forward) {
			forward()
		}
	}))
	t.Cleanup(func() { proxy.Close(); client.CloseIdleConnections() })
	rq, err := queue.Open(context.Background(), queue.Config{URL: q.URL, Endpoint: proxy.URL, CallTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return rq
}

// A message that finishes, and is deleted, while a heartbeat's call to
// extend it is under way makes that call's entry for it fail ("message
// does not exist"): nothing is wrong, and no HEARTBEAT_FAILED warning is
// raised for it. The messages still held are extended.
func TestAMessageDeletedDuringAHeartbeatRaisesNoWarning(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 3*time.Second) // heartbeat every second, extending to 3 s
	var (
		held, deleted, second = make(chan struct{}), make(chan struct{}), make(chan struct{})
		calls                 int
		mu                    sync.Mutex
		deleteOnce            sync.Once
	)
	rq := proxiedQueue(t, q, func(_ http.ResponseWriter, r *http.Request, body []byte, forward func()) bool {
		switch r.Header.Get("X-Amz-Target") {
		case "AmazonSQS.ChangeMessageVisibilityBatch":
			if !bytes.Contains(body, []byte(`"VisibilityTimeout":3`)) {
				break // not the heartbeat's
			}
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			switch n {
			case 1: // holds it until message 1 is deleted
				close(held)
				select {
				case <-deleted:
				case <-r.Context().Done():
					return true
				}
			case 2: // the first one's answer was read
				close(second)
			}
		case "AmazonSQS.DeleteMessageBatch":
			forward() // deleted, then the held heartbeat goes on
			deleteOnce.Do(func() { close(deleted) })
			return true
		}
		return false
	})
	release := make(chan struct{})
	b := setupOn(t, q, rq, 2, func(ptr dispatch.Pointer, _ int) error {
		if ptr.ID == "1" {
			<-held // finishes while the heartbeat extends it
			return nil
		}
		<-release // 2 stays held throughout
		return nil
	})
	t.Cleanup(func() { close(release) }) // before the router stops
	b.send(t, "a", 1)
	b.send(t, "b", 2)
	select {
	case <-second:
	case <-time.After(20 * time.Second):
		t.Fatal("no second heartbeat within 20 s")
	}
	for _, w := range b.router.Warnings() {
		if w.Type == router.WarnHeartbeatFailed {
			t.Errorf("warning for a message deleted during the heartbeat: %+v", w)
		}
	}
}

// A heartbeat whose change fails for a message still held raises
// HEARTBEAT_FAILED: that message may come back while it is mediated.
func TestAHeartbeatFailingForAMessageStillHeldWarns(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 3*time.Second) // heartbeat every second, extending to 3 s
	rq := proxiedQueue(t, q, func(w http.ResponseWriter, r *http.Request, body []byte, _ func()) bool {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ChangeMessageVisibilityBatch" && bytes.Contains(body, []byte(`"VisibilityTimeout":3`)) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			_, _ = io.WriteString(w, `{"Successful":[],"Failed":[{"Id":"0","SenderFault":true,"Code":"ReceiptHandleIsInvalid","Message":"the receipt is not valid"}]}`)
			return true
		}
		return false
	})
	release := make(chan struct{})
	b := setupOn(t, q, rq, 1, func(dispatch.Pointer, int) error { <-release; return nil })
	t.Cleanup(func() { close(release) }) // before the router stops
	b.send(t, "a", 1)
	eventually(t, 20*time.Second, func() bool {
		for _, w := range b.router.Warnings() {
			if w.Type == router.WarnHeartbeatFailed && strings.Contains(w.Message, "the receipt is not valid") {
				return true
			}
		}
		return false
	}, "HEARTBEAT_FAILED for the message still held, with the queue's reason")
}
