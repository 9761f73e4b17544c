package api

import (
	"encoding/json"
	"math"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

// process is the internal processing endpoint: 200 when the
// pointer is done with (delivered, exhausted, not retryable, duplicate,
// unknown), 400 {"retryAfterSeconds": n} when it should come back later,
// 503 when the outcome could not be recorded.
func (s *Server) process(c *gin.Context) {
	var ptr dispatch.Pointer
	if err := json.Unmarshal(body(c), &ptr); err != nil || ptr.ID == "" {
		var p dispatch.Problems
		p.Add("body", "must be a message pointer with an id")
		s.writeError(c, p.Err())
		return
	}
	d, err := s.processor.Process(c.Request.Context(), ptr)
	if err != nil {
		s.log.Error("processing failed; the router will retry", "job_id", ptr.ID, "err", err)
		s.writeError(c, dispatch.Errorf(dispatch.EUnavailable, "the job could not be processed now; retry"))
		return
	}
	if d.Done {
		c.JSON(http.StatusOK, dispatch.ProcessAnswer{Status: "done", JobStatus: (*string)(&d.JobStatus), Reason: d.Reason})
		return
	}
	secs := int(math.Ceil(d.RetryAfter.Seconds()))
	s.log.Debug("pointer to retry later", "job_id", ptr.ID, "retry_after_s", secs, "reason", d.Reason)
	// A struct, not a gin.H map: a map costs a sorted reflection walk per
	// delivery.
	c.JSON(http.StatusBadRequest, dispatch.ProcessAnswer{Status: "retry", RetryAfterSeconds: &secs, Reason: d.Reason})
}
