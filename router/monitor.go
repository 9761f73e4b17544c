package router

import (
	"context"
	"sync"
	"time"
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
	// not be read, and DepthError says why.
	Depth      *DepthStats `json:"depth"`
	DepthError string      `json:"depthError,omitempty"`
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
// DefaultCallTimeout at most (or ctx's deadline).
func (r *Router) Queues(ctx context.Context) []QueueStats {
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Queue.Depth(ctx)
			if err != nil {
				out[i].DepthError = err.Error()
				return
			}
			out[i].Depth = &DepthStats{Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed}
		}()
	}
	wg.Wait()
	return out
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
