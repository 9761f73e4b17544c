// Package outbox is the publisher of the transactional outbox: it sends the
// pointers of due, unsent jobs to their SQS queues (handed over at creation,
// or found by the outbox query), confirms them, and sweeps for the lost.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/tracing"
)

// Store is what the publisher needs from the job store.
type Store interface {
	// PublishDueExcept hands due, unsent jobs to send, but none whose
	// queue key is in skip ("": the default queue).
	PublishDueExcept(ctx context.Context, now time.Time, limit int, skip []string, send func([]dispatch.Unsent) ([]int64, error)) (int, error)
	Sweep(ctx context.Context, now time.Time, requeueAfter time.Duration) (expired, requeued int64, err error)
	Unmark(ctx context.Context, ids []int64, mark time.Time) error
	ConfirmSent(ctx context.Context, sent []dispatch.Unsent) error
}

// confirmEvery is how long a sent pointer's confirmation may wait to be
// written with others (ConfirmSent): one statement every few seconds at
// most, never on a delivery's critical path, and well within the send
// lease (store.DefaultSendLease). By then most jobs are delivered, and the
// record has ended their leases: their rows are not written again.
const confirmEvery = 5 * time.Second

// confirmBatch flushes confirmations early once this many wait.
const confirmBatch = 5000

// turn is how long sendHanded goes on sending hand-offs while more keep
// coming, or an outbox pass goes on while the outbox stays full, before
// Run takes its turn for the rest: confirmations, the sweep, hand-offs
// accepted again after a failed send.
const turn = 100 * time.Millisecond

// maxHanded bounds the pointers handed over at creation and not yet sent.
// Past it new jobs go through the outbox query instead; it is also what a
// crash of this process can leave for the sweep. A job sent by the outbox
// is claimed with a statement of its own, where a handed one is claimed in
// memory (store.freshJobs): at 1,000, creates outrunning deliveries in
// split mode sent a third of the jobs through the outbox, and deliveries
// fell behind further; the room a second of creates needs keeps that to a
// few percent, at about 110 bytes a pointer.
const maxHanded = 5000

// disableEvery is how often, at most, the sweep looks for subscriptions to
// disable (DISPATCH_SUBSCRIPTION_DISABLE_AFTER, if shorter): the look reads
// the newest finished jobs of every ACTIVE subscription, in every
// partition, and the sweep runs every few seconds, while the period it
// looks for is days.
const disableEvery = time.Minute

// FailingSubscriptions disables subscriptions that have failed every
// delivery for a while; the publisher's sweep runs it.
type FailingSubscriptions interface {
	DisableFailingSubscriptions(ctx context.Context, now time.Time, after time.Duration) (int64, error)
}

// Destination is a queue jobs may name, by its key (dispatch.RouteQueue.Key).
type Destination struct {
	Key   string
	Queue *queue.Queue
}

// Config configures a Publisher.
type Config struct {
	// Destinations are the queues jobs may name (Job.QueueURL), the
	// default among them or not; a job naming none, or one no longer
	// configured, goes to the queue given to New.
	Destinations []Destination
	// PoolCode is the pool of pointers whose jobs name none.
	PoolCode   string
	ProcessURL string // informational mediationTarget in pointers
	// RequeueAfter is how long past due a live job may go without news
	// before its pointer is sent again (lost message, dead processor).
	RequeueAfter time.Duration
	// Tick is how often the outbox is looked at with no Notify: jobs
	// whose time came (scheduled, retried) are sent within it (default 1s).
	Tick      time.Duration
	BatchSize int
	Logger    *slog.Logger
	// Subscriptions, when set with DisableAfter > 0, has each sweep disable
	// subscriptions whose jobs have all ended ERROR for DisableAfter.
	Subscriptions FailingSubscriptions
	DisableAfter  time.Duration
}

