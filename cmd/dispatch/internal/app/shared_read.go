package app

import (
	"context"
	"sync"
	"time"
)

// scrapeShare is how long one read of the database or the queue answers
// every /metrics scrape: /metrics takes no token, and each scrape ran the
// backlog statement, the storage's catalog reads and a GetQueueAttributes
// (billed), however many scrapers came.
const scrapeShare = 5 * time.Second

// sharedRead returns read, its answer (error included) reused for every
// call within every of it; calls that come while it runs wait for it
// rather than read again.
func sharedRead[T any](every time.Duration, now func() time.Time, read func(context.Context) (T, error)) func(context.Context) (T, error) {
	var (
		mu   sync.Mutex
		at   time.Time
		last T
		err  error
	)
	return func(ctx context.Context) (T, error) {
		mu.Lock()
		defer mu.Unlock()
		if at.IsZero() || now().Sub(at) >= every {
			last, err = read(ctx)
			at = now()
		}
		return last, err
	}
}
