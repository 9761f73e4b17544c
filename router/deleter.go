package router

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch/router/queue"
)

// deleter batches deletes. A message whose FIFO group holds later jobs
// (a grouped job) blocks that group on the queue until it is deleted, so
// it waits at most groupedLinger for others to share its
// DeleteMessageBatch call. Any other finished message blocks nothing: it
// waits up to ungroupedLinger, so that at a few hundred deliveries a second
// deletes go ten to a call instead of one, off every delivery's critical
// path. Should the router die meanwhile, the messages come back after
// their visibility timeout and their jobs, already finished, are
// acknowledged again. With nothing pending it sleeps: an idle router does
// not wake for it.
type deleter struct {
	q   *queue.Queue
	log *slog.Logger
	// failed is told of deletes that failed after their retries, and how
	// many (nil: only logged).
	failed func(n int, err error)
	mu     sync.Mutex
	pend   []string
	due    time.Time     // when the pending receipts must go, at the latest
	kick   chan struct{} // due moved earlier, or ten receipts wait
	lazy   time.Duration // how long an ungrouped receipt may wait
}

const (
	groupedLinger   = 5 * time.Millisecond
	ungroupedLinger = time.Second
)

func newDeleter(q *queue.Queue, log *slog.Logger, failed func(n int, err error)) *deleter {
	return &deleter{q: q, log: log, failed: failed, kick: make(chan struct{}, 1), lazy: ungroupedLinger}
}

// setVisibility tells the deleter how long its queue's messages stay
// invisible once received: an ungrouped receipt waits a quarter of that at
// most, so that the message is gone well before it would come back.
func (d *deleter) setVisibility(vis time.Duration) {
	d.mu.Lock()
	d.lazy = max(min(ungroupedLinger, vis/4), groupedLinger)
	d.mu.Unlock()
}

// add queues a finished message's receipt; grouped says whether later
// messages of its FIFO group wait behind it.
func (d *deleter) add(receipt string, grouped bool) {
	d.mu.Lock()
	due := time.Now().Add(d.lazy)
	if grouped {
		due = time.Now().Add(groupedLinger)
	}
	d.pend = append(d.pend, receipt)
	wake := len(d.pend) >= 10
	if len(d.pend) == 1 || due.Before(d.due) {
		d.due, wake = due, true
	}
	d.mu.Unlock()
	if wake {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

func (d *deleter) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		d.mu.Lock()
		n, wait := len(d.pend), time.Until(d.due)
		d.mu.Unlock()
		if n >= 10 || (n > 0 && wait <= 0) {
			d.flush(ctx)
			continue
		}
		var expired <-chan time.Time
		if n > 0 {
			timer.Reset(wait)
			expired = timer.C
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-expired:
		case <-d.kick:
			timer.Stop()
		}
	}
}

// flush deletes everything pending. A failed delete only means the
// message comes back and its job, already terminal, is acknowledged again.
func (d *deleter) flush(ctx context.Context) {
	d.mu.Lock()
	pend := d.pend
	d.pend = nil
	d.mu.Unlock()
	if len(pend) == 0 {
		return
	}
	// Shutdown must not cut a delete short: the messages would come back.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	del := func(c []string) error { return d.q.DeleteBatch(ctx, c) }
	// A grouped message left undeleted holds its group until its
	// visibility ends.
	err := retrySQSSide(ctx, chunks(pend, del), deletesToRetry, del)
	if err != nil {
		d.log.Warn("delete failed; the messages will come back and be acknowledged again", "err", err)
		if d.failed != nil {
			d.failed(failedDeletes(err, len(pend)), err)
		}
	}
}

// deletesToRetry is e's deletes SQS failed on its side, and the rest of e.
func deletesToRetry(e error) ([]string, error) {
	var de *queue.DeleteError
	if !errors.As(e, &de) || len(de.Retry) == 0 {
		return nil, e
	}
	if n := de.Failed - len(de.Retry); n > 0 {
		return de.Retry, &queue.DeleteError{Failed: n, Message: de.Message}
	}
	return de.Retry, nil
}

// retrySQSSide sends again, twice at most and a moment apart, the entries
// of a batch call's error (err, a join of them) that SQS failed on its side
// (retryOf picks them out of each error, and gives back the rest), and
// returns what still failed.
func retrySQSSide[T any](ctx context.Context, err error, retryOf func(error) ([]T, error), again func([]T) error) error {
	for try := 1; try <= 2 && err != nil; try++ {
		var (
			retry []T
			rest  []error
		)
		for _, e := range flatten(err) {
			r, other := retryOf(e)
			retry = append(retry, r...)
			if other != nil {
				rest = append(rest, other)
			}
		}
		if len(retry) == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
		err = errors.Join(append(rest, again(retry))...)
	}
	return err
}

// failedDeletes is how many of n deletes err says failed: each
// DeleteError's count, or a whole chunk of ten for a call that failed
// outright, at most n.
func failedDeletes(err error, n int) int {
	total := 0
	for _, e := range flatten(err) {
		var de *queue.DeleteError
		if errors.As(e, &de) {
			total += de.Failed
		} else {
			total += 10
		}
	}
	return min(total, n)
}
