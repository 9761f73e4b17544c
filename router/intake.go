package router

import (
	"context"
	"errors"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
)

// Offers is the API that hands this router the pointers of jobs it has
// just created (split mode; see package handoff), and takes back those the
// router cannot finish.
type Offers interface {
	Take(ctx context.Context, req handoff.Request) ([]handoff.Offer, error)
	GiveBack(ctx context.Context, h handoff.Handle, after time.Duration) error
}

// intakeLoops is how many requests for new jobs a router keeps open at
// once, each for room the others have not asked for. With one, the jobs
// created between its answer and the next request went through the
// queue: at full load, half of them. Four leave almost none to the queue
// (more gained nothing; see docs/benchmarks.md), and at a low rate the
// ones not answered just wait. A request asks for at most
// handoff.MaxPerPool jobs a pool, so only a pool with more idle workers
// than that keeps more than one open.
const intakeLoops = 4

// intake asks Config.Offers for new jobs for the pools with an idle worker,
// one long poll at a time, and takes what comes in process (Offer), until
// ctx ends. intakeLoops of them run, each asking for the room the others
// have not asked for. The queue's receives go on beside them: whatever
// the API does not offer (grouped jobs, jobs naming a queue, jobs created
// while no request waits, other replicas' jobs) comes through the queue.
func (r *Router) intake(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		room, promised, wait := r.promiseRoom()
		if room == nil {
			select {
			case <-wait:
			case <-ctx.Done():
			}
			continue
		}
		if pause := r.takeOffers(ctx, room, promised, &backoff); pause > 0 {
			sleepCtx(ctx, pause)
		}
	}
}

// takeOffers asks the API for up to room's new jobs once, takes what comes
// into the pools, gives the room back, and returns how long to wait before
// asking again.
func (r *Router) takeOffers(ctx context.Context, room map[string]int, promised []promise, backoff *time.Duration) time.Duration {
	given := false
	giveRoom := func() {
		if !given {
			given = true
			r.unpromise(promised)
		}
	}
	defer giveRoom()
	asked := time.Now()
	offers, err := r.cfg.Offers.Take(ctx, handoff.Request{Room: room, Queues: r.queueNames,
		WaitSeconds: max(int(r.cfg.ReceiveWait/time.Second), 1)})
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		if errors.Is(err, handoff.ErrNotOffered) {
			if r.notOffered.CompareAndSwap(false, true) { // once, not once per loop
				r.log.Info("the processing endpoint offers this router no new jobs; taking them from its queues only, asking again every minute", "reason", err)
			}
			return time.Minute
		}
		d := *backoff
		*backoff = min(2*d, 10*time.Second)
		r.log.Warn("could not take offered jobs; they go through the queue meanwhile", "err", err, "backoff", d.String())
		return d
	}
	*backoff = 100 * time.Millisecond
	if r.notOffered.CompareAndSwap(true, false) {
		r.log.Info("the processing endpoint offers this router new jobs again")
	}
	// An answer that came as the router began to stop is taken all the
	// same: the stop gives back what has not started.
	var declined []handoff.Handle
	for _, o := range offers {
		h := o.Handle
		giveBack := func(after time.Duration) { r.giveBack(h, after) }
		if !r.offer(o.Pointer, o.TraceContext, giveBack, &h) {
			// Its room went meanwhile, or a copy of it is held already.
			r.metrics.localRequeued.WithLabelValues(requeueNoRoom).Inc()
			declined = append(declined, h)
		}
	}
	giveRoom() // before the give-backs' requests: other loops may ask meanwhile
	for _, h := range declined {
		r.giveBack(h, 0)
	}
	if len(offers) == 0 && time.Since(asked) < time.Second {
		return time.Second // the API waits less than asked: do not spin
	}
	return 0
}

// promise is room a request for new jobs has asked for in a pool.
type promise struct {
	pool *Pool
	n    int
}

// promiseRoom takes the idle workers of each pool that takes jobs in
// process (no rate limit, not draining) that no other request has asked
// for, up to handoff.MaxPerPool, for one request; unpromise gives them
// back once it is answered. Together the requests ask for no more jobs
// than the router may hold (maxHeld), and one names at most
// handoff.MaxPools pools. When no pool has any, it returns a channel
// closed when a held message goes or a request's room is given back.
func (r *Router) promiseRoom() (map[string]int, []promise, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	left := r.maxHeld - len(r.groups)
	for _, p := range r.pools {
		left -= p.promised
	}
	var room map[string]int
	var promised []promise
	for code, p := range r.pools {
		if left <= 0 || len(room) == handoff.MaxPools {
			break
		}
		// A code no job can name (dispatch.MaxPoolCodeLen) is never offered.
		if p.draining || p.rate() > 0 || len(code) > dispatch.MaxPoolCodeLen {
			continue
		}
		if n := min(p.workers, p.concurrency) - p.inFlight - p.buffered - p.promised; n > 0 {
			if room == nil {
				room = map[string]int{}
			}
			n = min(n, handoff.MaxPerPool, left)
			room[code] = n
			p.promised += n
			left -= n
			promised = append(promised, promise{p, n})
		}
	}
	if room != nil {
		return room, promised, nil
	}
	if r.space == nil {
		r.space = make(chan struct{})
	}
	return nil, nil, r.space
}

// unpromise gives back the room a request asked for.
func (r *Router) unpromise(promised []promise) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pr := range promised {
		pr.pool.promised -= pr.n
	}
	r.wakeReceivers()
}

// giveBack has the API put an offered job on the queue after all. Should
// the API not take it, the job's send lease ends and the outbox's sweep
// sends it then: later, never lost.
func (r *Router) giveBack(h handoff.Handle, after time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.cfg.Offers.GiveBack(ctx, h, after); err != nil {
		r.log.Warn("could not give an offered job back to the API; the outbox's sweep sends it when its send lease ends",
			"job_id", h.ID, "err", err)
	}
}
