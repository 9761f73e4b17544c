package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// QueueDepth is a queue's message counts, as SQS approximates them.
type QueueDepth struct {
	Name     string // the queue's name
	Visible  int64  // waiting to be received
	InFlight int64  // received, not deleted yet
	Delayed  int64  // sent with a delay that has not passed
}

type queueDepthView struct {
	Name     string `json:"name"`
	Visible  int64  `json:"visible"`
	InFlight int64  `json:"inFlight"`
	Delayed  int64  `json:"delayed"`
}

type backlogView struct {
	Pending    int64 `json:"pending"`
	InProgress int64 `json:"inProgress"`
	Failed     int64 `json:"failed"`
	Unsent     int64 `json:"unsent"`
	// OldestDueAt is when the longest-waiting due job became due, and
	// OldestWaitSeconds how long ago that is by the server's clock (0 when
	// none waits).
	OldestDueAt       *string         `json:"oldestDueAt"`
	OldestWaitSeconds float64         `json:"oldestWaitSeconds"`
	Queue             *queueDepthView `json:"queue"`
	QueueError        string          `json:"queueError,omitempty"`
	At                string          `json:"at"`
}

// backlog answers how far delivery is behind: the live jobs by state, the
// pointers not sent yet, the longest wait of a due job (one indexed
// statement), and the queue's depth (one GetQueueAttributes call, at most
// 3 s: a queue that does not answer leaves the rest of the answer intact).
func (s *Server) backlog(c *gin.Context) {
	now := s.now()
	b, err := s.store.Backlog(c.Request.Context(), now)
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := backlogView{Pending: b.Pending, InProgress: b.InProgress, Failed: b.Failed, Unsent: b.Unsent,
		OldestDueAt: fmtTimePtr(b.OldestDue), At: fmtTime(now)}
	if b.OldestDue != nil {
		v.OldestWaitSeconds = max(now.Sub(*b.OldestDue).Seconds(), 0)
	}
	if s.cfg.QueueDepth == nil {
		v.QueueError = "no queue is configured for this API"
	} else {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 3*time.Second)
		d, err := s.cfg.QueueDepth(ctx)
		cancel()
		if err != nil {
			s.log.Warn("queue depth unavailable", "err", err)
			v.QueueError = "the queue's attributes could not be read (GetQueueAttributes): " + err.Error()
		} else {
			v.Queue = &queueDepthView{Name: d.Name, Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed}
		}
	}
	writeJSON(c, http.StatusOK, v)
}