// Publisher is the outbox loop: it sends the pointers of due,
// unsent jobs, right after they commit (Notify) and on a timer (scheduled
// jobs, jobs created while the queue was down, jobs the sweep requeued).
// It is safe to run in every API replica.
type Publisher struct {
	q      *queue.Queue
	outbox Store
	cfg    Config
	log    *slog.Logger
	kick   chan struct{} // Notify: the outbox may have work
	handed chan struct{} // Hand: handed pointers wait

	mu       sync.Mutex
	pending  []dispatch.Unsent // handed: committed marked as queued, to send now
	reserved int               // room taken by creates not yet handed (Reserve)
	sending  bool              // the last send worked: take hand-offs
	stopped  bool              // Run has returned: give hand-offs straight back
	local    Local             // takes handed pointers in process first (nil: none)
	remote   Remote            // else offers them to routers of other processes (nil: none)

	// sent pointers whose send leases are still to be confirmed (Run's
	// goroutine only), when the first of them was sent, and the
	// confirmation being written (nil: none).
	unconfirmed []dispatch.Unsent
	firstSent   time.Time
	confirming  chan struct{}

	// Run's goroutine only: the queues by key, each queue's health, and
	// the keys already warned about (no longer configured).
	byKey   map[string]*queue.Queue
	health  map[*queue.Queue]*queueHealth
	strayed map[string]bool
}

// queueHealth is whether sends to a queue work. A failing queue is tried
// again after a backoff; meanwhile its jobs wait in the outbox, and the
// other queues' jobs go on.
type queueHealth struct {
	retryAt time.Time
	backoff time.Duration
}

// New returns a Publisher.
func New(q *queue.Queue, outbox Store, cfg Config) *Publisher {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.PoolCode == "" {
		cfg.PoolCode = dispatch.DefaultPool
	}
	p := &Publisher{q: q, outbox: outbox, cfg: cfg, log: cfg.Logger.With("component", "publisher"),
		kick: make(chan struct{}, 1), handed: make(chan struct{}, 1), sending: true,
		byKey: map[string]*queue.Queue{"": q}, health: map[*queue.Queue]*queueHealth{}, strayed: map[string]bool{}}
	for _, d := range cfg.Destinations {
		p.byKey[d.Key] = d.Queue
	}
	return p
}

// route is the queue of a job naming key.
func (p *Publisher) route(key string) *queue.Queue {
	if q, ok := p.byKey[key]; ok {
		return q
	}
	if !p.strayed[key] {
		p.strayed[key] = true
		p.log.Warn("a job names a queue that is no longer configured; its pointer goes to the default queue (logged once per queue)",
			"queue", key, "default_queue", p.q.Name())
	}
	return p.q
}

// skip lists the keys of the queues in their backoff after failing, for
// the outbox query to leave out: with the default queue, the keys no
// longer configured whose jobs go to it (else, the oldest due, they would
// fill every pass's batch and hold up the other queues' jobs).
func (p *Publisher) skip(now time.Time) []string {
	var out []string
	for key, q := range p.byKey {
		if h := p.health[q]; h != nil && now.Before(h.retryAt) {
			out = append(out, key)
			if q == p.q {
				for stray := range p.strayed {
					out = append(out, stray)
				}
			}
		}
	}
	return out
}

// sendFailed puts q in a backoff after a failed send (5 s, doubling up to
// a minute); sendWorked ends it.
func (p *Publisher) sendFailed(q *queue.Queue, err error) {
	h := p.health[q]
	if h == nil {
		h = &queueHealth{}
		p.health[q] = h
		p.log.Warn("cannot send to a queue; its jobs wait in the outbox while the other queues' go on", "queue", q.Name(), "err", err)
	}
	h.backoff = min(max(2*h.backoff, 5*time.Second), time.Minute)
	h.retryAt = time.Now().Add(h.backoff)
}

func (p *Publisher) sendWorked(q *queue.Queue) {
	if p.health[q] != nil {
		delete(p.health, q)
		p.log.Info("sending to the queue again", "queue", q.Name())
	}
}

// Accepting reports whether new jobs may be handed over at creation: the
// last send worked and fewer than maxHanded pointers wait or are reserved.
func (p *Publisher) Accepting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sending && !p.stopped && len(p.pending)+p.reserved < maxHanded
}

// Local takes the pointer of a job just created (u, as handed over) into a
// processing pool of this process, instead of the queue
// (router.Router.Offer), or declines it. requeue puts the pointer on the
// queue after all, to be mediated after the delay given; it is called at
// most once.
type Local interface {
	Offer(u dispatch.Unsent, ptr dispatch.Pointer, requeue func(after time.Duration)) bool
}

