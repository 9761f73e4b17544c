package router

import (
	"context"
	"errors"
	"time"

	"github.com/dispatchhq/dispatch/handoff"
)

// Offers is the API that hands this router the pointers of jobs it has
// just created (split mode; see package handoff), and takes back those the
// router cannot finish.
type Offers interface {
	Take(ctx context.Context, req handoff.Request) ([]handoff.Offer, error)
	GiveBack(ctx context.Context, h handoff.Handle, after time.Duration) error
}

// intake asks Config.Offers for new jobs for the pools with an idle worker,
// one long poll at a time, and takes what comes in process (Offer), until
// ctx ends. The queue's receives go on beside it: whatever the API does
// not offer (grouped jobs, jobs naming a queue, jobs created while no
// request waits, other replicas' jobs) comes through the queue.
func (r *Router) intake(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		room, wait := r.idleRoom()
		if len(room) == 0 {
			select {
			case <-wait:
			case <-ctx.Done():
			}
			continue
		}
		asked := time.Now()
		offers, err := r.cfg.Offers.Take(ctx, handoff.Request{Room: room, Queues: r.queueNames(),
			WaitSeconds: max(int(r.cfg.ReceiveWait/time.Second), 1)})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, handoff.ErrNotOffered) {
				r.log.Info("the processing endpoint offers this router no new jobs; taking them from its queues only, asking again in a minute", "reason", err)
				sleepCtx(ctx, time.Minute)
				continue
			}
			r.log.Warn("could not take offered jobs; they go through the queue meanwhile", "err", err, "backoff", backoff.String())
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(offers) == 0 && time.Since(asked) < time.Second {
			sleepCtx(ctx, time.Second) // the API waits less than asked: do not spin
		}
		for _, o := range offers {
			h := o.Handle
			giveBack := func(after time.Duration) { r.giveBack(h, after) }
			if !r.offer(o.Pointer, o.TraceContext, giveBack, &h) {
				// Its room went meanwhile, the router is stopping, or a
				// copy of it is held already.
				r.metrics.localRequeued.WithLabelValues(requeueNoRoom).Inc()
				giveBack(0)
			}
		}
	}
}

// queueNames names the queues the router consumes.
func (r *Router) queueNames() []string {
	names := make([]string, len(r.sources))
	for i, s := range r.sources {
		names[i] = s.name
	}
	return names
}

// idleRoom is the idle workers of each pool that takes jobs in process
// (no rate limit, not draining), or, when none has any, a channel closed
// when a held message goes.
func (r *Router) idleRoom() (map[string]int, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var room map[string]int
	if len(r.groups) < r.maxHeld {
		for code, p := range r.pools {
			if p.draining || p.rate() > 0 {
				continue
			}
			if n := min(p.workers, p.concurrency) - p.inFlight - p.buffered; n > 0 {
				if room == nil {
					room = map[string]int{}
				}
				room[code] = min(n, handoff.MaxPerPool)
			}
		}
	}
	if room != nil {
		return room, nil
	}
	if r.space == nil {
		r.space = make(chan struct{})
	}
	return nil, r.space
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
