// Package router is dispatch's message router: it long-polls one or more
// SQS FIFO queues for message pointers and feeds them into bounded processing pools,
// whose workers hand each pointer to a Mediator. Messages of one group are
// mediated one at a time in queue order; other groups run in parallel. The
// SQS client is router/queue; the outbox publisher that puts pointers on the
// queue is router/outbox.
package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/tracing"
)

// Mediator hands one pointer to whatever processes it. nil means done;
// a *dispatch.RetryAfter asks for the message back after its delay; any
// other error is retried with the router's backoff.
type Mediator interface {
	Mediate(ctx context.Context, ptr dispatch.Pointer) error
}

// PoolConfig is one processing pool.
type PoolConfig struct {
	Code          string
	Concurrency   int
	RatePerMinute int // 0: unlimited
}

// Source is a queue the router consumes.
type Source struct {
	Queue *queue.Queue
	// Connections is how many receive loops long-poll it at once (0: 1).
	Connections int
	// VisibilityTimeout is the visibility a receive asks for and the
	// heartbeat extends to (0: the queue's own).
	VisibilityTimeout time.Duration
}

// Config configures a Router.
type Config struct {
	// Sources are the queues to consume (besides the one given to New).
	// A queue that is missing or failing does not stop the others.
	Sources []Source
	Pools   []PoolConfig
	// DefaultPool receives pointers with unknown pool codes.
	DefaultPool string
	// ReceiveWait is the long-poll wait (≤ 20 s).
	ReceiveWait time.Duration
	// MediationTimeout bounds one mediation; the queue's visibility timeout
	// should exceed it (the heartbeat covers it when it does not).
	MediationTimeout time.Duration
	// ShutdownTimeout is how long in-flight mediations may finish on stop.
	ShutdownTimeout time.Duration
	// Buffer is how many received messages may wait beyond the free slots.
	Buffer int
	Logger *slog.Logger
	// Registerer receives the router's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Tracer records each received message's span in the trace its
	// attributes carry (nil: tracing off).
	Tracer *tracing.Tracer
	// AdminToken is the bearer token of the listener's changes (PUT
	// /monitoring/pools/{code}, POST /monitoring/reload, a breaker's
	// reset); "": they are open (local use without tokens).
	AdminToken string
	// Reload reads the pools of the configuration again, for SetPools
	// (nil: nothing to reload from).
	Reload func() ([]PoolConfig, error)
	// PoolsChanged is told the pools after each change (nil: nobody).
	PoolsChanged func([]PoolConfig)
	// Breakers are the processing endpoint's circuit breakers, for
	// /monitoring/circuit-breakers (nil: none known to this router).
	Breakers Breakers
	// Offers, when set, is asked for the pointers of new jobs for the
	// pools with an idle worker, beside the queue's receives (split mode;
	// see package handoff).
	Offers Offers
}

// Router moves messages from queues into pools.
type Router struct {
	sources []*source
	med     Mediator
	cfg     Config
	log     *slog.Logger
	pools   map[string]*Pool
	order   []*Pool
	def     *Pool
	maxHeld int
	metrics *metrics
	// adminToken is the listener's admin token, hashed (empty: none set).
	adminToken dispatch.Tokens

	mu        sync.Mutex
	running   bool                 // Run has started the workers
	workCtx   context.Context      // the workers' context (Run's)
	workers   sync.WaitGroup       // every worker of every pool
	held      map[heldKey]*message // buffered and in flight
	groups    map[string]int       // held messages per group
	groupPool map[string]*Pool     // the pool holding a group's messages
	holds     map[string]hold      // groups waiting for a failed message to come back
	// bounced: the messages lately given back because their pool was full,
	// by message id, with the delay they went back for (fullPoolDelay).
	bounced  map[string]bounce
	warned   map[string]bool // unknown pool codes already logged
	stopping bool
	stopped  chan struct{} // closed as stopping is set
	warnings warnings
	reserved int           // messages asked for by receives under way
	loops    int           // receive loops, of all queues
	space    chan struct{} // closed when held shrinks, for receives waiting for room (nil: none waits)

	queueNames []string    // the queues consumed, named in the requests for new jobs (intake)
	notOffered atomic.Bool // the API answered that it offers this router no new jobs (intake)
}

// heldKey names a held message: its queue and its SQS MessageId (stable
// across redeliveries).
type heldKey struct {
	src *source
	id  string
}

// source is a consumed queue and what the router knows of it.
type source struct {
	Source
	name    string
	deleter *deleter
	vis     atomic.Int64 // the visibility timeout in effect (ns), once the queue has answered

	ok                                  atomic.Bool // the last call to the queue succeeded
	receives, received, receiveFailures atomic.Int64

	mu        sync.Mutex
	lastError string // the last failure, "" after a success
	failedAt  time.Time
}

func (s *source) visibility() time.Duration { return time.Duration(s.vis.Load()) }

// failed records a failed call to the queue.
func (s *source) failed(err error) {
	s.ok.Store(false)
	s.mu.Lock()
	s.lastError, s.failedAt = err.Error(), time.Now()
	s.mu.Unlock()
}

func (s *source) succeeded() {
	if s.ok.Load() {
		return
	}
	s.ok.Store(true)
	s.mu.Lock()
	s.lastError = ""
	s.mu.Unlock()
}

// hold keeps a group's later jobs back after one of its messages failed:
// the queue may hand them out before the failed one returns (the emulator
// does not hold FIFO groups), and they must not overtake it.
type hold struct {
	seq     int64     // the failed job's place in its group; later jobs wait for it
	until   time.Time // when it is due back
	expires time.Time // the hold lifts by itself (the message may have gone to another router)
}