// DeliverLocally has handed pointers offered to l before they are sent:
// in `dispatch all` the router in the same process mediates a new job when
// a worker is idle or soon will be, with no SQS request. The job's row is marked
// queued under a send lease either way, so a pointer lost with the process
// is sent by the sweep when the lease ends.
func (p *Publisher) DeliverLocally(l Local) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.local = l
}

// Remote takes the pointer of a job just created for a router in another
// process that has asked for it (handoff.Box), or declines it. A job it
// takes comes back through Requeue when the router cannot finish it.
type Remote interface {
	Offer(u dispatch.Unsent, ptr dispatch.Pointer) bool
}

// OfferTo has handed pointers offered to r when no router of this process
// takes them (split mode: `dispatch api`, with routers asking for new jobs
// over the processing endpoint). As with DeliverLocally, the job's row is
// marked queued under a send lease either way.
func (p *Publisher) OfferTo(r Remote) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remote = r
}

// Reserve takes room for n pointers to be handed over by a create about to
// be written, and reports whether there was room (store.Handoff). The bound
// holds however many creates run at once: each create's room is taken
// before its insert and given back by its Hand. Without room, new jobs are
// created unsent and the outbox query finds them.
func (p *Publisher) Reserve(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sending || p.stopped || len(p.pending)+p.reserved+n > maxHanded {
		return false
	}
	p.reserved += n
	return true
}

// Hand takes the pointers of jobs committed already marked as queued and
// sends them before anything else, with no query, and gives back the room
// reserved for them (store.Handoff). jobs may be fewer than reserved, or
// none (the create failed).
func (p *Publisher) Hand(jobs []dispatch.Unsent, reserved int) {
	p.mu.Lock()
	l, r := p.local, p.remote
	p.mu.Unlock()
	if (l != nil || r != nil) && len(jobs) > 0 {
		jobs = p.offer(l, r, jobs)
	}
	p.handToQueue(jobs, reserved)
}

// offer offers each job that neither belongs to a group (its order rides
// on the queue) nor names a queue (whoever named it wants it there) to l,
// then to r, and returns the ones both declined.
func (p *Publisher) offer(l Local, r Remote, jobs []dispatch.Unsent) []dispatch.Unsent {
	rest := jobs[:0:0]
	for _, u := range jobs {
		if u.GroupID == "" && u.QueueURL == "" {
			ptr := p.pointer(u)
			if l != nil && l.Offer(u, ptr, func(after time.Duration) { p.Requeue(u, after) }) {
				continue
			}
			if r != nil && r.Offer(u, ptr) {
				continue
			}
		}
		rest = append(rest, u)
	}
	return rest
}

// Requeue puts the pointer of a job taken in process, or offered to a
// router of another process, on the queue after all. With no delay (it waited too long for a worker, or the router
// stopped) it is sent now. A retry's delay cannot ride on a FIFO queue's message, so the
// job's queued mark is cleared instead, and the outbox query sends it when
// it is due, from whichever replica. Should the database not take that
// (it may be what failed the delivery), the pointer is sent now, and the
// processor holds the job back until it is due, as for any early pointer;
// when the publisher cannot take it either, the mark is cleared once more,
// or left to the sweep.
func (p *Publisher) Requeue(u dispatch.Unsent, after time.Duration) {
	jobs := []dispatch.Unsent{u}
	if after > 0 {
		err := p.outbox.Unmark(context.Background(), []int64{u.ID}, u.Mark)
		if err == nil {
			return
		}
		p.log.Warn("could not give a retried job back to the outbox; sending its pointer now", "job_id", u.ID, "err", err)
	}
	if !p.Reserve(1) {
		p.unmark(jobs)
		p.Notify()
		return
	}
	p.handToQueue(jobs, 1)
}

// handToQueue queues handed pointers for sending and gives back the room
// reserved for them.
func (p *Publisher) handToQueue(jobs []dispatch.Unsent, reserved int) {
	p.mu.Lock()
	p.reserved -= reserved
	if len(jobs) == 0 {
		p.mu.Unlock()
		return
	}
	if p.stopped {
		// A create that found the publisher accepting committed after it
		// stopped: nobody will send these, so the outbox must.
		p.mu.Unlock()
		p.unmark(jobs)
		return
	}
	p.pending = append(p.pending, jobs...)
	p.mu.Unlock()
	select {
	case p.handed <- struct{}{}:
	default:
	}
}

