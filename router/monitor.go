package router

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/queue"
)

// Queue states, as /health/ready and /monitoring/queues report them.
const (
	QueueStarting = "STARTING" // not answered yet, and not failed either
	QueueUp       = "UP"       // the last call to it succeeded
	QueueDown     = "DOWN"     // the last call to it failed (LastError says why)
)

// QueueStats is one consumed queue's state for /monitoring/queues.
type QueueStats struct {
	Name string `json:"name"`
	// URL is the queue's URL once known (configured, or looked up).
	URL    string `json:"url,omitempty"`
	Status string `json:"status"`
	// LastError is why the last call failed (DOWN only), and FailedAt when.
	LastError string `json:"lastError,omitempty"`
	FailedAt  string `json:"failedAt,omitempty"`
	// Connections is its number of receive loops; VisibilityTimeoutSeconds
	// the visibility in effect (0 until the queue has answered).
	Connections              int `json:"connections"`
	VisibilityTimeoutSeconds int `json:"visibilityTimeoutSeconds"`
	// Receives counts ReceiveMessage calls, MessagesReceived the messages
	// they brought, ReceiveErrors the calls that failed.
	Receives         int64 `json:"receives"`
	MessagesReceived int64 `json:"messagesReceived"`
	ReceiveErrors    int64 `json:"receiveErrors"`
	// Held is how many of its messages the router holds (buffered or in
	// flight).
	Held int `json:"held"`
	// Depth is the queue's message counts as SQS approximates them
	// (GetQueueAttributes at the time of the request); nil when they could
	// not be read, and DepthError says why. DepthAt is when they were read
	// ("" when never).
	Depth      *DepthStats `json:"depth"`
	DepthError string      `json:"depthError,omitempty"`
	DepthAt    string      `json:"depthAt,omitempty"`
}

// DepthStats are a queue's approximate message counts.
type DepthStats struct {
	Visible  int64 `json:"visible"`
	InFlight int64 `json:"inFlight"`
	Delayed  int64 `json:"delayed"`
}

func (s *source) status() (status, lastError string, failedAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ok.Load():
		return QueueUp, "", time.Time{}
	case s.lastError != "":
		return QueueDown, s.lastError, s.failedAt
	}
	return QueueStarting, "", time.Time{}
}

// Queues returns every consumed queue's state, in configuration order. The
// depths are read from SQS now, all queues at once, each within
// queue.DefaultCallTimeout at most (or ctx's deadline).
func (r *Router) Queues(ctx context.Context) []QueueStats {
	return r.queues(ctx, 0, true)
}

// queues returns every queue's state with a depth reading at most maxAge
// old, read now when the last is older; with read false, the last reading
// whatever its age (none when never read).
func (r *Router) queues(ctx context.Context, maxAge time.Duration, read bool) []QueueStats {
	held := map[*source]int{}
	r.mu.Lock()
	for k := range r.held {
		held[k.src]++
	}
	r.mu.Unlock()
	out := make([]QueueStats, len(r.sources))
	var wg sync.WaitGroup
	for i, s := range r.sources {
		status, lastErr, failedAt := s.status()
		st := QueueStats{Name: s.name, URL: s.Queue.KnownURL(), Status: status, LastError: lastErr,
			Connections: s.Connections, VisibilityTimeoutSeconds: int(s.visibility() / time.Second),
			Receives: s.receives.Load(), MessagesReceived: s.received.Load(), ReceiveErrors: s.receiveFailures.Load(),
			Held: held[s]}
		if !failedAt.IsZero() {
			st.FailedAt = failedAt.UTC().Format(time.RFC3339Nano)
		}
		out[i] = st
		if !read {
			out[i].setDepth(s.Queue.LastDepth())
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].setDepth(s.Queue.DepthWithin(ctx, maxAge))
		}()
	}
	wg.Wait()
	return out
}