type message struct {
	queue.Message
	src      *source   // the queue it came from
	received time.Time // when this router received it
	started  time.Time // when its mediation started (zero: buffered; lock held)
	ptr      dispatch.Pointer
	// seq is the job's place in its group (the pointer's sequence, or, for
	// a pointer sent before sequences existed, its job id, which the
	// migration made its sequence).
	seq   int64
	group string
	pool  *Pool

	// A heartbeat call extending this message is under way (lock held to
	// read or write). A release meanwhile is deferred until it has
	// returned, so the extension cannot land after, and undo, the release;
	// no lock is held across the call.
	extending bool
	deferred  *deferredRelease

	// traced is the receive span's context (nil with tracing off): from
	// receipt to the end of its mediation, in the trace of the job's create.
	traced context.Context

	// local is set for a pointer taken in process (Offer): it came from no
	// queue (src is nil), has nothing to delete, and goes onto the queue
	// when it must come back.
	local *local
}

// deferredRelease is a release that waits for a heartbeat call.
type deferredRelease struct {
	delay time.Duration
	at    time.Time
}

// New returns a Router over q (nil: none) and cfg.Sources.
func New(q *queue.Queue, med Mediator, cfg Config) (*Router, error) {
	if len(cfg.Pools) == 0 {
		return nil, errors.New("router: no pools configured")
	}
	srcs := cfg.Sources
	if q != nil {
		srcs = append([]Source{{Queue: q}}, srcs...)
	}
	if len(srcs) == 0 {
		return nil, errors.New("router: no queues configured")
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	r := &Router{
		med: med, cfg: cfg, log: cfg.Logger.With("component", "router"),
		pools: map[string]*Pool{}, held: map[heldKey]*message{}, groups: map[string]int{}, groupPool: map[string]*Pool{},
		holds: map[string]hold{}, bounced: map[string]bounce{}, warned: map[string]bool{}, stopped: make(chan struct{}),
	}
	r.adminToken = dispatch.NewTokens(cfg.AdminToken)
	for _, sc := range srcs {
		if sc.Connections <= 0 {
			sc.Connections = 1
		}
		name := sc.Queue.Name()
		r.sources = append(r.sources, &source{Source: sc, name: name, deleter: newDeleter(sc.Queue, r.log, func(n int, err error) {
			r.metrics.deleteFailures.Add(float64(n))
			r.warnings.add(Warning{Type: WarnDeleteFailed, Queue: name,
				Message: "finished messages could not be deleted; they come back when their visibility ends, and a grouped one holds its group until then: " + err.Error()})
		})})
		r.queueNames = append(r.queueNames, sc.Queue.Name())
		r.loops += sc.Connections
	}
	if err := checkPools(cfg.Pools); err != nil {
		return nil, err
	}
	for _, pc := range cfg.Pools {
		p := newPool(pc, &r.mu)
		r.pools[pc.Code] = p
		r.order = append(r.order, p)
	}
	r.sizeRoom()
	r.metrics = newMetrics(cfg.Registerer, r)
	return r, nil
}

// Run receives from every queue and mediates until ctx is cancelled, then
// stops in two phases: it stops receiving and releases every message not
// started (visibility 0), lets in-flight mediations finish for up to
// ShutdownTimeout, then cancels them and releases their messages. A queue
// that does not answer is retried on its own; the others go on.
func (r *Router) Run(ctx context.Context) error {
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	var helpers, receivers sync.WaitGroup
	r.mu.Lock()
	r.running, r.workCtx = true, workCtx
	for _, p := range r.order {
		r.startWorkers(p)
	}
	npools := len(r.order)
	r.mu.Unlock()
	// The helpers (deletes, heartbeats) outlive the receives: in-flight
	// mediations still finish after the stop.
	helperCtx, stopHelpers := context.WithCancel(context.WithoutCancel(ctx))
	for _, s := range r.sources {
		helpers.Add(1)
		go func() { defer helpers.Done(); s.deleter.run(helperCtx) }()
		receivers.Add(1)
		go func() { defer receivers.Done(); r.consume(ctx, helperCtx, &helpers, s) }()
	}
	if r.cfg.Offers != nil {
		for range intakeLoops {
			receivers.Add(1)
			go func() { defer receivers.Done(); r.intake(ctx) }()
		}
	}

	// The shutdown deadline counts from the signal, not from the end of
	// the last poll, so the whole stop fits in ShutdownTimeout.
	deadline := make(chan time.Time, 1)
	stopWatch := context.AfterFunc(ctx, func() { deadline <- time.Now().Add(r.cfg.ShutdownTimeout) })
	defer stopWatch()
	r.log.Info("router started", "pools", npools, "queues", len(r.sources))
	// The receives return at once: their long polls are cancelled with
	// ctx, so a stop does not wait out a 20 s poll. (The SQS stand-in takes
	// nothing for a poll whose client has gone; real SQS may still hand
	// that poll a message, which then comes back after its visibility
	// timeout: later, never lost.)
	receivers.Wait()

	// Phase 1: no more receiving; give back what has not started.
	r.mu.Lock()
	r.stopping = true
	close(r.stopped)
	var unstarted []*message
	for _, p := range r.order {
		unstarted = append(unstarted, p.drain()...)
		p.cond.Broadcast()
	}
	for _, m := range unstarted {
		r.unhold(m)
	}
	r.mu.Unlock()
	r.release(unstarted, 0)

	// Phase 2: let in-flight work finish until the deadline, then cancel it.
	done := make(chan struct{})
	go func() { r.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(<-deadline)):
		r.log.Warn("shutdown deadline reached; cancelling in-flight mediations")
		r.warnings.add(Warning{Type: WarnShutdownDeadline, Message: "the stop's deadline passed; mediations still in flight were cancelled"})
		cancelWork()
		<-done
	}
	stopHelpers()
	helpers.Wait()
	for _, s := range r.sources {
		s.deleter.flush(context.Background())
	}
	r.log.Info("router stopped", "released_unstarted", len(unstarted))
	return nil
}