// Notify wakes the publisher for an outbox pass: jobs were committed
// unsent (not handed over).
func (p *Publisher) Notify() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run publishes until ctx is cancelled.
func (p *Publisher) Run(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.Tick)
	defer tick.Stop()
	// The sweep also sends again what a dead process marked and never
	// sent: it runs often enough to find that within a minute.
	sweepEvery := min(max(p.cfg.RequeueAfter/4, time.Second), 15*time.Second)
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	var lastDisable time.Time
	backoff := time.Duration(0)
	// An outbox pass runs on Notify, on the timers and after a failure;
	// handed pointers alone need none. The first runs at once: what the
	// outbox holds at start (left unsent by a stopped process) is due now.
	outboxDue := true
	p.Notify()
	for {
		select {
		case <-ctx.Done():
			p.giveBackHanded()
			p.confirm(ctx, true)
			return nil
		case <-p.handed:
		case <-p.kick:
			outboxDue = true
		case <-tick.C:
			outboxDue = true
		case <-sweep.C:
			outboxDue = true
			expired, requeued, err := p.outbox.Sweep(ctx, time.Now(), p.cfg.RequeueAfter)
			if err != nil {
				p.log.Warn("sweep failed", "err", err)
			} else if expired+requeued > 0 {
				p.log.Info("sweep", "expired", expired, "requeued", requeued)
			}
			if time.Since(lastDisable) >= min(disableEvery, p.cfg.DisableAfter) {
				lastDisable = time.Now()
				p.disableFailing(ctx)
			}
		}
		if backoff > 0 {
			sleepCtx(ctx, backoff)
		}
		err := p.sendHanded(ctx)
		if err == nil && outboxDue {
			err = p.publishAll(ctx)
		}
		if err != nil {
			outboxDue = true // retried, and what was not sent is in the outbox now
			if ctx.Err() != nil {
				p.giveBackHanded()
				p.confirm(ctx, true)
				return nil
			}
			backoff = min(max(2*backoff, 200*time.Millisecond), 5*time.Second)
			p.log.Warn("publishing failed; jobs stay unsent and are retried", "err", err, "backoff", backoff.String())
			continue
		}
		backoff, outboxDue = 0, false
		p.mu.Lock()
		p.sending = true
		p.mu.Unlock()
		p.confirm(ctx, false)
	}
}

// confirm writes the sent pointers' confirmations once a batch is full or
// the oldest has waited confirmEvery, in the background so that sends go
// on meanwhile, one confirmation at a time; with all, it waits for the one
// being written and writes the rest now. A confirmation that fails costs
// at most a duplicate pointer: the sweep sends the job again when its
// lease runs out, and the processor drops the copy.
func (p *Publisher) confirm(ctx context.Context, all bool) {
	if p.confirming != nil {
		if all {
			<-p.confirming
		} else {
			select {
			case <-p.confirming:
			default:
				return // the last one is still being written
			}
		}
		p.confirming = nil
	}
	n := len(p.unconfirmed)
	if n == 0 || (!all && n < confirmBatch && time.Since(p.firstSent) < confirmEvery) {
		return
	}
	sent := p.unconfirmed
	p.unconfirmed = nil
	write := func() {
		// In statements of confirmBatch at most: one statement's work
		// grows faster than its pointers (each finds its mark by its place
		// in the arrays), and the pointers piled up while a slow
		// confirmation was written.
		for chunk := range slices.Chunk(sent, confirmBatch) {
			if err := p.outbox.ConfirmSent(ctx, chunk); err != nil {
				p.log.Warn("could not confirm sent pointers; the sweep will send them again", "jobs", len(chunk), "err", err)
			}
		}
	}
	if all {
		write()
		return
	}
	done := make(chan struct{})
	p.confirming = done
	go func() {
		defer close(done)
		write()
	}()
}