func (st *QueueStats) setDepth(d queue.DepthReading) {
	switch {
	case d.At.IsZero():
		return
	case d.Err != nil:
		st.DepthError = d.Err.Error()
	default:
		st.Depth = &DepthStats{Visible: d.Depth.Visible, InFlight: d.Depth.InFlight, Delayed: d.Depth.Delayed}
	}
	st.DepthAt = stamp(d.At)
}

// ReadyQueue is one queue's line in /health/ready.
type ReadyQueue struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// Readiness says, per queue, whether its last call succeeded; ready is
// true when every queue's did.
func (r *Router) Readiness() (ready bool, queues []ReadyQueue) {
	ready = true
	for _, s := range r.sources {
		status, lastErr, _ := s.status()
		queues = append(queues, ReadyQueue{Name: s.name, Status: status, Error: lastErr})
		ready = ready && status == QueueUp
	}
	return ready, queues
}

// Warning types, as /monitoring/warnings reports them.
const (
	WarnQueueUnavailable = "QUEUE_UNAVAILABLE"        // a queue does not answer, or a receive failed
	WarnVisibilityShort  = "VISIBILITY_TIMEOUT_SHORT" // a queue's visibility timeout is shorter than a mediation may take
	WarnUnknownPool      = "UNKNOWN_POOL"             // a pointer names a pool that is not configured: the default pool took it
	WarnUnparseable      = "UNPARSEABLE_MESSAGE"      // a message that is not a pointer was dropped
	WarnMediationFailed  = "MEDIATION_FAILED"         // the processing endpoint gave no usable answer (the message is retried)
	WarnHeartbeatFailed  = "HEARTBEAT_FAILED"         // the visibility of messages in flight could not be extended
	WarnVisibilityChange = "VISIBILITY_CHANGE_FAILED" // messages could not be given back; they return when their timeout ends
	WarnDeleteFailed     = "DELETE_FAILED"            // finished messages could not be deleted; they come back and are acknowledged again
	WarnShutdownDeadline = "SHUTDOWN_DEADLINE"        // a stop cancelled mediations still in flight
	WarnReloadFailed     = "RELOAD_FAILED"            // a reload of the configuration changed nothing
)

// maxWarnings is how many distinct warnings the router keeps.
const maxWarnings = 100

// Warning is something the router ran into, for /monitoring/warnings.
// Repeats of one (same type, queue and pool) are counted, not listed again.
type Warning struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Queue   string `json:"queue,omitempty"`
	Pool    string `json:"pool,omitempty"`
	// JobID is the job of the latest occurrence, when it concerns one.
	JobID   string `json:"jobId,omitempty"`
	Count   int    `json:"count"`
	FirstAt string `json:"firstAt"`
	LastAt  string `json:"lastAt"`
}

// warnings keeps the latest maxWarnings distinct warnings.
type warnings struct {
	mu     sync.Mutex
	byKey  map[string]*warningEntry
	oldest []string // keys, oldest last seen first
}

type warningEntry struct {
	w           Warning
	first, last time.Time
}

func (ws *warnings) add(w Warning) {
	now := time.Now()
	key := w.Type + "\x00" + w.Queue + "\x00" + w.Pool
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byKey == nil {
		ws.byKey = map[string]*warningEntry{}
	}
	e := ws.byKey[key]
	if e == nil {
		e = &warningEntry{first: now}
		ws.byKey[key] = e
	} else {
		ws.oldest = slices.DeleteFunc(ws.oldest, func(k string) bool { return k == key })
	}
	count := e.w.Count + 1
	e.w, e.last = w, now
	e.w.Count = count
	ws.oldest = append(ws.oldest, key)
	if len(ws.oldest) > maxWarnings {
		delete(ws.byKey, ws.oldest[0])
		ws.oldest = ws.oldest[1:]
	}
}

// list returns the warnings, the latest first.
func (ws *warnings) list() []Warning {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]Warning, 0, len(ws.oldest))
	for i := len(ws.oldest) - 1; i >= 0; i-- {
		e := ws.byKey[ws.oldest[i]]
		w := e.w
		w.FirstAt, w.LastAt = stamp(e.first), stamp(e.last)
		out = append(out, w)
	}
	return out
}

