package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// multi is a router over several queues, with its listener.
type multi struct {
	router *router.Router
	med    *fakeMediator
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan error
}

// startMulti starts a router with one pool over sources.
func startMulti(t *testing.T, concurrency int, fn func(dispatch.Pointer, int) error, sources ...router.Source) *multi {
	t.Helper()
	m := &multi{med: &fakeMediator{fn: fn}, done: make(chan error, 1)}
	r, err := router.New(nil, m.med, router.Config{
		Sources:     sources,
		Pools:       []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: concurrency}},
		ReceiveWait: time.Second, MediationTimeout: 10 * time.Second, ShutdownTimeout: 10 * time.Second,
		// Warnings (a failed delete or visibility change) show in a
		// failing test's output.
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	m.router = r
	m.srv = httptest.NewServer(r.Handler(nil))
	t.Cleanup(m.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.done:
		case <-time.After(20 * time.Second):
			t.Error("router did not stop")
		}
	})
	return m
}

// sendTo puts pointers of ids, in group, on q.
func sendTo(t *testing.T, rq *queue.Queue, group string, ids ...int) {
	t.Helper()
	var entries []queue.Entry
	for _, id := range ids {
		ptr, _ := json.Marshal(dispatch.Pointer{ID: strconv.Itoa(id), PoolCode: dispatch.DefaultPool, MessageGroupID: group, Sequence: int64(id)})
		entries = append(entries, queue.Entry{Body: string(ptr), GroupID: group, DeduplicationID: fmt.Sprint(id)})
	}
	if _, err := rq.SendBatch(context.Background(), entries); err != nil {
		t.Fatal(err)
	}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %q: %v", url, body, err)
	}
	return resp.StatusCode
}

// One router consumes several queues, each group in its order.
func TestSeveralQueuesAreConsumedWithGroupOrder(t *testing.T) {
	t.Parallel()
	a, b := sqstest.New(t, 30*time.Second), sqstest.New(t, 30*time.Second)
	ra, rb := a.Open(t), b.Open(t)
	var firstFailed atomic.Bool
	m := startMulti(t, 4, func(ptr dispatch.Pointer, call int) error {
		if ptr.ID == "1" && firstFailed.CompareAndSwap(false, true) { // the group's first fails once: the rest wait for it
			return &dispatch.RetryAfter{Delay: time.Second, Reason: "target failed"}
		}
		return nil
	}, router.Source{Queue: ra, Connections: 2}, router.Source{Queue: rb})
	sendTo(t, ra, "g", 1, 2, 3)
	sendTo(t, rb, "h", 101, 102, 103)
	eventually(t, 30*time.Second, func() bool { return len(m.med.seen()) >= 7 }, "both queues' messages mediated")
	var g, h []string
	for _, id := range m.med.seen() {
		if len(id) == 1 {
			g = append(g, id)
		} else {
			h = append(h, id)
		}
	}
	if len(g) != 4 || g[0] != "1" || g[1] != "1" {
		t.Errorf("group g (queue a) mediated as %v: nothing may overtake the failed 1", g)
	}
	if len(h) != 3 {
		t.Errorf("group h (queue b) mediated as %v, want its three", h)
	}
	for _, q := range []sqstest.Queue{a, b} {
		eventually(t, 10*time.Second, func() bool {
			attrs, err := q.Attributes(context.Background())
			return err == nil && attrs["ApproximateNumberOfMessages"] == "0" && attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
		}, "every message deleted from the queue it came from, "+q.Name)
	}
	var qs []router.QueueStats
	getJSON(t, m.srv.URL+"/monitoring/queues", &qs)
	if len(qs) != 2 || qs[0].Name != a.Name || qs[1].Name != b.Name || qs[0].Connections != 2 || qs[1].Connections != 1 {
		t.Fatalf("/monitoring/queues = %+v", qs)
	}
	for _, q := range qs {
		if q.Status != router.QueueUp || q.MessagesReceived < 3 || q.Receives == 0 || q.Depth == nil || q.URL == "" {
			t.Errorf("queue %s: %+v", q.Name, q)
		}
	}
}

