package procs

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Goroutines that outnumber the Ps wait for one, and the meter reads it.
func TestTheWaitMeterReadsGoroutinesQueuedForOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	m := newWaitMeter()
	const spinners, spin = 16, 200 * time.Millisecond
	var wg sync.WaitGroup
	until := time.Now().Add(spin)
	for range spinners {
		wg.Go(func() {
			for time.Now().Before(until) {
				runtime.Gosched() // runnable again, behind the others
			}
		})
	}
	wg.Wait()
	// Each spinner waited most of the spin for the one P: 16 of them some
	// 3 s in all, of which the runtime records a sample (an eighth: 0.38 s
	// here, run after run).
	if got := m.read(); got < 0.1 {
		t.Errorf("16 goroutines on one P for %s: %.3f s of waiting read, want at least 0.1", spin, got)
	}
	if got := m.read(); got > 0.05 {
		t.Errorf("a second read right after: %.3f s, want only what was recorded since the first", got)
	}
}