// consume waits for the queue to answer, then runs its heartbeat (under
// helperCtx, counted in helpers) and its receive loops until ctx ends.
func (r *Router) consume(ctx, helperCtx context.Context, helpers *sync.WaitGroup, s *source) {
	vis, err := r.visibilityTimeout(ctx, s)
	if err != nil {
		return // stopped before the queue ever answered
	}
	switch {
	case s.VisibilityTimeout > 0:
		vis = s.VisibilityTimeout // each receive asks for it
	case vis <= 0:
		// The queue would hand each message out again at once, to this
		// router and any other, while it is mediated: every receive asks
		// for the mediation timeout instead, and the heartbeat keeps it.
		s.VisibilityTimeout = max((r.cfg.MediationTimeout + time.Second - 1).Truncate(time.Second), time.Second) // SQS counts whole seconds
		vis = s.VisibilityTimeout
		r.log.Warn("the queue's visibility timeout is 0; each receive asks for the mediation timeout instead, but set the queue's VisibilityTimeout",
			"queue", s.name, "visibility_timeout", vis.String())
		r.warnings.add(Warning{Type: WarnVisibilityShort, Queue: s.name,
			Message: fmt.Sprintf("the queue's visibility timeout is 0: each receive asks for %v instead", vis)})
	}
	s.vis.Store(int64(vis))
	s.deleter.setVisibility(vis)
	if vis < r.cfg.MediationTimeout {
		r.log.Warn("queue visibility timeout is shorter than the mediation timeout; the heartbeat extends in-flight messages, but raise the queue's VisibilityTimeout",
			"queue", s.name, "visibility_timeout", vis.String(), "mediation_timeout", r.cfg.MediationTimeout.String())
		r.warnings.add(Warning{Type: WarnVisibilityShort, Queue: s.name,
			Message: fmt.Sprintf("visibility timeout %v is shorter than the mediation timeout %v", vis, r.cfg.MediationTimeout)})
	}
	helpers.Add(1)
	go func() { defer helpers.Done(); r.heartbeat(helperCtx, s) }()
	r.log.Info("consuming queue", "queue", s.name, "connections", s.Connections, "visibility_timeout", vis.String())
	var loops sync.WaitGroup
	for range s.Connections {
		loops.Add(1)
		go func() { defer loops.Done(); r.receive(ctx, s) }()
	}
	loops.Wait()
}

// visibilityTimeout waits for the queue to answer, retrying with backoff.
func (r *Router) visibilityTimeout(ctx context.Context, s *source) (time.Duration, error) {
	backoff := 500 * time.Millisecond
	for {
		vis, err := s.Queue.VisibilityTimeout(ctx)
		if err == nil {
			s.succeeded()
			return vis, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		s.failed(err)
		r.log.Warn("queue not available yet; retrying", "queue", s.name, "err", err, "backoff", backoff.String())
		r.warnings.add(Warning{Type: WarnQueueUnavailable, Queue: s.name, Message: "the queue does not answer: " + err.Error()})
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, 10*time.Second)
	}
}

// Ready reports whether every queue answered its last call. A router with
// every slot busy does not receive, and is ready.
func (r *Router) Ready() bool {
	for _, s := range r.sources {
		if !s.ok.Load() {
			return false
		}
	}
	return true
}

// receiveAttemptLife is how long the router retries a failed receive under
// one ReceiveRequestAttemptId (SQS honours one for five minutes).
const receiveAttemptLife = 4 * time.Minute

func (r *Router) receive(ctx context.Context, s *source) {
	backoff := 100 * time.Millisecond
	// A receive whose answer is lost leaves its messages in flight on the
	// queue. Until a receive succeeds, every try carries the same attempt
	// id, so that a FIFO queue hands those messages to the retry rather
	// than holding them for their visibility timeout. SQS honours an id for
	// five minutes; a new one is taken well before that.
	var attempt string
	var attemptAt time.Time
	for ctx.Err() == nil {
		room, wait := r.reserve()
		if room <= 0 {
			select {
			case <-wait:
			case <-ctx.Done():
			}
			continue
		}
		if attempt == "" || time.Since(attemptAt) > receiveAttemptLife {
			attempt, attemptAt = queue.NewReceiveAttempt(), time.Now()
		}
		// The queue bounds the call: its long-poll wait plus its call
		// timeout (DISPATCH_SQS_TIMEOUT), which may be longer than any
		// bound set here.
		s.receives.Add(1)
		msgs, err := s.Queue.Receive(ctx, room, r.cfg.ReceiveWait, s.VisibilityTimeout, attempt)
		if err != nil {
			r.unreserve(room)
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, queue.ErrReceiveAttemptVoid) {
				attempt = "" // what it handed out has moved on; receive afresh
				continue
			}
			s.receiveFailures.Add(1)
			s.failed(err)
			r.log.Warn("receive failed; retrying", "queue", s.name, "err", err, "backoff", backoff.String())
			r.warnings.add(Warning{Type: WarnQueueUnavailable, Queue: s.name, Message: "receive failed: " + err.Error()})
			sleepCtx(ctx, backoff)
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		attempt = ""
		backoff = 100 * time.Millisecond
		s.succeeded()
		s.received.Add(int64(len(msgs)))
		var held []*message
		for _, m := range msgs {
			if h := r.accept(s, m); h != nil {
				held = append(held, h)
			}
		}
		r.unreserve(room)
		r.releaseHeld(held)
	}
}

// releaseHeld gives back messages whose group is on hold, until the
// failed message they must not overtake is due back.
// Each has its own delay, and they go back together: one call for the
// messages of a receive, not one each.
func (r *Router) releaseHeld(msgs []*message) {
	if len(msgs) == 0 {
		return
	}
	now := time.Now()
	delays := make(map[*message]time.Duration, len(msgs))
	r.mu.Lock()
	for _, m := range msgs {
		delays[m] = max(r.holds[m.group].until.Sub(now), 0) + time.Second
	}
	r.mu.Unlock()
	r.releaseEach(msgs, func(m *message) time.Duration { return delays[m] })
}

