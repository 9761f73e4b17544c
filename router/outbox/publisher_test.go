package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/outbox"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// fakeOutbox is a hand-written Store: nothing is due, and Unmark and
// ConfirmSent calls are recorded.
type fakeOutbox struct {
	mu        sync.Mutex
	unmarked  map[time.Time][]int64
	confirmed []int64
	passes    int   // outbox passes (PublishDueExcept calls)
	unmarkErr error // Unmark fails with it (nil: it works)
}

func (f *fakeOutbox) ConfirmSent(_ context.Context, sent []dispatch.Unsent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range sent {
		f.confirmed = append(f.confirmed, u.ID)
	}
	return nil
}

func (f *fakeOutbox) PublishDueExcept(context.Context, time.Time, int, []string, func([]dispatch.Unsent) ([]int64, error)) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes++
	return 0, nil
}

// progress is how many outbox passes ran and pointers were confirmed.
func (f *fakeOutbox) progress() (passes, confirmed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passes, len(f.confirmed)
}

func (f *fakeOutbox) Sweep(context.Context, time.Time, time.Duration) (int64, int64, error) {
	return 0, 0, nil
}

func (f *fakeOutbox) Unmark(_ context.Context, ids []int64, mark time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unmarkErr != nil {
		return f.unmarkErr
	}
	if f.unmarked == nil {
		f.unmarked = map[time.Time][]int64{}
	}
	f.unmarked[mark] = append(f.unmarked[mark], ids...)
	return nil
}

func (f *fakeOutbox) ids(mark time.Time) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.unmarked[mark])
}

func startPublisher(t *testing.T, q *queue.Queue, store outbox.Store) (*outbox.Publisher, func()) {
	t.Helper()
	return startPublisherWith(t, q, store, outbox.Config{RequeueAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)})
}

// startPublisherWith runs a publisher with cfg until the test ends, or
// until the returned stop is called.
func startPublisherWith(t *testing.T, q *queue.Queue, store outbox.Store, cfg outbox.Config) (*outbox.Publisher, func()) {
	t.Helper()
	p := outbox.New(q, store, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return p, stop
}

// proxiedQueue opens sq's queue through a loopback proxy whose handler is
// serve (forward sends a request on to the stand-in as it is), with
// callTimeout (0: the queue's default).
func proxiedQueue(t *testing.T, sq sqstest.Queue, callTimeout time.Duration, serve func(w http.ResponseWriter, r *http.Request, forward http.Handler)) *queue.Queue {
	t.Helper()
	target, err := url.Parse(sq.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(w, r, forward) }))
	t.Cleanup(proxy.Close)
	cfg := sq.Config()
	cfg.Endpoint = proxy.URL
	if callTimeout > 0 {
		cfg.CallTimeout = callTimeout
	}
	q, err := queue.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func handed(mark time.Time, ids ...int64) []dispatch.Unsent {
	us := make([]dispatch.Unsent, len(ids))
	for i, id := range ids {
		us[i] = dispatch.Unsent{ID: id, GroupID: "g", Mark: mark}
	}
	return us
}

// Pointers handed over at creation go onto the queue at once, in order,
// with no outbox query.
func TestHandedPointersAreSentInOrder(t *testing.T) {
	q := sqstest.New(t, 30*time.Second)
	p, _ := startPublisher(t, q.Open(t), &fakeOutbox{})
	if !p.Accepting() {
		t.Fatal("a fresh publisher does not accept hand-offs")
	}
	p.Hand(handed(time.Now(), 11, 12, 13), 0)
	rq := q.Open(t)
	var got []string
	eventually(t, 10*time.Second, func() bool {
		msgs, err := rq.Receive(context.Background(), 10, time.Second, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			var ptr dispatch.Pointer
			_ = json.Unmarshal([]byte(m.Body), &ptr)
			got = append(got, ptr.ID)
			_ = rq.DeleteBatch(context.Background(), []string{m.Receipt})
		}
		return len(got) >= 3
	}, "the three handed pointers reach the queue")
	if fmt.Sprint(got) != "[11 12 13]" {
		t.Errorf("queue got %v, want [11 12 13]", got)
	}
}

