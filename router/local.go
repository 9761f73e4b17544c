package router

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
)

// LocalBackstop is how long a pointer taken in process (Offer) may wait in
// its lane for a worker: one still waiting then leaves the lane and goes
// onto the queue, where any replica's router may take it. Once its
// mediation has started it stays: the processor writes the claim of a
// delivery that runs past a second and stretches the job's send lease to
// the claim's end, so should this process die, the outbox's sweep sends
// the pointer once the claim has gone stale (store.RecordClaim). Sending a
// copy instead would let another replica claim the job, still PENDING in
// the database in that second, and deliver it twice.
const LocalBackstop = 500 * time.Millisecond

// local is what a message taken in process carries instead of a receipt:
// how to put its pointer on the queue, once, and the timer that moves it
// there should it wait LocalBackstop for a worker.
type local struct {
	once     sync.Once
	requeue  func(after time.Duration)
	backstop *time.Timer
	// handle is the job's as it was handed over, by this process or by
	// an API that offered it (split mode). Its mediation carries it
	// (handoff.WithHandle): the processor claims the job it names without
	// a statement, as no other copy of this pointer can have claimed it
	// (store.ClaimJob), and for an offered job the API takes the retry
	// back itself.
	handle *handoff.Handle
}

// Why a job taken in process went onto the queue after all
// (dispatch_router_local_requeued_total's reason).
const (
	requeueRetry    = "retry"    // its delivery is to be retried
	requeueStop     = "stop"     // the router stopped before or during its delivery
	requeueBackstop = "backstop" // it waited LocalBackstop for a worker
	requeueNoRoom   = "no_room"  // offered by the API after its room had gone (split mode)
)

// send puts the pointer on the queue, to be mediated after the delay, and
// reports whether this call did (only the first does).
func (l *local) send(after time.Duration) (sent bool) {
	l.once.Do(func() {
		l.requeue(after)
		sent = true
	})
	return sent
}

// requeued sends l's pointer to the queue and counts it by why.
func (r *Router) requeued(l *local, after time.Duration, why string) {
	if l.send(after) {
		r.metrics.localRequeued.WithLabelValues(why).Inc()
	}
}

// givenBack notes that the processing endpoint put the job back in its
// outbox itself: nothing is left to send.
func (r *Router) givenBack(l *local) {
	first := false
	l.once.Do(func() { first = true }) // sends nothing
	if first {
		r.metrics.localRequeued.WithLabelValues(requeueRetry).Inc()
	}
}

// done stops the backstop: the mediation has ended.
func (l *local) done() { l.backstop.Stop() }

// Offer takes the pointer of a job this process has just created and
// committed straight into its pool, when a worker there is idle or soon
// will be: the job is mediated without a round trip through the queue
// (SQS requests, the queue's latency). It declines, and the caller sends
// the pointer to the queue as usual, when the router is not running or is
// stopping, when the pointer names an unknown or removed pool or one with
// a rate limit, when the pool's workers are busy and its buffer (the
// router's Buffer) full or the router has no room, and for grouped jobs (a
// group's order is kept by the queue and the lanes together).
//
// requeue puts the pointer on the queue, to be mediated after the delay it
// is given. It is called at most once: when the mediation did not end the
// job (its retry goes through the queue when due), when the router stops
// before the mediation starts or cancels it (no delay), or when the job
// waited LocalBackstop for a worker (no delay). A job whose pointer is
// lost otherwise (the process dies) still carries its send lease in the
// database, and the outbox's sweep sends it when the lease ends.
func (r *Router) Offer(u dispatch.Unsent, ptr dispatch.Pointer, requeue func(after time.Duration)) bool {
	h := handoff.HandleOf(u)
	return r.offer(ptr, u.TraceContext, requeue, &h)
}

// offer is Offer, for a pointer handed over with its handle: by this
// process's publisher, or offered by an API.
func (r *Router) offer(ptr dispatch.Pointer, traceContext string, requeue func(after time.Duration), h *handoff.Handle) bool {
	if ptr.MessageGroupID != "" && ptr.MessageGroupID != ptr.ID {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running || r.stopping {
		return false
	}
	p := r.pools[ptr.PoolCode]
	if p == nil || p.draining || p.rate() > 0 {
		return false
	}
	// The room a receive has reserved is not counted: its long poll may
	// hold it for seconds while nothing comes, and what it brings is
	// bounded by the room left when it asked.
	if p.inFlight+p.buffered >= min(p.workers, p.concurrency)+r.cfg.Buffer || len(r.groups) >= r.maxHeld {
		return false
	}
	if _, busy := r.groups[ptr.ID]; busy { // a copy of it is held already
		return false
	}
	seq := ptr.Sequence
	if seq == 0 {
		seq, _ = dispatch.ParseID(ptr.ID)
	}
	l := &local{requeue: requeue, handle: h}
	m := &message{received: time.Now(), ptr: ptr, seq: seq, group: ptr.ID, pool: p, local: l}
	m.ID = "local:" + ptr.ID
	l.backstop = time.AfterFunc(LocalBackstop, func() { r.moveToQueue(m) })
	if r.cfg.Tracer.Enabled() {
		m.traced = r.startLocal(ptr, traceContext, p)
	}
	r.metrics.local.Inc()
	r.hold(m)
	p.add(m)
	return true
}

// moveToQueue puts a message taken in process that still waits for a
// worker onto the queue instead; one whose mediation has started stays.
func (r *Router) moveToQueue(m *message) {
	r.mu.Lock()
	if !m.started.IsZero() || !m.pool.remove(m) {
		r.mu.Unlock()
		return
	}
	r.unhold(m)
	r.mu.Unlock()
	if m.traced != nil {
		trace.SpanFromContext(m.traced).End()
	}
	r.requeued(m.local, 0, requeueBackstop)
}

// startLocal starts the span of a pointer taken in process: an INTERNAL
// span in the trace of the job's create, open until its mediation ends.
func (r *Router) startLocal(ptr dispatch.Pointer, traceContext string, p *Pool) context.Context {
	ctx := r.cfg.Tracer.Decode(context.Background(), traceContext)
	ctx, _ = r.cfg.Tracer.Start(ctx, "deliver in process", trace.SpanKindInternal,
		attribute.String("messaging.consumer.group.name", p.code),
		attribute.String("dispatch.job.id", ptr.ID))
	return ctx
}

// queueName is the name of the queue m came from ("" for one taken in
// process).
func (m *message) queueName() string {
	if m.src == nil {
		return ""
	}
	return m.src.name
}