// accept routes a received message into its pool, unless it is a
// redelivered copy of a message already held (then only its receipt handle
// is refreshed), cannot be parsed (then it is dropped), or belongs to a
// group on hold behind an earlier failed job (then it is returned, to be
// released).
func (r *Router) accept(s *source, qm queue.Message) *message {
	r.metrics.received.Inc()
	ptr, err := dispatch.ParsePointer([]byte(qm.Body))
	if err != nil {
		r.log.Error("unparseable message dropped", "message_id", qm.ID, "queue", s.name)
		r.warnings.add(Warning{Type: WarnUnparseable, Queue: s.name, Message: "a message that is not a pointer was dropped (message " + qm.ID + ")"})
		s.deleter.add(qm.Receipt, false)
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.held[heldKey{s, qm.ID}]; ok {
		h.Receipt = qm.Receipt
		r.metrics.duplicates.Inc()
		return nil
	}
	group := ptr.MessageGroupID
	if group == "" {
		group = qm.GroupID
	}
	if group == "" {
		group = ptr.ID
	}
	// A group lives in one pool at a time: while the router holds any of
	// its messages, the next joins them there (its pool may have changed or
	// been removed since), so the group stays one at a time, in order.
	p := r.groupPool[group]
	if p == nil {
		p = r.pools[ptr.PoolCode]
	}
	if p == nil {
		// Pool codes come from the messages: the codes logged are bounded,
		// so a producer inventing codes cannot grow the router's memory.
		if !r.warned[ptr.PoolCode] && len(r.warned) < maxWarnedPools {
			r.warned[ptr.PoolCode] = true
			r.log.Warn("unknown pool code; its messages go to the default pool (logged once per code)",
				"pool", ptr.PoolCode, "default_pool", r.def.code)
		}
		r.warnings.add(Warning{Type: WarnUnknownPool, Queue: s.name, Pool: ptr.PoolCode, JobID: ptr.ID,
			Message: fmt.Sprintf("pool %q is not configured; its messages go to the default pool %s", ptr.PoolCode, r.def.code)})
		p = r.def
	}
	seq := ptr.Sequence
	if seq == 0 {
		seq, _ = dispatch.ParseID(ptr.ID)
	}
	m := &message{Message: qm, src: s, received: time.Now(), ptr: ptr, seq: seq, group: group, pool: p}
	if h, ok := r.holds[group]; ok {
		// A hold keeps the group's later messages back until the failed
		// one is due, no longer: a later message that reaches this router
		// after that means the failed one was received since (SQS hands
		// out nothing of a group while a message of it is in flight), here
		// or by another router, which may well have finished it. Holding
		// on would bounce the group here until the hold expired.
		if time.Now().After(h.until.Add(holdGrace)) {
			delete(r.holds, group)
		} else if seq > h.seq {
			return m
		}
	}
	if len(r.order) > 1 && r.groups[group] == 0 && p.groups >= r.poolRoom(p) {
		// The pool holds all the groups it can start soon. The message goes
		// back for a moment, and its group's later ones with it, so that
		// the queue's messages for the other pools are still received: a
		// slow pool does not hold up the rest. (With one pool there is no
		// rest: a message beyond its room, which a job handed over in
		// process took meanwhile, waits in its lane as before.)
		p.full.Add(1)
		r.holdGroup(m, r.fullPoolDelay(m.ID, time.Now()))
		return m
	}
	if r.cfg.Tracer.Enabled() {
		m.traced = r.startReceive(s, qm, ptr, p)
	}
	delete(r.bounced, m.ID)
	r.hold(m)
	p.add(m)
	return nil
}

// maxWarnedPools is how many unknown pool codes are logged (each once).
const maxWarnedPools = 100

// holdGrace is how long past its failed message's due time a group's
// hold still keeps its later messages back (the queue's own rounding).
const holdGrace = 2 * time.Second

// poolFullDelay is about how long a message for a full pool is given back
// for the first time (one to two times it, spread).
const poolFullDelay = time.Second

// maxPoolFullDelay is the longest a message for a full pool is given back
// for (up to twice it, spread); maxBounced bounds the messages whose
// last delay is remembered.
const (
	maxPoolFullDelay = 32 * time.Second
	maxBounced       = 10000
)

// bounce is how long a message went back for, its pool full, and when.
type bounce struct {
	delay time.Duration
	at    time.Time
}

// fullPoolDelay is how long the message id, for a full pool, is given
// back for (lock held): twice as long each time it comes back to a pool
// still full, from 1–2 s up to 32–64 s. A pool's backlog, given back and
// received again every second or two, would otherwise fill every receive,
// and the queue's messages for the other pools, behind it, would not be
// received until it had drained. Counted here, not from the queue's
// receive count: retries and a grouped job's rechecks count there too.
// Past maxBounced messages remembered, the pool is swamped: a message not
// remembered goes back for the longest.
func (r *Router) fullPoolDelay(id string, now time.Time) time.Duration {
	d := poolFullDelay
	if b, ok := r.bounced[id]; ok && now.Sub(b.at) < 2*b.delay+time.Minute {
		d = min(2*b.delay, maxPoolFullDelay)
	} else if len(r.bounced) >= maxBounced {
		for k, b := range r.bounced {
			if now.Sub(b.at) >= 2*b.delay+time.Minute {
				delete(r.bounced, k)
			}
		}
		if len(r.bounced) >= maxBounced {
			return maxPoolFullDelay + rand.N(maxPoolFullDelay)
		}
	}
	r.bounced[id] = bounce{delay: d, at: now}
	return d + rand.N(d)
}

// poolRoom is how many groups p may hold: its concurrency and its share of
// the buffer, in proportion to its concurrency (lock held). Each pool so
// keeps room of its own; one pool alone has the whole buffer.
func (r *Router) poolRoom(p *Pool) int {
	all := r.maxHeld - r.cfg.Buffer // the pools' concurrency together
	if all <= 0 {
		return p.concurrency + r.cfg.Buffer
	}
	return p.concurrency + (r.cfg.Buffer*p.concurrency+all-1)/all
}

// startWorkers starts the workers p lacks (lock held; none before Run or
// once stopping).
func (r *Router) startWorkers(p *Pool) {
	if !r.running || r.stopping || p.draining {
		return
	}
	for ; p.workers < p.concurrency; p.workers++ {
		r.workers.Add(1)
		go func() {
			defer r.workers.Done()
			r.work(r.workCtx, p)
		}()
	}
}

func (r *Router) work(ctx context.Context, p *Pool) {
	for {
		r.mu.Lock()
		m := p.next(&r.stopping)
		if m == nil {
			// Stopping, one worker too many (the concurrency went down), or
			// a removed pool with nothing left to start.
			p.workers--
			if p.draining && p.workers == 0 {
				r.retire(p)
			}
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		turn := p.waitTurn(ctx, r.stopped) && !r.isStopping()
		r.mu.Lock()
		p.waitingTurn--
		if !turn {
			// The stop began while it waited for its turn (or just
			// before): not started, so given back at once, as the
			// buffered messages were.
			p.finish(m)
			r.unhold(m)
			r.mu.Unlock()
			r.release([]*message{m}, 0)
			continue
		}
		m.started = time.Now()
		r.mu.Unlock()
		start := m.started
		mctx := ctx
		if m.traced != nil {
			mctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(m.traced))
			trace.SpanFromContext(m.traced).AddEvent("mediation started")
		}
		if m.local != nil && m.local.handle != nil {
			mctx = handoff.WithHandle(mctx, *m.local.handle)
		}
		if m.local == nil && m.ReceiveCount == 1 {
			mctx = handoff.WithFirstReceive(mctx)
		}
		err := r.med.Mediate(mctx, m.ptr)
		if m.local != nil {
			m.local.done()
		}
		p.observe(time.Since(start), err)
		if m.traced != nil {
			endReceive(m.traced, err)
		}
		var delay time.Duration
		var ra *dispatch.RetryAfter
		switch {
		case err == nil:
		case errors.As(err, &ra):
			delay = ra.Delay
			if ra.GivenBack && m.local != nil {
				r.givenBack(m.local)
			}
		case ctx.Err() != nil:
			delay = 0 // cancelled by shutdown: give it back at once
		default:
			delay = routerBackoff(m.ReceiveCount)
			r.log.Warn("mediation failed; retrying", "job_id", m.ptr.ID, "pool", p.code, "err", err, "delay", delay.String())
			r.warnings.add(Warning{Type: WarnMediationFailed, Queue: m.queueName(), Pool: p.code, JobID: m.ptr.ID,
				Message: "the processing endpoint gave no usable answer: " + err.Error()})
		}
		r.mu.Lock()
		var released []*message
		if err != nil {
			// Later messages of the group must not overtake this one: those
			// buffered go back with its delay, those yet to come are held.
			released = p.releaseLater(m)
			for _, x := range released {
				r.unhold(x)
			}
			if m.group != m.ptr.ID {
				// An ungrouped job (its group is its id, as every job taken
				// in process is) has nothing after it to hold back, and its
				// pointer may never come back here: a hold would wait for
				// the heartbeat's expiry, and without a queue answering,
				// for good.
				r.holdGroup(m, delay)
			}
		} else if h, ok := r.holds[m.group]; ok && m.seq >= h.seq {
			delete(r.holds, m.group)
		}
		p.finish(m)
		r.unhold(m)
		receipt := m.Receipt
		r.mu.Unlock()
		if err == nil {
			if m.local == nil {
				m.src.deleter.add(receipt, m.group != m.ptr.ID)
			}
			continue
		}
		r.release(append([]*message{m}, released...), delay)
	}
}

// visibilityLeft is d, or less if SQS would refuse it: a message's
// visibility ends at most 12 hours after it was received (a change that
// asks for more is refused, not cut short), with a minute's margin for the
// receive's own time.
func (m *message) visibilityLeft(d time.Duration) time.Duration {
	return max(min(d, dispatch.MaxVisibilityDelay-time.Since(m.received)-time.Minute), 0)
}

// isStopping reports whether the stop has begun.
func (r *Router) isStopping() bool {
	select {
	case <-r.stopped:
		return true
	default:
		return false
	}
}

// holdGroup records that m's group waits for m until it is due back
// (lock held). An existing hold for an earlier job stays in charge.
func (r *Router) holdGroup(m *message, delay time.Duration) {
	now := time.Now()
	h, ok := r.holds[m.group]
	if !ok || now.After(h.expires) || m.seq <= h.seq {
		h = hold{seq: m.seq}
	}
	h.until = now.Add(delay)
	vis := time.Duration(0)
	if m.src != nil {
		vis = m.src.visibility()
	}
	h.expires = h.until.Add(max(vis, 30*time.Second))
	r.holds[m.group] = h
}

// routerBackoff is the delay after a mediation failed without an answer.
func routerBackoff(receiveCount int) time.Duration {
	n := min(max(receiveCount, 1), 7)
	return min(time.Duration(1<<(n-1))*time.Second, time.Minute)
}

// release changes the messages' visibility to delay (SQS caps it at 12 h).
// A message a heartbeat call is extending right now is released once that
// call has returned (see message.extending). A message taken in process
// goes onto the queue instead, where the job's state holds it until due.
func (r *Router) release(msgs []*message, delay time.Duration) {
	r.releaseEach(msgs, func(*message) time.Duration { return delay })
}

// releaseEach is release, each message m after delay(m).
func (r *Router) releaseEach(msgs []*message, delayOf func(*message) time.Duration) {
	if len(msgs) == 0 {
		return
	}
	changes := map[*source][]queue.Visibility{}
	type requeued struct {
		l     *local
		delay time.Duration
	}
	var requeue []requeued
	why := requeueRetry
	r.mu.Lock()
	if r.stopping {
		why = requeueStop
	}
	for _, m := range msgs {
		delay := min(max(delayOf(m), 0), dispatch.MaxVisibilityDelay)
		if m.traced != nil { // a message given back unmediated ends its span here (a mediated one's has ended)
			trace.SpanFromContext(m.traced).End()
		}
		if m.local != nil {
			requeue = append(requeue, requeued{m.local, delay})
			continue
		}
		if m.extending {
			m.deferred = &deferredRelease{delay: delay, at: time.Now()}
			continue
		}
		changes[m.src] = append(changes[m.src], queue.Visibility{Receipt: m.Receipt, Timeout: m.visibilityLeft(delay).Round(time.Second)})
	}
	r.mu.Unlock()
	for s, c := range changes {
		r.changeVisibility(s, c, "cannot change visibility; the messages return when their timeout ends")
	}
	// At once: each may be a request to the API (split mode), and a stop
	// must not wait for them one after another.
	var wg sync.WaitGroup
	for _, q := range requeue {
		wg.Go(func() { r.requeued(q.l, q.delay, why) })
	}
	wg.Wait()
}

// changeVisibility sends visibility changes to s in batches of 10, each
// call under the queue's deadline.
func (r *Router) changeVisibility(s *source, changes []queue.Visibility, warning string) {
	if len(changes) == 0 {
		return
	}
	ctx := context.Background()
	change := func(c []queue.Visibility) error { return s.Queue.ChangeVisibilityBatch(ctx, c) }
	// A release left undone holds its message (and its group) until the
	// visibility it had ends.
	err := retrySQSSide(ctx, chunks(changes, change), changesToRetry, change)
	if err != nil {
		r.log.Warn(warning, "queue", s.name, "err", err)
		r.warnings.add(Warning{Type: WarnVisibilityChange, Queue: s.name, Message: warning + ": " + err.Error()})
	}
}

// changesToRetry is e's visibility changes SQS failed on its side, and
// the rest of e.
func changesToRetry(e error) ([]queue.Visibility, error) {
	var ve *queue.VisibilityError
	if !errors.As(e, &ve) || len(ve.Retry) == 0 {
		return nil, e
	}
	if n := len(ve.Receipts) - len(ve.Retry); n > 0 {
		return ve.Retry, fmt.Errorf("queue: %d visibility changes failed: %s", n, ve.Message)
	}
	return ve.Retry, nil
}

// hold and unhold track a buffered or in-flight message (lock held).
func (r *Router) hold(m *message) {
	r.held[heldKey{m.src, m.ID}] = m
	if r.groups[m.group]++; r.groups[m.group] == 1 {
		m.pool.groups++
	}
	r.groupPool[m.group] = m.pool
}

func (r *Router) unhold(m *message) {
	k := heldKey{m.src, m.ID}
	if _, ok := r.held[k]; !ok {
		return
	}
	delete(r.held, k)
	if r.groups[m.group]--; r.groups[m.group] <= 0 {
		if p := r.groupPool[m.group]; p != nil {
			p.groups--
		}
		delete(r.groups, m.group)
		delete(r.groupPool, m.group)
	}
	r.wakeReceivers()
}

// reserve takes room for the messages a receive may ask for, or returns
// a channel closed when there may be room. The bound is on groups, not
// messages: a FIFO queue hands out several messages of one group at once,
// and those wait behind each other without needing a worker, so counting
// them would fill the buffer with a few groups and leave the workers idle.
// Messages in all are still bounded, at ten per group slot. Every receive
// loop of every queue takes its room here, so together they never ask for
// more than the pools can start soon.
func (r *Router) reserve() (int, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	free := min(r.maxHeld-len(r.groups), 10*r.maxHeld-len(r.held)) - r.reserved
	// Each receive loop takes its share, so that every queue's loops poll
	// at once, and a queue with a deep backlog cannot take all the room
	// from the others.
	n := min(10, max(0, free), max(1, free/r.loops))
	if n == 0 {
		if r.space == nil {
			r.space = make(chan struct{})
		}
		return 0, r.space
	}
	r.reserved += n
	return n, nil
}

// unreserve gives back the room a receive took, its messages now held.
func (r *Router) unreserve(n int) {
	r.mu.Lock()
	r.reserved -= n
	r.wakeReceivers()
	r.mu.Unlock()
}

// wakeReceivers wakes the receives waiting for room (lock held).
func (r *Router) wakeReceivers() {
	if r.space != nil {
		close(r.space)
		r.space = nil
	}
}

// heartbeat keeps every message held from s invisible while the router
// has it. Its calls run under the queue's deadline and hold no lock: a hung
// call delays only the releases of the messages it is extending, never a
// worker.
func (r *Router) heartbeat(ctx context.Context, s *source) {
	vis := s.visibility()
	period := max(vis/3, 250*time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		var msgs []*message
		var changes []queue.Visibility
		for k, m := range r.held {
			if k.src != s {
				continue
			}
			m.extending = true
			msgs = append(msgs, m)
			changes = append(changes, queue.Visibility{Receipt: m.Receipt, Timeout: vis})
		}
		for g, h := range r.holds { // holds of groups that never came back
			if time.Now().After(h.expires) {
				delete(r.holds, g)
			}
		}
		r.mu.Unlock()
		err := chunks(changes, func(c []queue.Visibility) error { return s.Queue.ChangeVisibilityBatch(ctx, c) })
		err = r.stillHeld(err)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("heartbeat failed", "queue", s.name, "err", err)
			r.warnings.add(Warning{Type: WarnHeartbeatFailed, Queue: s.name,
				Message: "cannot extend the visibility of messages in flight (they may come back while mediated): " + err.Error()})
		}
		// Releases that came in during the call go out now, after it.
		now := time.Now()
		byDelay := map[time.Duration][]queue.Visibility{}
		r.mu.Lock()
		for _, m := range msgs {
			m.extending = false
			if d := m.deferred; d != nil {
				m.deferred = nil
				left := m.visibilityLeft(max(d.delay-now.Sub(d.at), 0)).Round(time.Second)
				byDelay[left] = append(byDelay[left], queue.Visibility{Receipt: m.Receipt, Timeout: left})
			}
		}
		r.mu.Unlock()
		for _, changes := range byDelay {
			r.changeVisibility(s, changes, "cannot change visibility; the messages return when their timeout ends")
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Pool is a bounded processing pool. Its buffered messages are values in
// per-group FIFO lanes; at most one message per group is in flight.
type Pool struct {
	code        string
	concurrency int  // workers it may run (lock held)
	workers     int  // workers running (lock held)
	draining    bool // removed: it finishes what it holds, takes no new group, then goes (lock held)
	cond        *sync.Cond

	limMu       sync.Mutex
	ratePerMin  int           // 0: unlimited
	limiter     *rate.Limiter // nil: unlimited
	rateChanged chan struct{} // closed when the rate changes, for the workers waiting for a turn

	lanes    map[string][]*message // buffered, per group, in arrival order
	active   map[string]bool       // groups with a message in flight
	ready    []string              // groups with buffered messages and none in flight
	buffered int
	inFlight int
	// waitingTurn: of inFlight, those a worker holds while the rate limit
	// has them wait for their turn; reported as buffered, not mediating.
	waitingTurn int
	groups      int // groups with a message held in this pool (lock held)
	promised    int // room the router's requests for new jobs have asked the API for (intake)

	succeeded, failed, retried, rateLimited atomic.Int64
	full                                    atomic.Int64 // messages given back because the pool was full
	mediations, mediationNanos              atomic.Int64
}

func newPool(pc PoolConfig, mu *sync.Mutex) *Pool {
	p := &Pool{code: pc.Code, concurrency: pc.Concurrency, cond: sync.NewCond(mu),
		lanes: map[string][]*message{}, active: map[string]bool{}, rateChanged: make(chan struct{})}
	p.setRate(pc.RatePerMinute)
	return p
}

// setRate replaces the pool's rate limit; workers waiting for a turn under
// the old one wait again under the new.
func (p *Pool) setRate(perMinute int) {
	p.limMu.Lock()
	defer p.limMu.Unlock()
	p.ratePerMin, p.limiter = perMinute, nil
	if perMinute > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(float64(perMinute)/60), 1)
	}
	close(p.rateChanged)
	p.rateChanged = make(chan struct{})
}

func (p *Pool) rate() int {
	p.limMu.Lock()
	defer p.limMu.Unlock()
	return p.ratePerMin
}

// waitTurn waits until the pool's rate limit lets a mediation start (not
// at all when it has none): true; false when ctx ends or the router
// begins to stop first.
func (p *Pool) waitTurn(ctx context.Context, stopped <-chan struct{}) bool {
	counted := false
	for {
		p.limMu.Lock()
		lim, changed := p.limiter, p.rateChanged
		p.limMu.Unlock()
		if lim == nil {
			return true
		}
		res := lim.Reserve()
		d := res.Delay()
		if d == 0 {
			return true
		}
		if !counted {
			p.rateLimited.Add(1)
			counted = true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return true
		case <-changed:
			t.Stop()
			res.Cancel()
		case <-ctx.Done():
			t.Stop()
			res.Cancel()
			return false
		case <-stopped:
			t.Stop()
			res.Cancel()
			return false
		}
	}
}

// add buffers a message in its group's lane, ordered by its place in the
// group (the order in which the creates committed). The queue's own order cannot be trusted for
// this: pointers re-sent by the outbox or released after a failure come
// back behind later ones, and the emulator hands a group out of order and
// numbers it wrongly (lock held).
func (p *Pool) add(m *message) {
	lane := append(p.lanes[m.group], m)
	for i := len(lane) - 1; i > 0 && lane[i].seq < lane[i-1].seq; i-- {
		lane[i], lane[i-1] = lane[i-1], lane[i]
	}
	p.lanes[m.group] = lane
	p.buffered++
	if !p.active[m.group] && len(p.lanes[m.group]) == 1 {
		p.ready = append(p.ready, m.group)
		p.cond.Signal()
	}
}

// next waits for a message whose group is free and marks it in flight; nil
// once the router is stopping, when the pool has more workers than its
// concurrency, or when a removed pool has nothing ready (lock held).
func (p *Pool) next(stopping *bool) *message {
	for {
		if *stopping || p.workers > p.concurrency && !p.draining {
			return nil
		}
		if len(p.ready) > 0 {
			break
		}
		if p.draining {
			return nil
		}
		p.cond.Wait()
	}
	g := p.ready[0]
	p.ready = p.ready[1:]
	lane := p.lanes[g]
	m := lane[0]
	if len(lane) == 1 {
		delete(p.lanes, g)
	} else {
		p.lanes[g] = lane[1:]
	}
	p.active[g] = true
	p.buffered--
	// In flight for the pool's room from now; mediating (started) once
	// the rate limit gives its turn.
	p.inFlight++
	p.waitingTurn++
	return m
}

// remove takes the buffered message m out of its lane, and reports
// whether it was there (lock held).
func (p *Pool) remove(m *message) bool {
	lane := p.lanes[m.group]
	i := slices.Index(lane, m)
	if i < 0 {
		return false
	}
	lane = slices.Delete(lane, i, i+1)
	p.buffered--
	if len(lane) > 0 {
		p.lanes[m.group] = lane
		return true
	}
	delete(p.lanes, m.group)
	if j := slices.Index(p.ready, m.group); j >= 0 {
		p.ready = slices.Delete(p.ready, j, j+1)
	}
	return true
}

// finish ends m's mediation and frees its group (lock held).
func (p *Pool) finish(m *message) {
	p.inFlight--
	delete(p.active, m.group)
	if len(p.lanes[m.group]) > 0 {
		p.ready = append(p.ready, m.group)
		p.cond.Signal()
	}
}

// releaseLater takes out the buffered messages of m's group created after
// m, so they cannot overtake it; earlier ones (handed out of order) stay to
// be mediated next (lock held).
func (p *Pool) releaseLater(m *message) []*message {
	lane := p.lanes[m.group]
	var keep, later []*message
	for _, x := range lane {
		if x.seq > m.seq {
			later = append(later, x)
		} else {
			keep = append(keep, x)
		}
	}
	if len(keep) == 0 {
		delete(p.lanes, m.group)
	} else {
		p.lanes[m.group] = keep
	}
	p.buffered -= len(later)
	return later
}

// drain takes every buffered message out (lock held).
func (p *Pool) drain() []*message {
	var out []*message
	for g, lane := range p.lanes {
		out = append(out, lane...)
		delete(p.lanes, g)
	}
	p.ready = nil
	p.buffered = 0
	return out
}

func (p *Pool) observe(d time.Duration, err error) {
	p.mediations.Add(1)
	p.mediationNanos.Add(int64(d))
	var ra *dispatch.RetryAfter
	switch {
	case err == nil:
		p.succeeded.Add(1)
	case errors.As(err, &ra):
		p.retried.Add(1)
	default:
		p.failed.Add(1)
	}
}

// PoolStats is a pool's state for /monitoring/pools.
type PoolStats struct {
	Code        string `json:"code"`
	Concurrency int    `json:"concurrency"`
	// Draining: removed from the configuration, it finishes what it holds
	// and then goes.
	Draining      bool  `json:"draining,omitempty"`
	RatePerMinute int   `json:"rateLimitPerMinute,omitempty"`
	InFlight      int   `json:"inFlight"`
	Buffered      int   `json:"buffered"`
	Succeeded     int64 `json:"succeeded"`
	Retried       int64 `json:"retried"`
	Failed        int64 `json:"failed"`
	RateLimited   int64 `json:"rateLimited"`
	// PoolFull counts the messages received while the pool held all the
	// groups it may (its concurrency and its share of the buffer), given
	// back for a second or two.
	PoolFull           int64   `json:"poolFull"`
	AvgMediationMillis float64 `json:"avgMediationMillis"`
}

// Stats returns every pool's state.
func (r *Router) Stats() []PoolStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]PoolStats, 0, len(r.order))
	for _, p := range r.order {
		s := PoolStats{Code: p.code, Concurrency: p.concurrency, Draining: p.draining, InFlight: p.inFlight - p.waitingTurn, Buffered: p.buffered + p.waitingTurn,
			Succeeded: p.succeeded.Load(), Retried: p.retried.Load(), Failed: p.failed.Load(), RateLimited: p.rateLimited.Load(),
			PoolFull: p.full.Load(), RatePerMinute: p.rate()}
		if n := p.mediations.Load(); n > 0 {
			s.AvgMediationMillis = float64(p.mediationNanos.Load()) / float64(n) / 1e6
		}
		out = append(out, s)
	}
	return out
}