// sendHanded sends the pointers handed over at creation, in order, in
// batches of whatever waits when the last send returned. While creates
// keep coming the hand-offs may never run dry: after a turn it
// returns, signalling p.handed again, so that Run takes its turn for the
// confirmations, the outbox pass and the sweep and comes straight back.
// What it cannot send it gives back to the outbox, and until a send works
// again new jobs are not handed over.
func (p *Publisher) sendHanded(ctx context.Context) error {
	start := time.Now()
	for {
		p.mu.Lock()
		batch := p.pending[:min(len(p.pending), p.cfg.BatchSize)]
		p.pending = p.pending[len(batch):]
		more := len(p.pending) > 0
		p.mu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		sent, err := p.send(ctx, batch)
		if len(sent) < len(batch) {
			ok := make(map[int64]bool, len(sent))
			for _, id := range sent {
				ok[id] = true
			}
			var rest []dispatch.Unsent
			for _, u := range batch {
				if !ok[u.ID] {
					rest = append(rest, u)
				}
			}
			if err != nil {
				p.mu.Lock()
				p.sending = false
				rest = append(rest, p.pending...)
				p.pending = nil
				p.mu.Unlock()
				p.unmark(rest)
				return err
			}
			p.unmark(rest) // the pointers of queues in their backoff: the outbox sends them later
		}
		if more && time.Since(start) >= turn {
			select {
			case p.handed <- struct{}{}:
			default:
			}
			return nil
		}
	}
}

// giveBackHanded returns the pointers not sent yet to the outbox (shutdown),
// so that a replica's or the next start's outbox query sends them at once
// rather than the sweep after DISPATCH_REQUEUE_AFTER.
func (p *Publisher) giveBackHanded() {
	p.mu.Lock()
	rest := p.pending
	p.pending, p.sending, p.stopped = nil, false, true
	p.mu.Unlock()
	p.unmark(rest)
}

// unmark clears the queued mark of handed jobs that were not sent, one
// statement per mark (each create batch has its own).
func (p *Publisher) unmark(jobs []dispatch.Unsent) {
	var marks []time.Time
	byMark := map[int64][]int64{} // by the mark's microsecond, as stored
	for _, u := range jobs {
		k := u.Mark.UnixMicro()
		if _, ok := byMark[k]; !ok {
			marks = append(marks, u.Mark)
		}
		byMark[k] = append(byMark[k], u.ID)
	}
	for _, mark := range marks {
		ids := byMark[mark.UnixMicro()]
		if err := p.outbox.Unmark(context.Background(), ids, mark); err != nil {
			p.log.Warn("could not give unsent jobs back to the outbox; the sweep will send them", "jobs", len(ids), "err", err)
		}
	}
}

func (p *Publisher) disableFailing(ctx context.Context) {
	if p.cfg.Subscriptions == nil || p.cfg.DisableAfter <= 0 {
		return
	}
	n, err := p.cfg.Subscriptions.DisableFailingSubscriptions(ctx, time.Now(), p.cfg.DisableAfter)
	if err != nil {
		p.log.Warn("automatic subscription disable failed", "err", err)
	} else if n > 0 {
		p.log.Warn("subscriptions disabled: every delivery failed", "count", n, "after", p.cfg.DisableAfter.String())
	}
}

// publishAll sends due pointers until none are left, or until a batch is
// sent while hand-offs wait or after a turn: then it kicks itself and
// returns, and Run comes straight back once the others have had theirs. An
// outbox that stays full (a backlog after an outage, a large redrive,
// creates outrunning the sends) would otherwise hold Run here: no
// confirmation written, so every lease running out and each pointer sent
// again, no sweep, and no hand-off accepted again after a failed one.
func (p *Publisher) publishAll(ctx context.Context) error {
	start := time.Now()
	for {
		now := time.Now()
		n, err := p.outbox.PublishDueExcept(ctx, now, p.cfg.BatchSize, p.skip(now), func(due []dispatch.Unsent) ([]int64, error) {
			return p.send(ctx, due)
		})
		if err != nil || n < p.cfg.BatchSize {
			return err
		}
		p.mu.Lock()
		waiting := len(p.pending) > 0
		p.mu.Unlock()
		if waiting || time.Since(start) >= turn {
			// Hand-offs wait: they go next, and the outbox's turn comes
			// straight back after them. Draining the outbox first would
			// leave them waiting until creates found no room and went
			// to the outbox too.
			select {
			case p.kick <- struct{}{}:
			default:
			}
			return nil
		}
	}
}