// A handed pointer that cannot be sent is given back to the outbox: its
// queued mark is cleared (only that mark), and hand-offs stop until a send
// works again. After the publisher stopped, a hand-off is given back at
// once.
func TestUnsentHandedPointersGoBackToTheOutbox(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: every send fails at once
	q, err := queue.Open(context.Background(), queue.Config{
		URL: "http://" + addr + "/000000000000/down.fifo", Endpoint: "http://" + addr, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := &fakeOutbox{}
	p, stop := startPublisher(t, q, store)
	mark := time.Now().Truncate(time.Microsecond)
	p.Hand(handed(mark, 1, 2, 3), 0)
	eventually(t, 20*time.Second, func() bool { return len(store.ids(mark)) == 3 },
		"the unsent pointers' marks are cleared")
	if p.Accepting() {
		t.Error("the publisher still accepts hand-offs although its last send failed")
	}
	stop()
	late := mark.Add(time.Second)
	p.Hand(handed(late, 4), 0)
	if got := store.ids(late); fmt.Sprint(got) != "[4]" {
		t.Errorf("a hand-off after the stop: unmarked %v, want [4]", got)
	}
}

// A pointer SQS failed on its side (an entry of SendMessageBatch answered
// InternalError, SenderFault false) is sent again at once: it reaches the
// queue, and hand-offs go on. Before, the one failure put the queue in a
// backoff of 5 s and more, with every pointer of it, and stopped
// hand-offs.
func TestAPointerSQSFailedOnItsSideIsSentAgain(t *testing.T) {
	sq := sqstest.New(t, 30*time.Second)
	var (
		mu     sync.Mutex
		failed int // entries answered as failed on SQS's side
	)
	q := proxiedQueue(t, sq, 0, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		mu.Lock()
		fail := failed == 0 && r.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessageBatch"
		if fail {
			failed++
		}
		mu.Unlock()
		if !fail {
			forward.ServeHTTP(w, r)
			return
		}
		// The first batch: SQS "fails" its first entry, and takes the rest.
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			t.Error(err)
			return
		}
		entries := in["Entries"].([]any)
		first := entries[0].(map[string]any)["Id"]
		in["Entries"] = entries[1:]
		var out struct {
			Successful []any            `json:"Successful"`
			Failed     []map[string]any `json:"Failed"`
		}
		if len(entries) > 1 {
			body, _ := json.Marshal(in)
			req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, sq.Endpoint, bytes.NewReader(body))
			req.Header = r.Header.Clone()
			req.Header.Del("Authorization") // signed over the old body; the stand-in does not check it
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Error(err)
				return
			}
		}
		out.Failed = append(out.Failed, map[string]any{"Id": first, "SenderFault": false, "Code": "InternalError", "Message": "try again"})
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(out)
	})
	store := &fakeOutbox{}
	p, _ := startPublisher(t, q, store)
	mark := time.Now().Truncate(time.Microsecond)
	p.Hand(handed(mark, 21, 22), 0)
	rq := sq.Open(t)
	got := map[string]bool{}
	eventually(t, 3*time.Second, func() bool {
		msgs, err := rq.Receive(context.Background(), 10, 0, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			var ptr dispatch.Pointer
			_ = json.Unmarshal([]byte(m.Body), &ptr)
			got[ptr.ID] = true
			_ = rq.DeleteBatch(context.Background(), []string{m.Receipt})
		}
		return got["21"] && got["22"]
	}, "both pointers on the queue, the one SQS failed on its side sent again")
	mu.Lock()
	n := failed
	mu.Unlock()
	if n != 1 {
		t.Fatalf("the proxy failed %d entries, want 1", n)
	}
	if !p.Accepting() {
		t.Error("hand-offs stopped after a failure SQS asks clients to retry")
	}
	if ids := store.ids(mark); len(ids) != 0 {
		t.Errorf("pointers %v given back to the outbox, want none", ids)
	}
}

// Under a steady stream of creates the hand-offs never run dry, and the
// publisher still writes its send confirmations and runs its outbox pass
// (retries come due there, and the sweep runs in the same loop). Before,
// it sent handed pointers for as long as any waited: a busy service kept
// every confirmation in memory, and no retry went out until creates
// paused. Here every SQS request takes 2 ms longer (a proxy in front of
// the stand-in), so hand-offs outpace sends and always wait.
func TestSteadyHandOffsDoNotStarveTheOutbox(t *testing.T) {
	sq := sqstest.New(t, 30*time.Second)
	q := proxiedQueue(t, sq, 0, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		time.Sleep(2 * time.Millisecond)
		forward.ServeHTTP(w, r)
	})
	store := &fakeOutbox{}
	p, _ := startPublisher(t, q, store)
	eventually(t, 10*time.Second, func() bool { passes, _ := store.progress(); return passes > 0 },
		"the first outbox pass")
	streaming, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		mark := time.Now().Truncate(time.Microsecond)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for id := int64(1); ; id += 20 {
			select {
			case <-streaming:
				return
			case <-tick.C:
			}
			batch := make([]dispatch.Unsent, 20)
			for i := range batch {
				batch[i] = dispatch.Unsent{ID: id + int64(i), Mark: mark}
			}
			p.Hand(batch, 0)
		}
	}()
	defer func() { close(streaming); <-done }()
	passes0, _ := store.progress()
	eventually(t, 20*time.Second, func() bool {
		passes, confirmed := store.progress()
		return passes >= passes0+2 && confirmed > 0
	}, "outbox passes and send confirmations while hand-offs keep coming")
}

// endlessOutbox always has a full batch of due pointers.
type endlessOutbox struct {
	fakeOutbox
	mu   sync.Mutex
	next int64
}

func (e *endlessOutbox) PublishDueExcept(_ context.Context, _ time.Time, limit int, _ []string, send func([]dispatch.Unsent) ([]int64, error)) (int, error) {
	e.mu.Lock()
	due := make([]dispatch.Unsent, limit)
	for i := range due {
		e.next++
		due[i] = dispatch.Unsent{ID: 1_000_000 + e.next, Mark: time.Now()}
	}
	e.mu.Unlock()
	_, err := send(due)
	return limit, err
}