// startReceive starts a received message's span: a CONSUMER span of the
// trace its attributes carry (the job's create), per OpenTelemetry's
// messaging conventions for SQS, open until its mediation ends.
func (r *Router) startReceive(s *source, qm queue.Message, ptr dispatch.Pointer, p *Pool) context.Context {
	ctx := r.cfg.Tracer.Decode(context.Background(), tracing.FromCarrier(qm.Attributes))
	name := s.name
	ctx, _ = r.cfg.Tracer.Start(ctx, "receive "+name, trace.SpanKindConsumer,
		attribute.String("messaging.system", "aws_sqs"),
		attribute.String("messaging.operation.type", "receive"),
		attribute.String("messaging.operation.name", "ReceiveMessage"),
		attribute.String("messaging.destination.name", name),
		attribute.String("messaging.message.id", qm.ID),
		attribute.String("messaging.consumer.group.name", p.code),
		attribute.Int("messaging.message.delivery_count", qm.ReceiveCount),
		attribute.String("dispatch.job.id", ptr.ID))
	return ctx
}

// endReceive ends a received message's span with its mediation's outcome.
func endReceive(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	var ra *dispatch.RetryAfter
	switch {
	case err == nil:
		span.SetAttributes(attribute.String("dispatch.outcome", "done"))
	case errors.As(err, &ra):
		span.SetAttributes(attribute.String("dispatch.outcome", "retry"), attribute.Float64("dispatch.retry_after_seconds", ra.Delay.Seconds()))
	default:
		tracing.Fail(span, "mediation_failed", err)
	}
	span.End()
}