// A queue that does not exist does not stop the others; /health/ready and
// /monitoring/queues name it, and once it exists it is consumed too.
func TestMissingQueueDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	a := sqstest.New(t, 30*time.Second)
	missingName := "t-missing-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".fifo"
	missingURL := strings.TrimSuffix(a.URL, a.Name) + missingName
	missing, err := queue.Open(context.Background(), queue.Config{URL: missingURL, Endpoint: a.Endpoint, CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ra := a.Open(t)
	m := startMulti(t, 2, nil, router.Source{Queue: missing}, router.Source{Queue: ra})
	sendTo(t, ra, "g", 1, 2)
	eventually(t, 20*time.Second, func() bool { return len(m.med.seen()) == 2 }, "the existing queue's messages mediated")

	var ready struct {
		Status string
		Queues []router.ReadyQueue
	}
	eventually(t, 10*time.Second, func() bool {
		return getJSON(t, m.srv.URL+"/health/ready", &ready) == http.StatusServiceUnavailable && len(ready.Queues) == 2 && ready.Queues[0].Status == router.QueueDown
	}, "not ready, naming the missing queue")
	if ready.Status != "DOWN" || ready.Queues[0].Name != missingName || !strings.Contains(ready.Queues[0].Error, "NonExistentQueue") && !strings.Contains(ready.Queues[0].Error, "QueueDoesNotExist") ||
		ready.Queues[1] != (router.ReadyQueue{Name: a.Name, Status: router.QueueUp}) {
		t.Errorf("/health/ready = %+v", ready)
	}
	var qs []router.QueueStats
	getJSON(t, m.srv.URL+"/monitoring/queues", &qs)
	if qs[0].Status != router.QueueDown || qs[0].LastError == "" || qs[0].DepthError == "" || qs[1].Status != router.QueueUp {
		t.Errorf("/monitoring/queues = %+v", qs)
	}
	// Each keeps SQS's words and says what to do (the warning logged is
	// the same error).
	const hint = "(create the queue, or correct its URL; dispatch creates a queue only when given its name instead of its URL, with DISPATCH_QUEUE_CREATE=true)"
	for where, msg := range map[string]string{"/health/ready": ready.Queues[0].Error,
		"/monitoring/queues lastError": qs[0].LastError, "/monitoring/queues depthError": qs[0].DepthError} {
		if !strings.Contains(msg, hint) || !strings.Contains(msg, "NonExistentQueue") {
			t.Errorf("%s: %q, want SQS's error and %q", where, msg, hint)
		}
	}

	// The queue comes into being: it is consumed without a restart.
	out, err := a.API.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(missingName),
		Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = a.API.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	sendTo(t, missing, "m", 7)
	eventually(t, 30*time.Second, func() bool { return slices.Contains(m.med.seen(), "7") }, "the queue that appeared is consumed")
	eventually(t, 10*time.Second, func() bool { return getJSON(t, m.srv.URL+"/health/ready", &ready) == http.StatusOK }, "ready once every queue answers")
}

// A stop gives each unstarted message back to the queue it came from.
func TestShutdownReleasesEachMessageToItsQueue(t *testing.T) {
	t.Parallel()
	a, b := sqstest.New(t, 30*time.Second), sqstest.New(t, 30*time.Second)
	ra, rb := a.Open(t), b.Open(t)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m := startMulti(t, 1, func(ptr dispatch.Pointer, call int) error {
		if call == 1 {
			once.Do(func() { close(started) })
			<-release
		}
		return nil
	}, router.Source{Queue: ra}, router.Source{Queue: rb})
	sendTo(t, ra, "g", 1, 2)
	<-started
	sendTo(t, rb, "h", 11, 12)
	eventually(t, 10*time.Second, func() bool { return m.router.Stats()[0].Buffered == 3 }, "three messages buffered behind the one in flight")
	m.cancel()
	eventually(t, 10*time.Second, func() bool { return m.router.Stats()[0].Buffered == 0 }, "buffered messages released")
	close(release)
	<-m.done
	m.done <- nil
	// The one mediated was deleted; the others are visible again at once,
	// each on its own queue (not after their 30 s visibility timeout).
	got := map[string][]string{}
	defer func() {
		if t.Failed() {
			t.Logf("received after the stop: %v; router warnings: %+v", got, m.router.Warnings())
		}
	}()
	eventually(t, 10*time.Second, func() bool {
		for name, rq := range map[string]*queue.Queue{"a": ra, "b": rb} {
			msgs, err := rq.Receive(context.Background(), 10, 0, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				var p dispatch.Pointer
				_ = json.Unmarshal([]byte(m.Body), &p)
				got[name] = append(got[name], p.ID)
			}
		}
		return len(got["a"])+len(got["b"]) >= 3
	}, "the three unstarted messages visible again on their queues")
	slices.Sort(got["b"])
	if !slices.Equal(got["a"], []string{"2"}) || !slices.Equal(got["b"], []string{"11", "12"}) {
		t.Errorf("after the stop queue a holds %v and b %v, want [2] and [11 12]", got["a"], got["b"])
	}
	if calls := m.med.seen(); len(calls) != 1 {
		t.Errorf("mediated %v, want only the one in flight", calls)
	}
}

// countingProxy forwards SQS calls to upstream and counts the receives
// under way at once, and the largest such count.
func countingProxy(t *testing.T, upstream string) (*httptest.Server, *atomic.Int32, *atomic.Int32, *sync.Map) {
	t.Helper()
	var open, peak atomic.Int32
	var bodies sync.Map // the last ReceiveMessage request body
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
			bodies.Store("receive", string(body))
			n := open.Add(1)
			defer open.Add(-1)
			for p := peak.Load(); n > p; p = peak.Load() {
				if peak.CompareAndSwap(p, n) {
					break
				}
			}
		}
		forwardTo(w, r, http.DefaultClient, upstream, body)
	}))
	t.Cleanup(ts.Close)
	return ts, &open, &peak, &bodies
}