// Warnings returns the latest distinct warnings, the latest first.
func (r *Router) Warnings() []Warning { return r.warnings.list() }

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// InFlightMessage is a message the router holds, for /monitoring/in-flight.
type InFlightMessage struct {
	JobID     string `json:"jobId"`
	MessageID string `json:"messageId"`
	Queue     string `json:"queue"`
	Pool      string `json:"pool"`
	GroupID   string `json:"groupId"`
	// State is MEDIATING (its mediation is under way) or BUFFERED (it
	// waits for a slot, or for its group's message ahead of it).
	State string `json:"state"`
	// ReceivedAt is when this router received it, AgeMillis how long ago.
	ReceivedAt string `json:"receivedAt"`
	AgeMillis  int64  `json:"ageMillis"`
	// StartedAt is when its mediation started, MediatingMillis how long
	// ago (MEDIATING only).
	StartedAt       string `json:"startedAt,omitempty"`
	MediatingMillis int64  `json:"mediatingMillis,omitempty"`
	// ReceiveCount is how many times the queue has handed it out.
	ReceiveCount int `json:"receiveCount"`
}

// Message states in /monitoring/in-flight.
const (
	Mediating = "MEDIATING"
	Buffered  = "BUFFERED"
)

// InFlight lists the messages the router holds, the oldest first.
func (r *Router) InFlight() []InFlightMessage {
	now := time.Now()
	r.mu.Lock()
	out := make([]InFlightMessage, 0, len(r.held))
	for _, m := range r.held {
		v := InFlightMessage{JobID: m.ptr.ID, MessageID: m.ID, Queue: m.queueName(), Pool: m.pool.code, GroupID: m.group,
			State: Buffered, ReceivedAt: stamp(m.received), AgeMillis: now.Sub(m.received).Milliseconds(), ReceiveCount: m.ReceiveCount}
		if !m.started.IsZero() {
			v.State, v.StartedAt, v.MediatingMillis = Mediating, stamp(m.started), max(now.Sub(m.started).Milliseconds(), 1)
		}
		out = append(out, v)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b InFlightMessage) int { return cmp.Compare(b.AgeMillis, a.AgeMillis) })
	return out
}

// InFlightSummary sums up the messages the router holds, for its reports
// to the database.
type InFlightSummary struct {
	Count     int `json:"count"`
	Mediating int `json:"mediating"`
	Buffered  int `json:"buffered"`
	// Oldest is the message held longest (nil when none is held).
	Oldest *InFlightMessage `json:"oldest,omitempty"`
}

func summarize(held []InFlightMessage) InFlightSummary {
	sum := InFlightSummary{Count: len(held)}
	for i, m := range held {
		if m.State == Mediating {
			sum.Mediating++
		} else {
			sum.Buffered++
		}
		if i == 0 {
			sum.Oldest = &held[0] // InFlight lists the oldest first
		}
	}
	return sum
}

// Breakers are the circuit breakers of the processing endpoint (one per
// target host), as the router's listener shows and resets them.
type Breakers interface {
	States(ctx context.Context) ([]dispatch.BreakerState, error)
	// Reset closes host's breaker; false when there is none.
	Reset(ctx context.Context, host string) (bool, error)
}

// BreakerStats is a target host's circuit breaker for
// /monitoring/circuit-breakers.
type BreakerStats struct {
	Host                string `json:"host"`
	State               string `json:"state"`
	ConsecutiveFailures int    `json:"consecutiveFailures"`
	OpenUntil           string `json:"openUntil,omitempty"`
}

func breakerStats(states []dispatch.BreakerState) []BreakerStats {
	out := make([]BreakerStats, len(states))
	for i, s := range states {
		out[i] = BreakerStats{Host: s.Host, State: s.State, ConsecutiveFailures: s.ConsecutiveFailures}
		if s.OpenUntil != nil {
			out[i].OpenUntil = stamp(*s.OpenUntil)
		}
	}
	return out
}