// send sends the pointers of due to their queues, in order per queue, and
// returns the ids sent. A queue that fails takes none of its later
// pointers (they would overtake) and goes into a backoff; the error says
// so. The pointers of a queue in its backoff are not tried, and are not an
// error: they wait in the outbox.
func (p *Publisher) send(ctx context.Context, due []dispatch.Unsent) ([]int64, error) {
	var (
		order []*queue.Queue
		byQ   = map[*queue.Queue][]dispatch.Unsent{}
	)
	for _, u := range due {
		q := p.route(u.QueueURL)
		if _, ok := byQ[q]; !ok {
			order = append(order, q)
		}
		byQ[q] = append(byQ[q], u)
	}
	sent := make([]int64, 0, len(due))
	var errs []error
	now := time.Now()
	for _, q := range order {
		if h := p.health[q]; h != nil && now.Before(h.retryAt) {
			continue
		}
		ids, err := p.sendTo(ctx, q, byQ[q])
		sent = append(sent, ids...)
		if err != nil {
			if ctx.Err() == nil {
				p.sendFailed(q, err)
			}
			errs = append(errs, err)
			continue
		}
		p.sendWorked(q)
	}
	return sent, errors.Join(errs...)
}

// sendTo sends pointers to q in batches of ten, stopping at the first
// failure.
func (p *Publisher) sendTo(ctx context.Context, q *queue.Queue, due []dispatch.Unsent) ([]int64, error) {
	sent := make([]int64, 0, len(due))
	for len(due) > 0 {
		batch := due[:min(10, len(due))]
		due = due[len(batch):]
		entries := make([]queue.Entry, len(batch))
		for i, u := range batch {
			body, _ := json.Marshal(p.pointer(u))
			entries[i] = queue.Entry{Body: string(body), GroupID: u.MessageGroupID(), DeduplicationID: u.DeduplicationID()}
			if u.TraceContext != "" { // the job's trace goes with its pointer
				entries[i].Attributes = tracing.Carrier(u.TraceContext)
			}
		}
		ok, err := sendBatch(ctx, q, entries)
		if len(ok) > 0 && len(p.unconfirmed) == 0 {
			p.firstSent = time.Now()
		}
		for _, i := range ok {
			sent = append(sent, batch[i].ID)
			p.unconfirmed = append(p.unconfirmed, batch[i])
		}
		if err != nil {
			// Stop at the first failure so later pointers do not overtake.
			return sent, err
		}
	}
	return sent, nil
}

// sendBatch sends entries, and sends again, twice at most and a moment
// apart, those SQS failed on its side (an internal error it asks clients to
// retry): failed for good, they would hold their queue in its backoff, and
// every pointer of it with them. It returns the indexes sent, and the
// error of those that were not.
func sendBatch(ctx context.Context, q *queue.Queue, entries []queue.Entry) ([]int, error) {
	ok, err := q.SendBatch(ctx, entries)
	for try := 1; try <= 2; try++ {
		var se *queue.SendError
		if !errors.As(err, &se) || len(se.Retry) == 0 || len(se.Retry) < se.Failed {
			break // sent, or some failed for good: the queue backs off
		}
		sleepCtx(ctx, time.Duration(try)*100*time.Millisecond)
		idx := se.Retry
		again := make([]queue.Entry, len(idx))
		for i, at := range idx {
			again[i] = entries[at]
		}
		var sent []int
		sent, err = q.SendBatch(ctx, again)
		for _, i := range sent {
			ok = append(ok, idx[i])
		}
		if errors.As(err, &se) {
			for i, at := range se.Retry {
				se.Retry[i] = idx[at]
			}
		}
	}
	slices.Sort(ok) // in the order given: sendTo records them so
	return ok, err
}

// pointer is the message pointer of u.
func (p *Publisher) pointer(u dispatch.Unsent) dispatch.Pointer {
	pool := u.PoolCode
	if pool == "" {
		pool = p.cfg.PoolCode
	}
	ptr := dispatch.Pointer{
		ID: dispatch.FormatID(u.ID), PoolCode: pool, MediationType: "HTTP",
		MediationTarget: p.cfg.ProcessURL, MessageGroupID: u.MessageGroupID(), Sequence: u.Seq,
	}
	if !u.Mark.IsZero() {
		ptr.SentMark = u.Mark.UnixMicro()
	}
	return ptr
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
