// Package handoff passes the pointers of new jobs from an API process
// straight to a router with an idle worker in another process (split
// mode), as `dispatch all` does within one process: no SQS request and no
// trip through the queue's latency. The router asks (a long poll on the
// processing endpoint's /offers, with the room each of its pools has); the
// API answers with the pointers of jobs it has just committed, whose rows
// are marked queued under a send lease exactly as when they go to the
// queue. A retry the API gives back itself, in the processing request
// that recorded it (Header); whatever else the router cannot finish (a
// stop, a job that waited too long for a worker) it gives back with the
// job's Handle, and the API's publisher puts it on the queue. A pointer
// lost between the two
// (either process dies) is sent by the outbox's sweep when the lease ends:
// later, never lost. See docs/decisions/split-handoff.md.
package handoff

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
)

// MaxWait bounds a request's long poll, as SQS bounds a receive's.
const MaxWait = 20 * time.Second

// MaxPerPool bounds the pointers one answer carries for a pool, as a
// receive's ten messages.
const MaxPerPool = 10

// MaxPools bounds the pools one request names.
const MaxPools = 100

// Request is what a router asks for: up to Room[code] pointers for each
// of its pools with an idle worker, waiting up to WaitSeconds for the
// first. Queues names the queues the router consumes: it is offered only
// jobs bound for one of them, as it would have received them.
type Request struct {
	Room        map[string]int `json:"room"`
	Queues      []string       `json:"queues"`
	WaitSeconds int            `json:"waitSeconds"`
}

// Check reports every problem of r at once.
func (r Request) Check() error {
	var p dispatch.Problems
	if len(r.Room) == 0 {
		p.Add("room", "must name at least one pool")
	}
	if len(r.Room) > MaxPools {
		p.Add("room", "must name at most %d pools", MaxPools)
	}
	for code, n := range r.Room {
		if code == "" || len(code) > 100 {
			p.Add("room", "pool codes must be 1 to 100 characters")
		}
		if n < 1 || n > MaxPerPool {
			p.Add("room."+truncate(code), "must be 1 to %d", MaxPerPool)
		}
	}
	if len(r.Queues) == 0 || len(r.Queues) > 100 {
		p.Add("queues", "must name 1 to 100 queues")
	}
	for _, q := range r.Queues {
		if q == "" || len(q) > 80 {
			p.Add("queues", "queue names must be 1 to 80 characters")
			break
		}
	}
	if r.WaitSeconds < 0 || r.WaitSeconds > int(MaxWait/time.Second) {
		p.Add("waitSeconds", "must be 0 to %d", int(MaxWait/time.Second))
	}
	return p.Err()
}

func truncate(s string) string {
	if len(s) > 100 {
		return s[:100]
	}
	return s
}

// Answer is the API's answer: the pointers handed over, in the order their
// jobs were created.
type Answer struct {
	Offers []Offer `json:"offers"`
}

// Offer is one job handed over: its pointer, its trace, and the Handle to
// give it back with.
type Offer struct {
	Pointer      dispatch.Pointer `json:"pointer"`
	TraceContext string           `json:"traceContext,omitempty"`
	Handle       Handle           `json:"handle"`
}

// Handle is what the API's publisher needs to put an offered job's pointer
// on the queue after all: the job's id, pool and trace, and the mark and
// generation its row was sent under. Any API replica can use it.
type Handle struct {
	ID           int64     `json:"id,string"`
	Gen          int       `json:"gen,omitempty"`
	Seq          int64     `json:"seq,omitempty"`
	Mark         time.Time `json:"mark"`
	PoolCode     string    `json:"poolCode,omitempty"`
	TraceContext string    `json:"traceContext,omitempty"`
}

// HandleOf is u's handle. Only ungrouped jobs naming no queue are offered,
// so neither is carried.
func HandleOf(u dispatch.Unsent) Handle {
	return Handle{ID: u.ID, Gen: u.Gen, Seq: u.Seq, Mark: u.Mark, PoolCode: u.PoolCode, TraceContext: u.TraceContext}
}

// Unsent is the job h names, as the publisher handles it.
func (h Handle) Unsent() dispatch.Unsent {
	return dispatch.Unsent{ID: h.ID, Gen: h.Gen, Seq: h.Seq, Mark: h.Mark, PoolCode: h.PoolCode, TraceContext: h.TraceContext}
}

// GiveBack is the request to put an offered job on the queue after all,
// to be mediated no sooner than AfterSeconds from now.
type GiveBack struct {
	Handle       Handle `json:"handle"`
	AfterSeconds int    `json:"afterSeconds"`
}

// Check reports every problem of g at once.
func (g GiveBack) Check() error {
	var p dispatch.Problems
	if g.Handle.ID <= 0 {
		p.Add("handle.id", "must be a job id")
	}
	if g.Handle.Mark.IsZero() {
		p.Add("handle.mark", "must be the time the job was marked queued")
	}
	if g.AfterSeconds < 0 || g.AfterSeconds > int(dispatch.MaxVisibilityDelay/time.Second) {
		p.Add("afterSeconds", "must be 0 to %d", int(dispatch.MaxVisibilityDelay/time.Second))
	}
	return p.Err()
}

// ErrNotOffered means the API offers no jobs to this router (an older
// version, or the router consumes none of the queue its new jobs are
// bound for): the router takes them from its queues only.
var ErrNotOffered = errors.New("the processing endpoint offers no jobs")

