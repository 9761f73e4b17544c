package router_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// Finished messages are deleted: a lone one after the deleter's short
// linger, a full batch at once, and again after the deleter has been idle
// (it sleeps with nothing pending and must wake for the next receipt).
func TestDeleterDeletesFinishedMessages(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 60*time.Second) // nothing comes back by itself during the test
	rq := q.Open(t)
	ctx := t.Context()
	var entries []router.Entry
	for i := range 10 {
		entries = append(entries, router.Entry{Body: "m", GroupID: fmt.Sprint("g", i), DeduplicationID: strconv.Itoa(i)})
	}
	if _, err := rq.SendBatch(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if _, err := rq.SendBatch(ctx, []router.Entry{{Body: "m", GroupID: "g", DeduplicationID: "10"}}); err != nil {
		t.Fatal(err)
	}
	var receipts []string
	for len(receipts) < 11 {
		msgs, err := rq.Receive(ctx, 10, time.Second, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			receipts = append(receipts, m.Receipt)
		}
	}
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

	d.Add(receipts[0])
	eventually(t, 5*time.Second, func() bool { return held() == 10 }, "the lone finished message deleted")
	// The deleter has been idle since that delete: the next receipts must wake it.
	for _, r := range receipts[1:] {
		d.Add(r)
	}
	eventually(t, 5*time.Second, func() bool { return held() == 0 }, "the ten finished messages deleted")
}