// A queue's connections are its concurrent long polls, and its
// visibilityTimeout is what each receive asks for.
func TestQueueConnectionsAndVisibility(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	proxy, open, peak, bodies := countingProxy(t, q.Endpoint)
	cfg := q.Config()
	cfg.Endpoint = proxy.URL
	rq, err := queue.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := startMulti(t, 8, nil, router.Source{Queue: rq, Connections: 3, VisibilityTimeout: 45 * time.Second})
	eventually(t, 10*time.Second, func() bool { return open.Load() == 3 }, "three long polls under way at once")
	sendTo(t, rq, "g", 1)
	eventually(t, 10*time.Second, func() bool { return len(m.med.seen()) == 1 }, "mediated")
	if p := peak.Load(); p > 3 {
		t.Errorf("%d receives at once, want at most the 3 connections", p)
	}
	body, _ := bodies.Load("receive")
	if !strings.Contains(body.(string), `"VisibilityTimeout":45`) {
		t.Errorf("a receive asked for %s, want VisibilityTimeout 45", body)
	}
	var qs []router.QueueStats
	getJSON(t, m.srv.URL+"/monitoring/queues", &qs)
	if qs[0].VisibilityTimeoutSeconds != 45 || qs[0].Connections != 3 {
		t.Errorf("/monitoring/queues = %+v", qs)
	}
}

// A queue whose own visibility timeout is 0 (a misconfiguration) would
// hand each message out again while it is mediated: each receive asks for
// the mediation timeout instead, and the heartbeat extends by it.
func TestAQueueWithoutVisibilityStillHoldsItsMessages(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 0)
	var receives atomic.Int32
	var asked sync.Map // the last ReceiveMessage request body
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
			asked.Store("receive", string(body))
			defer receives.Add(1)
		}
		forwardTo(w, r, http.DefaultClient, q.Endpoint, body)
	}))
	t.Cleanup(proxy.Close)
	cfg := q.Config()
	cfg.Endpoint = proxy.URL
	rq, err := queue.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	m := startMulti(t, 4, func(ptr dispatch.Pointer, call int) error {
		if call == 1 {
			<-release // the first mediation takes a while
		}
		return nil
	}, router.Source{Queue: rq, Connections: 2})
	sendTo(t, rq, "g", 1)
	eventually(t, 10*time.Second, func() bool { return len(m.med.seen()) == 1 }, "mediation under way")
	// A message handed out again would come back within a poll or two.
	since := receives.Load()
	eventually(t, 15*time.Second, func() bool { return receives.Load() >= since+4 }, "four more receives")
	close(release)
	eventually(t, 10*time.Second, func() bool {
		a, err := q.Attributes(context.Background())
		return err == nil && a["ApproximateNumberOfMessages"] == "0" && a["ApproximateNumberOfMessagesNotVisible"] == "0"
	}, "the message deleted")
	if calls := m.med.seen(); len(calls) != 1 {
		t.Errorf("mediated %v, want the message once", calls)
	}
	var qs []router.QueueStats
	getJSON(t, m.srv.URL+"/monitoring/queues", &qs)
	if qs[0].VisibilityTimeoutSeconds != 10 {
		t.Errorf("visibility timeout %d s, want the mediation timeout (10 s)", qs[0].VisibilityTimeoutSeconds)
	}
	body, _ := asked.Load("receive")
	if !strings.Contains(body.(string), `"VisibilityTimeout":10`) {
		t.Errorf("a receive asked for %s, want VisibilityTimeout 10", body)
	}
}