// Hand-offs are sent while the outbox still has due pointers: the outbox
// pass sends a batch and gives them their turn. Before, it drained the
// outbox first, and hand-offs waited until creates found no room and went
// to the outbox too.
func TestHandOffsAreSentWhileTheOutboxHasWork(t *testing.T) {
	q := sqstest.New(t, 30*time.Second)
	outbox := &endlessOutbox{}
	p, _ := startPublisher(t, q.Open(t), outbox)
	eventually(t, 10*time.Second, func() bool {
		outbox.mu.Lock()
		defer outbox.mu.Unlock()
		return outbox.next >= 300
	}, "the outbox pass under way (three batches)")
	p.Hand([]dispatch.Unsent{{ID: 11, Mark: time.Now()}, {ID: 12, Mark: time.Now()}, {ID: 13, Mark: time.Now()}}, 0)
	rq := q.Open(t)
	found := map[string]bool{}
	eventually(t, 10*time.Second, func() bool {
		msgs, err := rq.Receive(context.Background(), 10, 0, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		receipts := make([]string, 0, len(msgs))
		for _, m := range msgs {
			var ptr dispatch.Pointer
			_ = json.Unmarshal([]byte(m.Body), &ptr)
			if len(ptr.ID) < 7 { // the outbox's are 1,000,001 on
				found[ptr.ID] = true
			}
			receipts = append(receipts, m.Receipt)
		}
		if len(receipts) > 0 {
			_ = rq.DeleteBatch(context.Background(), receipts)
		}
		return len(found) == 3
	}, "the three handed pointers reach the queue while the outbox always has a batch due")
}

// An outbox that stays full (a backlog after an outage, a large redrive)
// does not hold the publisher in its pass: the pointers sent are
// confirmed while the pass goes on, and a publisher whose hand-off failed
// accepts hand-offs again once sends work. Before, the pass ran until the
// outbox was empty: nothing was confirmed, so every lease ran out and the
// sweep sent each pointer again, and every create went through the
// outbox meanwhile.
func TestAFullOutboxStillConfirmsAndTakesHandOffsAgain(t *testing.T) {
	sq := sqstest.New(t, 30*time.Second)
	var (
		mu   sync.Mutex
		down = true // SQS answers 500 to the hand-off's send while down
	)
	q := proxiedQueue(t, sq, time.Second, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		d := down
		mu.Unlock()
		// Only the handed pointer's send fails: the outbox's keep going,
		// so its queue is never in a backoff that would make the hand-off
		// wait rather than fail.
		if d && bytes.Contains(body, []byte(`\"id\":\"11\"`)) {
			http.Error(w, `{"__type":"InternalError","message":"down"}`, http.StatusInternalServerError)
			return
		}
		forward.ServeHTTP(w, r)
	})
	outbox := &endlessOutbox{}
	p, _ := startPublisher(t, q, outbox)
	p.Hand([]dispatch.Unsent{{ID: 11, Mark: time.Now()}}, 0)
	eventually(t, 20*time.Second, func() bool { return !p.Accepting() },
		"hand-offs refused after a hand-off could not be sent")
	mu.Lock()
	down = false
	mu.Unlock()
	eventually(t, 10*time.Second, p.Accepting,
		"hand-offs accepted again once sends work, while the outbox stays full")
	eventually(t, 15*time.Second, func() bool { _, confirmed := outbox.progress(); return confirmed > 0 },
		"pointers sent by the outbox pass confirmed while the outbox stays full")
}

// The bound on handed pointers holds however many creates reserve room at
// once: a reservation that does not fit is refused, and room comes back
// when the create hands its pointers (or none, having failed).
func TestHandOffRoomIsBoundedAcrossConcurrentCreates(t *testing.T) {
	q := sqstest.New(t, 30*time.Second)
	p, _ := startPublisher(t, q.Open(t), &fakeOutbox{})
	var (
		mu      sync.Mutex
		granted int
		wg      sync.WaitGroup
	)
	for range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.Reserve(100) {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != 50 {
		t.Fatalf("%d reservations of 100 granted at once, want 50 (the bound of 5,000)", granted)
	}
	if p.Accepting() {
		t.Error("the publisher accepts hand-offs with all its room reserved")
	}
	p.Hand(nil, 100) // a create that failed gives its room back
	if !p.Reserve(100) {
		t.Error("room given back could not be reserved again")
	}
}

// The first outbox pass runs as the publisher starts: what a stopped
// process left unsent goes out at once, not a tick later.
func TestTheOutboxIsLookedAtAsThePublisherStarts(t *testing.T) {
	store := &fakeOutbox{}
	// The tick is an hour and the sweep's timer 15 s at this RequeueAfter:
	// only a pass at start comes within the wait.
	startPublisherWith(t, sqstest.New(t, 30*time.Second).Open(t), store,
		outbox.Config{RequeueAfter: time.Hour, Tick: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	eventually(t, 5*time.Second, func() bool { passes, _ := store.progress(); return passes > 0 }, "an outbox pass as the publisher starts")
}
