package router_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// Finished messages are deleted: a lone grouped one after the deleter's
// short linger, a full batch at once, and again after the deleter has been idle
// (it sleeps with nothing pending and must wake for the next receipt).
func TestDeleterDeletesFinishedMessages(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 60*time.Second) // nothing comes back by itself during the test
	rq := q.Open(t)
	ctx := t.Context()
	var entries []queue.Entry
	for i := range 10 {
		entries = append(entries, queue.Entry{Body: "m", GroupID: fmt.Sprint("g", i), DeduplicationID: strconv.Itoa(i)})
	}
	if _, err := rq.SendBatch(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if _, err := rq.SendBatch(ctx, []queue.Entry{{Body: "m", GroupID: "g", DeduplicationID: "10"}}); err != nil {
		t.Fatal(err)
	}
	receipts := receiveAll(t, rq, 11)
	held := func() int {
		a, err := q.Attributes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(a["ApproximateNumberOfMessagesNotVisible"])
		return n
	}

	d := router.NewDeleter(rq, slog.New(slog.DiscardHandler))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(runCtx) }()
	defer func() { stop(); <-done }()

	d.Add(receipts[0], true)
	eventually(t, 5*time.Second, func() bool { return held() == 10 }, "the lone finished message deleted")
	// The deleter has been idle since that delete: the next receipts must wake it.
	for _, r := range receipts[1:] {
		d.Add(r, false)
	}
	eventually(t, 5*time.Second, func() bool { return held() == 0 }, "the ten finished messages deleted")
}

// At a trickle of finished ungrouped messages (nothing waits behind them
// in their FIFO group) the deletes share calls instead of going one by one:
// ten receipts 20 ms apart, which the grouped linger would send as ten
// calls, go in one or two.
func TestDeleterBatchesUngroupedDeletesAtATrickle(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 60*time.Second)
	var deletes atomic.Int64
	target, err := url.Parse(sqstest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessageBatch" {
			deletes.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer counted.Close()
	cfg := q.Config()
	cfg.Endpoint = counted.URL
	rq, err := queue.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var entries []queue.Entry
	for i := range 10 {
		entries = append(entries, queue.Entry{Body: "m", GroupID: fmt.Sprint("g", i), DeduplicationID: strconv.Itoa(i)})
	}
	if _, err := rq.SendBatch(ctx, entries); err != nil {
		t.Fatal(err)
	}
	receipts := receiveAll(t, rq, 10)

	d := router.NewDeleter(rq, slog.New(slog.DiscardHandler))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(runCtx) }()
	defer func() { stop(); <-done }()
	pace := time.NewTicker(20 * time.Millisecond) // the trickle's pace, not a wait for a result
	defer pace.Stop()
	for _, r := range receipts {
		<-pace.C
		d.Add(r, false)
	}
	eventually(t, 10*time.Second, func() bool {
		a, err := q.Attributes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return a["ApproximateNumberOfMessagesNotVisible"] == "0"
	}, "the ten finished messages deleted")
	if n := deletes.Load(); n > 2 {
		t.Errorf("ten ungrouped deletes at 50/s took %d DeleteMessageBatch calls, want at most 2", n)
	}
}

// receiveAll receives from q until it holds n receipts.
func receiveAll(t *testing.T, q *queue.Queue, n int) []string {
	t.Helper()
	var receipts []string
	for len(receipts) < n {
		msgs, err := q.Receive(t.Context(), 10, time.Second, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			receipts = append(receipts, m.Receipt)
		}
	}
	return receipts
}

// A delete SQS fails on its side (an internal error, not the sender's
// fault) is tried again: left undeleted, a grouped message holds its group
// until its visibility ends (30 s here), and the group's next job waits.
func TestADeleteSQSFailsOnItsSideIsTriedAgain(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	var failed atomic.Bool
	rq := proxiedQueue(t, q, func(w http.ResponseWriter, r *http.Request, _ []byte, _ func()) bool {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessageBatch" && failed.CompareAndSwap(false, true) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			_, _ = io.WriteString(w, `{"Successful":[],"Failed":[{"Id":"0","SenderFault":false,"Code":"InternalError","Message":"try again"}]}`)
			return true
		}
		return false
	})
	mediated := make(chan string, 4)
	b := setupOn(t, q, rq, 2, func(ptr dispatch.Pointer, _ int) error {
		mediated <- ptr.ID
		return nil
	})
	for _, want := range []string{"1", "2"} {
		// 2 is sent once 1 is done: it is received only once 1 is deleted
		// (the group is held while 1 is in flight).
		n, _ := strconv.Atoi(want)
		b.send(t, "g", n)
		select {
		case id := <-mediated:
			if id != want {
				t.Fatalf("mediated %s, want %s", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("job %s not mediated within 10 s (the first delete failed on SQS's side: was it tried again?)", want)
		}
	}
	if !failed.Load() {
		t.Error("no delete went through the failing proxy")
	}
}

// A release SQS fails on its side (a retry's visibility change failed with
// an internal error) is tried again: left undone, the message would stay
// hidden for its whole visibility (30 s here), not the retry's second.
func TestAReleaseSQSFailsOnItsSideIsTriedAgain(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	var failed atomic.Bool
	rq := proxiedQueue(t, q, func(w http.ResponseWriter, r *http.Request, body []byte, _ func()) bool {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ChangeMessageVisibilityBatch" &&
			bytes.Contains(body, []byte(`"VisibilityTimeout":1`)) && failed.CompareAndSwap(false, true) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			_, _ = io.WriteString(w, `{"Successful":[],"Failed":[{"Id":"0","SenderFault":false,"Code":"InternalError","Message":"try again"}]}`)
			return true
		}
		return false
	})
	again := make(chan struct{})
	b := setupOn(t, q, rq, 1, func(_ dispatch.Pointer, call int) error {
		if call == 1 {
			return &dispatch.RetryAfter{Delay: time.Second, Reason: "target failed"}
		}
		close(again)
		return nil
	})
	b.send(t, "g", 1)
	select {
	case <-again:
	case <-time.After(10 * time.Second):
		t.Fatal("the released message did not come back within 10 s (its release failed on SQS's side: was it tried again?)")
	}
	if !failed.Load() {
		t.Error("no release went through the failing proxy")
	}
}