// Box is the API's side: routers' requests wait in it, and the publisher
// offers each new job's pointer to the longest waiting request with room
// in its pool. A request answers as soon as it holds one pointer (with what
// more has come by the time it runs), so no timer is on a delivery's path.
type Box struct {
	queue   string // the name of the queue the offered jobs are bound for
	requeue func(u dispatch.Unsent, after time.Duration)

	mu      sync.Mutex
	waiting []*request
	closed  bool // the API is stopping: nothing is offered, no request waits
	offered int64
}

type request struct {
	room   map[string]int // what is left of it
	offers []Offer
	ready  chan struct{} // closed with the first offer
}

// NewBox returns a Box for jobs bound for the queue named queue (the
// API's default queue): only routers consuming it are offered them.
// requeue puts a job's pointer on that queue, to be mediated no sooner
// than after (the publisher's Requeue).
func NewBox(queue string, requeue func(u dispatch.Unsent, after time.Duration)) *Box {
	return &Box{queue: queue, requeue: requeue}
}

// Queue is the name of the queue the offered jobs are bound for.
func (b *Box) Queue() string { return b.queue }

// Offer hands u's pointer to a waiting request with room in its pool, and
// reports whether one took it.
func (b *Box) Offer(u dispatch.Unsent, ptr dispatch.Pointer) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, r := range b.waiting {
		if r.room[ptr.PoolCode] <= 0 {
			continue
		}
		r.room[ptr.PoolCode]--
		r.offers = append(r.offers, Offer{Pointer: ptr, TraceContext: u.TraceContext, Handle: HandleOf(u)})
		b.offered++
		if len(r.offers) == 1 {
			close(r.ready)
		}
		return true
	}
	return false
}

// Take waits until req's room holds at least one pointer, req's wait has
// passed or ctx has ended, and returns the pointers handed over. Once it
// has returned, nothing more is added to them. A request naming none of
// the box's queue gets ErrNotOffered at once: a router consuming only
// other queues must not mediate jobs bound for this one.
func (b *Box) Take(ctx context.Context, req Request) ([]Offer, error) {
	if !slices.Contains(req.Queues, b.queue) {
		return nil, ErrNotOffered
	}
	r := &request{room: make(map[string]int, len(req.Room)), ready: make(chan struct{})}
	for code, n := range req.Room {
		r.room[code] = min(n, MaxPerPool)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, nil
	}
	b.waiting = append(b.waiting, r)
	b.mu.Unlock()
	if req.WaitSeconds > 0 {
		t := time.NewTimer(time.Duration(req.WaitSeconds) * time.Second)
		select {
		case <-r.ready:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.waiting {
		if x == r {
			b.waiting = append(b.waiting[:i:i], b.waiting[i+1:]...)
			break
		}
	}
	return r.offers, nil
}

// Close answers every waiting request now, with what it holds, and
// offers nothing more: the API is stopping, and a long poll must not hold
// its stop up.
func (b *Box) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, r := range b.waiting {
		if len(r.offers) == 0 {
			close(r.ready)
		}
		r.room = nil // takes nothing more
	}
}

// Offered is how many pointers were handed to requests.
func (b *Box) Offered() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.offered
}

// Waiting is how many requests wait.
func (b *Box) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}

// Return puts the pointers of offers that never reached their router (its
// request ended before the answer was written) on the queue now.
func (b *Box) Return(offers []Offer) {
	for _, o := range offers {
		b.requeue(o.Handle.Unsent(), 0)
	}
}

// GiveBack puts a job a router gave back on the queue, to be mediated no
// sooner than after.
func (b *Box) GiveBack(h Handle, after time.Duration) {
	b.requeue(h.Unsent(), after)
}

// Header carries an offered job's Handle on its processing request (the
// JSON, base64url-encoded): should the delivery be retried, the API puts
// the job back in its outbox itself, in the same request, so a retry does
// not depend on the router living to give it back.
const Header = "X-Dispatch-Offer"

// EncodeHeader is h as Header's value.
func (h Handle) EncodeHeader() string {
	b, _ := json.Marshal(h)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeHeader parses Header's value.
func DecodeHeader(v string) (Handle, error) {
	var h Handle
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, err
	}
	if h.ID <= 0 || h.Mark.IsZero() {
		return h, errors.New("handoff: a handle needs a job id and a mark")
	}
	return h, nil
}

// FirstReceiveHeader on a processing request says the queue message it
// mediates is received for the first time (SQS's ApproximateReceiveCount
// of 1): FirstReceive on the processing endpoint's side.
const FirstReceiveHeader = "X-Dispatch-First-Receive"

type firstReceiveKey struct{}

// WithFirstReceive is ctx mediating a queue message received for the
// first time. With the queued mark its pointer was sent under
// (dispatch.Pointer.SentMark) it proves what a Handle proves: no one can
// have claimed the job through this pointer before.
func WithFirstReceive(ctx context.Context) context.Context {
	return context.WithValue(ctx, firstReceiveKey{}, true)
}

// FirstReceive reports whether ctx mediates a message received for the
// first time.
func FirstReceive(ctx context.Context) bool {
	first, _ := ctx.Value(firstReceiveKey{}).(bool)
	return first
}

type handleKey struct{}

// WithHandle is ctx carrying the handle of the offered job being mediated.
func WithHandle(ctx context.Context, h Handle) context.Context {
	return context.WithValue(ctx, handleKey{}, h)
}

// HandleFrom is the handle ctx carries, if any.
func HandleFrom(ctx context.Context) (Handle, bool) {
	h, ok := ctx.Value(handleKey{}).(Handle)
	return h, ok
}
