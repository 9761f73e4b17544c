package store

import (
	"cmp"
	"sync"
	"time"
)

// groupCommit runs requests that arrive together as one batch: one
// statement, one transaction, one round trip for many callers, each of which
// still waits for its own result. There is no background goroutine and no
// timer: the first caller to find no batch running becomes the leader and
// runs whatever is pending (itself included); requests that arrive while a
// batch runs wait, and the first of them leads the next batch. So a lone
// request runs at once, and under load batches grow by themselves.
//
// With linger set, requests that arrive one at a time may share a
// transaction too: a leader that finds itself alone, may wait (mayWait)
// and came lingerGap or more after the request before it (a low rate)
// waits up to linger for company, and runs as soon as lingerCompany
// requests are queued, one that may not wait arrives, or the batch is
// full. Under load requests come closer together than lingerGap and
// nothing waits: there a wait would only hold each caller longer.
type groupCommit[Req, Res any] struct {
	max  int                              // largest batch
	exec func(batch []*pending[Req, Res]) // sets every item's res and err

	linger    time.Duration
	lingerGap time.Duration // 0: linger/5
	mayWait   func(Req) bool
	wake      chan struct{} // a lingering leader is to run now
	lastAt    time.Time     // when the last request arrived

	mu      sync.Mutex
	queue   []*pending[Req, Res]
	running bool
}

// lingerCompany is the batch a lingering leader waits for.
const lingerCompany = 3

type pending[Req, Res any] struct {
	req  Req
	gap  time.Duration // since the request before it arrived (with a linger)
	res  Res
	err  error
	done chan struct{} // closed when res and err are set
	lead chan struct{} // signalled when this request is to lead the next batch
}

func (g *groupCommit[Req, Res]) do(req Req) (Res, error) {
	p := &pending[Req, Res]{req: req, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	g.mu.Lock()
	if g.linger > 0 {
		now := time.Now()
		p.gap, g.lastAt = now.Sub(g.lastAt), now
	}
	g.queue = append(g.queue, p)
	if g.running {
		if g.linger > 0 && (len(g.queue) >= min(lingerCompany, g.max) || !g.mayWait(req)) {
			select {
			case g.wake <- struct{}{}:
			default:
			}
		}
		g.mu.Unlock()
		select {
		case <-p.done:
			return p.res, p.err
		case <-p.lead:
		}
	} else {
		g.running = true
		g.mu.Unlock()
	}
	g.runBatch()
	<-p.done
	return p.res, p.err
}

// runBatch executes up to max pending requests, then hands the lead to the
// oldest request still waiting, if any.
func (g *groupCommit[Req, Res]) runBatch() {
	g.mu.Lock()
	if g.linger > 0 && len(g.queue) == 1 && g.mayWait(g.queue[0].req) && g.queue[0].gap >= cmp.Or(g.lingerGap, g.linger/5) {
		select { // a wake-up from before this wait is for no one
		case <-g.wake:
		default:
		}
		g.mu.Unlock()
		t := time.NewTimer(g.linger)
		select {
		case <-t.C:
		case <-g.wake:
			t.Stop()
		}
		g.mu.Lock()
	}
	n := min(len(g.queue), g.max)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	g.exec(batch)
	for _, p := range batch {
		close(p.done)
	}

	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].lead <- struct{}{}
	} else {
		g.running = false
	}
	g.mu.Unlock()
}
