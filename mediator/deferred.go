package mediator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
)

// deferredClaim is an attempt's claim the store has not written
// (dispatch.Claim.Deferred: the job was created here a moment ago). A quick
// delivery's claim is written with its outcome, in the record's one
// statement; a timer writes it once the delivery has run for claimAfter,
// so that a slow one shows IN_PROGRESS and holds its lease like any other.
// Its methods are no-ops on nil (a claim ClaimJob wrote).
type deferredClaim struct {
	p   *Processor
	log *slog.Logger
	job dispatch.Job

	mu      sync.Mutex  // held while the claim is written
	timer   *time.Timer // the timer's write (reset after a failed one)
	settled bool        // written, or left to the record
	decided bool        // the record need not write the claim: written, or the job moved on
	moved   bool        // the job moved on: the claim is not this attempt's to give back
}

// deferClaim starts the timer that writes j's claim if the delivery runs
// long.
func (p *Processor) deferClaim(ctx context.Context, log *slog.Logger, j dispatch.Job) *deferredClaim {
	dc := &deferredClaim{p: p, log: log, job: j}
	ctx = context.WithoutCancel(ctx)
	dc.mu.Lock()
	dc.timer = time.AfterFunc(p.claimAfter, func() { dc.writeWhileRunning(ctx) })
	dc.mu.Unlock()
	return dc
}

// writeWhileRunning is the timer's write: a delivery running long. Should
// it fail, it is tried again while the delivery runs, until the claim's
// lease ends: unwritten, the job stays PENDING under its send lease, which
// ends before a long delivery does, and the sweep would send its pointer
// to another replica.
func (dc *deferredClaim) writeWhileRunning(ctx context.Context) {
	if dc.write(ctx) != nil && dc.job.ClaimedUntil != nil && dc.p.now().Add(dc.p.claimAfter).Before(*dc.job.ClaimedUntil) {
		dc.mu.Lock()
		defer dc.mu.Unlock()
		if !dc.settled {
			dc.timer.Reset(dc.p.claimAfter) // runs this again
		}
	}
}

// write writes the claim now, unless it was written or settled already.
// A write that failed leaves it unsettled, and returns the error.
func (dc *deferredClaim) write(ctx context.Context) error {
	if dc == nil {
		return nil
	}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.settled {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	held, err := dc.p.store.RecordClaim(wctx, dc.job)
	if err == nil {
		dc.settled = true
	}
	switch {
	case err != nil:
		// Perhaps written: the record accepts the job in either state.
		dc.log.Warn("cannot write the claim of a delivery running long", "err", err)
	case !held:
		dc.decided, dc.moved = true, true
		dc.log.Warn("the job moved on during its delivery (cancelled, or claimed through another copy of its pointer)")
	default:
		dc.decided = true
	}
	return err
}

// movedOn reports whether writing the claim found the job moved on
// (cancelled, or claimed through another copy of its pointer).
func (dc *deferredClaim) movedOn() bool {
	if dc == nil {
		return false
	}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	return dc.moved
}

// settle stops the timer, waits for a write it started, and reports
// whether the claim may still be unwritten: the record then writes it
// (dispatch.Transition.ClaimDeferred).
func (dc *deferredClaim) settle() bool {
	if dc == nil {
		return false
	}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	dc.timer.Stop() // under the lock: a failed write resets it
	dc.settled = true
	return !dc.decided
}