// stillHeld is err less the visibility changes that failed for messages
// no longer held: a message finished and deleted while the heartbeat's
// call was under way has no receipt to extend, and nothing to keep
// invisible. Only a failure for a message still held is one.
func (r *Router) stillHeld(err error) error {
	if err == nil {
		return nil
	}
	var (
		errs   []error
		failed []string
		why    string // the first failure's message
	)
	for _, e := range flatten(err) {
		var ve *queue.VisibilityError
		if errors.As(e, &ve) {
			failed = append(failed, ve.Receipts...)
			why = cmp.Or(why, ve.Message)
			continue
		}
		errs = append(errs, e)
	}
	if len(failed) > 0 {
		held := map[string]bool{}
		r.mu.Lock()
		for _, m := range r.held {
			held[m.Receipt] = true
		}
		r.mu.Unlock()
		n := 0
		for _, rc := range failed {
			if held[rc] {
				n++
			}
		}
		if n > 0 {
			errs = append(errs, fmt.Errorf("queue: %d visibility changes of messages still held failed: %s", n, why))
		}
	}
	return errors.Join(errs...)
}

// flatten is the errors errors.Join put together in err, joins within
// joins too, or err.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// chunks calls fn on successive slices of at most 10 items (SQS batch size).
func chunks[T any](items []T, fn func([]T) error) error {
	var errs []error
	for len(items) > 0 {
		n := min(10, len(items))
		if err := fn(items[:n]); err != nil {
			errs = append(errs, err)
		}
		items = items[n:]
	}
	return errors.Join(errs...)
}
