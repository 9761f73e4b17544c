package app

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Scrapes that come together, or within scrapeShare of a read, share it:
// fifty at once read once, and the next read comes only once the share has
// passed.
func TestScrapesShareOneRead(t *testing.T) {
	var (
		reads atomic.Int32
		clock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		mu    sync.Mutex
	)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	read := sharedRead(scrapeShare, now, func(context.Context) (int32, error) { return reads.Add(1), nil })
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if v, err := read(t.Context()); v != 1 || err != nil {
				t.Errorf("a scrape got %d, %v; want the one read's 1", v, err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	clock = clock.Add(scrapeShare - time.Millisecond)
	mu.Unlock()
	if v, _ := read(t.Context()); v != 1 {
		t.Errorf("within the share: read %d, want the first read's answer", v)
	}
	mu.Lock()
	clock = clock.Add(time.Millisecond)
	mu.Unlock()
	if v, _ := read(t.Context()); v != 2 || reads.Load() != 2 {
		t.Errorf("after the share: %d (of %d reads), want a second read", v, reads.Load())
	}
}
