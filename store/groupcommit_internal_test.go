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

// A lone request that may wait, at a low rate, waits for company, and
// runs once two others have come.
func TestGroupCommitLingerGathersRequestsArrivingOneAtATime(t *testing.T) {
	t.Parallel()
	g, batches := lingering(time.Hour, 64)
	first := goDo(g, 2)
	waitQueued(t, g, 1)
	second := goDo(g, 4)
	waitQueued(t, g, 2)
	third := goDo(g, 6)
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
	g, batches := lingering(time.Hour, 64)
	first := goDo(g, 2)
	waitQueued(t, g, 1)
	urgent := goDo(g, 1)
	<-first
	<-urgent
	if got := batches(); len(got) != 1 || len(got[0]) != 2 {
		t.Errorf("batches %v; want the waiting request and the urgent one together", got)
	}
	// Alone and urgent: no linger at all.
	<-goDo(g, 3)
	if got := batches(); len(got) != 2 || len(got[1]) != 1 {
		t.Errorf("batches %v; want the lone urgent request run alone", got)
	}

	full, fullBatches := lingering(time.Hour, 2)
	a := goDo(full, 2)
	waitQueued(t, full, 1)
	<-goDo(full, 4)
	<-a
	if got := fullBatches(); len(got) != 1 || len(got[0]) != 2 {
		t.Errorf("batches %v; want a full batch of two run at once", got)
	}
}

// Requests closer together than lingerGap (load) never wait: a request
// alone right after another runs at once, not after the linger (an hour).
func TestGroupCommitLingerWaitsOnlyAtALowRate(t *testing.T) {
	t.Parallel()
	g, batches := lingering(time.Hour, 64)
	g.lingerGap = time.Hour
	first := goDo(g, 2) // the first request came long after "the one before"
	waitQueued(t, g, 1)
	<-goDo(g, 1) // ends its wait
	<-first
	<-goDo(g, 4) // within the hour of the last: no wait
	if got := batches(); len(got) != 2 || len(got[1]) != 1 {
		t.Errorf("batches %v; want the close request run alone at once", got)
	}
}
