package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// reporterFunc is a Reporter made of a function.
type reporterFunc func(context.Context, dispatch.RouterReport) error

func (f reporterFunc) ReportRouter(ctx context.Context, r dispatch.RouterReport) error {
	return f(ctx, r)
}

// A router reports its pools, queues, in-flight messages and warnings at
// once, keeps reporting while a report fails, and says it stopped when its
// context ends.
func TestRouterReportsItsPoolsAndItsStop(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	b := setup(t, 3, func(ptr dispatch.Pointer, _ int) error {
		if ptr.ID == "7" {
			close(started)
			<-release // in flight while the router reports
		}
		return nil
	})
	t.Cleanup(func() { close(release) })
	// A stray pointer naming a pool that is not configured: the default
	// pool takes it, with a warning.
	stray, _ := json.Marshal(dispatch.Pointer{ID: "7", PoolCode: "NO-SUCH-POOL", MessageGroupID: "g"})
	if _, err := b.rq.SendBatch(context.Background(), []queue.Entry{{Body: string(stray), GroupID: "g", DeduplicationID: "7"}}); err != nil {
		t.Fatal(err)
	}
	<-started
	var (
		mu      sync.Mutex
		reports []dispatch.RouterReport
	)
	got := make(chan struct{}, 10)
	rep := reporterFunc(func(_ context.Context, r dispatch.RouterReport) error {
		mu.Lock()
		reports = append(reports, r)
		n := len(reports)
		mu.Unlock()
		got <- struct{}{}
		if n == 1 {
			return errors.New("database not reachable") // the next tick tries again
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	id := router.NewReportID("host-a")
	go func() { done <- b.router.RunReports(ctx, rep, id, "host-a", "1.2.3") }()
	for range 2 { // the first at once, the second a tick later
		select {
		case <-got:
		case <-time.After(3 * dispatch.RouterReportEvery):
			t.Fatal("no report")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunReports did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	first, last := reports[0], reports[len(reports)-1]
	var pools []struct {
		Code        string `json:"code"`
		Concurrency int    `json:"concurrency"`
	}
	if err := json.Unmarshal(first.Pools, &pools); err != nil || len(pools) != 1 || pools[0].Code != dispatch.DefaultPool || pools[0].Concurrency != 3 {
		t.Errorf("pools reported: %s (%v), want the one pool of concurrency 3", first.Pools, err)
	}
	if !strings.HasPrefix(first.ID, "host-a:") || first.ID != id || first.Host != "host-a" || first.Version != "1.2.3" || first.StartedAt.IsZero() || first.StoppedAt != nil {
		t.Errorf("first report: %+v", first)
	}
	if last.StoppedAt == nil || last.ID != id || !last.StartedAt.Equal(first.StartedAt) {
		t.Errorf("last report: %+v, want the same router saying it stopped", last)
	}

	var queues []router.QueueStats
	if err := json.Unmarshal(first.Queues, &queues); err != nil || len(queues) != 1 {
		t.Fatalf("queues reported: %s (%v), want the one queue", first.Queues, err)
	}
	if q := queues[0]; q.Name != b.q.Name || q.Status != router.QueueUp || q.MessagesReceived != 1 || q.Held != 1 || q.Depth == nil || q.DepthAt == "" {
		t.Errorf("queue reported: %s, want %s UP with its message held and its depth", first.Queues, b.q.Name)
	}
	var inFlight router.InFlightSummary
	if err := json.Unmarshal(first.InFlight, &inFlight); err != nil {
		t.Fatal(err)
	}
	if inFlight.Count != 1 || inFlight.Mediating != 1 || inFlight.Oldest == nil || inFlight.Oldest.JobID != "7" || inFlight.Oldest.Queue != b.q.Name {
		t.Errorf("in flight reported: %s, want job 7 mediating", first.InFlight)
	}
	var warnings []router.Warning
	if err := json.Unmarshal(first.Warnings, &warnings); err != nil || len(warnings) != 1 ||
		warnings[0].Type != router.WarnUnknownPool || warnings[0].Pool != "NO-SUCH-POOL" || warnings[0].JobID != "7" {
		t.Errorf("warnings reported: %s (%v), want the unknown pool's", first.Warnings, err)
	}
	// The last report reads no depth: it says the last one it had.
	if err := json.Unmarshal(last.Queues, &queues); err != nil || len(queues) != 1 || queues[0].Depth == nil {
		t.Errorf("the last report's queues: %s (%v), want the last depth read", last.Queues, err)
	}
}

// depthCalls counts the GetQueueAttributes calls that read a queue's depth.
func depthCalls(t *testing.T, upstream string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	target, _ := url.Parse(upstream)
	proxy := httputil.NewSingleHostReverseProxy(target)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.GetQueueAttributes" {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), "ApproximateNumberOfMessages") {
				n.Add(1)
			}
			r.Body = io.NopCloser(strings.NewReader(string(body)))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts, &n
}

// A depth reading is shared: callers that accept a recent one get the
// last, whether it succeeded or failed, and a fresh read asks SQS again.
func TestQueueDepthReadingIsShared(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	proxy, calls := depthCalls(t, q.Endpoint)
	cfg := q.Config()
	cfg.Endpoint = proxy.URL
	rq, err := queue.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if last := rq.LastDepth(); !last.At.IsZero() {
		t.Errorf("a depth before any reading: %+v", last)
	}
	ctx := context.Background()
	first := rq.DepthWithin(ctx, time.Minute)
	if first.Err != nil || first.At.IsZero() {
		t.Fatalf("first reading: %+v", first)
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := rq.DepthWithin(ctx, time.Minute); !r.At.Equal(first.At) {
				t.Errorf("a reading within a minute: %+v, want the first", r)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("%d depth calls for six readings within a minute, want 1", n)
	}
	if _, err := rq.Depth(ctx); err != nil || calls.Load() != 2 {
		t.Errorf("a fresh reading: %v after %d calls, want a second call", err, calls.Load())
	}
	if last := rq.LastDepth(); !last.At.After(first.At) {
		t.Errorf("the last reading is %+v, want the fresh one", last)
	}

	// A queue that does not answer: the failure is kept as a reading.
	proxy.Close()
	failed := rq.DepthWithin(ctx, 0)
	if failed.Err == nil {
		t.Fatal("a depth read through a closed endpoint succeeded")
	}
	if again := rq.DepthWithin(ctx, time.Minute); again.Err == nil || !again.At.Equal(failed.At) {
		t.Errorf("a reading within a minute of the failure: %+v, want the failure", again)
	}
}
