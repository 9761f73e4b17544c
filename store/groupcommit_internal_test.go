package store

import (
	"sync"
	"testing"
	"time"
)

// lingering is a group commit of ints that records its batches; odd
// requests may not wait.
func lingering(linger time.Duration, max int) (*groupCommit[int, int], func() [][]int) {
	var mu sync.Mutex
	var batches [][]int
	g := &groupCommit[int, int]{max: max, linger: linger, wake: make(chan struct{}, 1),
		mayWait: func(r int) bool { return r%2 == 0 },
		exec: func(batch []*pending[int, int]) {
			var b []int
			for _, p := range batch {
				p.res = p.req
				b = append(b, p.req)
			}
			mu.Lock()
			batches = append(batches, b)
			mu.Unlock()
		}}
	return g, func() [][]int {
		mu.Lock()
		defer mu.Unlock()
		return batches
	}
}

// goDo runs g.do(r) in a goroutine; the channel gets its result.
func goDo(g *groupCommit[int, int], r int) chan int {
	c := make(chan int, 1)
	go func() {
		res, _ := g.do(r)
		c <- res
	}()
	return c
}

// waitQueued waits until n requests are queued behind a lingering leader.
func waitQueued(t *testing.T, g *groupCommit[int, int], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		q := len(g.queue)
		g.mu.Unlock()
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued after 10s, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lone request that may wait waits for company, and those arriving
// within the linger share its batch.
func TestGroupCommitLingerGathersRequestsArrivingOneAtATime(t *testing.T) {
	t.Parallel()
	g, batches := lingering(200*time.Millisecond, 64)
	first := goDo(g, 2)
	waitQueued(t, g, 1)
	second, third := goDo(g, 4), goDo(g, 6)
	for _, c := range []chan int{first, second, third} {
		<-c
	}
	if got := batches(); len(got) != 1 || len(got[0]) != 3 {
		t.Errorf("batches %v; want the three requests in one", got)
	}
}

// A request that may not wait cuts the linger short, and so does a full
// batch: neither waits for the timer (an hour here).
func TestGroupCommitLingerEndsForARequestThatMayNotWait(t *testing.T) {
	t.Parallel()
	g, batches := lingering(time.Hour, 3)
	first := goDo(g, 2)
	waitQueued(t, g, 1)
	urgent := goDo(g, 1)
	<-first
	<-urgent
	if got := batches(); len(got) != 1 || len(got[0]) != 2 {
		t.Errorf("batches %v; want the waiting request and the urgent one together", got)
	}

	full := []chan int{goDo(g, 2)}
	waitQueued(t, g, 1)
	full = append(full, goDo(g, 4), goDo(g, 6))
	for _, c := range full {
		<-c
	}
	if got := batches(); len(got) != 2 || len(got[1]) != 3 {
		t.Errorf("batches %v; want a full batch of three run at once", got)
	}

	// Alone and urgent: no linger at all.
	<-goDo(g, 3)
	if got := batches(); len(got) != 3 || len(got[2]) != 1 {
		t.Errorf("batches %v; want the lone urgent request run alone", got)
	}
}
