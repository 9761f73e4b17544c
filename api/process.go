package api

import (
	"math"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
)

// process is the internal processing endpoint: 200 when the
// pointer is done with (delivered, exhausted, not retryable, duplicate,
// unknown), 400 {"retryAfterSeconds": n} when it should come back later,
// 503 when the outcome could not be recorded.
func (s *Server) process(c *gin.Context) {
	ptr, err := dispatch.ParsePointer(body(c))
	if err != nil {
		var p dispatch.Problems
		p.Add("body", "must be a message pointer with an id")
		s.writeError(c, p.Err())
		return
	}
	// A job offered to the router carries its handle: the processor claims
	// it without a statement when this API's store handed it over
	// (store.ClaimJob), and on a retry this API takes it back itself.
	ctx := c.Request.Context()
	var handle *handoff.Handle
	if v := c.GetHeader(handoff.Header); v != "" {
		if h, err := handoff.DecodeHeader(v); err == nil && dispatch.FormatID(h.ID) == ptr.ID {
			handle = &h
			ctx = handoff.WithHandle(ctx, h)
		} else {
			s.log.Warn("ignored a processing request's unreadable offer handle", "job_id", ptr.ID)
		}
	}
	if c.GetHeader(handoff.FirstReceiveHeader) == "1" {
		ctx = handoff.WithFirstReceive(ctx)
	}
	d, err := s.processor.Process(ctx, ptr)
	if err != nil {
		s.log.Error("processing failed; the router will retry", "job_id", ptr.ID, "err", err)
		s.writeError(c, dispatch.Errorf(dispatch.EUnavailable, "the job could not be processed now; retry"))
		return
	}
	if d.Done {
		writeJSON(c, http.StatusOK, dispatch.ProcessAnswer{Status: "done", JobStatus: (*string)(&d.JobStatus), Reason: d.Reason})
		return
	}
	secs := int(math.Ceil(d.RetryAfter.Seconds()))
	s.log.Debug("pointer to retry later", "job_id", ptr.ID, "retry_after_s", secs, "reason", d.Reason)
	// A struct, not a gin.H map: a map costs a sorted reflection walk per
	// delivery.
	answer := dispatch.ProcessAnswer{Status: "retry", RetryAfterSeconds: &secs, Reason: d.Reason}
	if handle != nil && s.cfg.Offers != nil {
		// A job offered to the router is on no queue: it goes back to the
		// outbox now, whether or not the router hears the answer. (An
		// unreadable handle is left to the router to give back.)
		s.cfg.Offers.GiveBack(*handle, time.Duration(secs)*time.Second)
		answer.GivenBack = true
	}
	writeJSON(c, http.StatusBadRequest, answer)
}
