package router

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// deleter batches deletes: a finished message waits at most deleteLinger
// for nine others to share its DeleteMessageBatch call. With nothing
// pending it sleeps: an idle router does not wake for it.
type deleter struct {
	q    *Queue
	log  *slog.Logger
	mu   sync.Mutex
	pend []string
	kick chan struct{} // the first receipt is pending, or ten are
}

const deleteLinger = 5 * time.Millisecond

func newDeleter(q *Queue, log *slog.Logger) *deleter {
	return &deleter{q: q, log: log, kick: make(chan struct{}, 1)}
}

func (d *deleter) add(receipt string) {
	d.mu.Lock()
	d.pend = append(d.pend, receipt)
	n := len(d.pend)
	d.mu.Unlock()
	if n == 1 || n >= 10 {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

func (d *deleter) run(ctx context.Context) {
	linger := time.NewTimer(deleteLinger)
	linger.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		d.mu.Lock()
		full := len(d.pend) >= 10
		d.mu.Unlock()
		if !full {
			linger.Reset(deleteLinger)
			select {
			case <-ctx.Done():
				linger.Stop()
				return
			case <-linger.C:
			case <-d.kick:
				linger.Stop()
			}
		}
		d.flush(ctx)
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
	if err := chunks(pend, func(c []string) error { return d.q.DeleteBatch(ctx, c) }); err != nil {
		d.log.Warn("delete failed; the messages will come back and be acknowledged again", "err", err)
	}
}
