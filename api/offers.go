package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
)

// offers is the internal long poll through which a router of another
// process takes the pointers of jobs just created here, for its pools
// with an idle worker (handoff): 200 {"offers": [...]}, with none when the
// wait passed first; 409 when the router consumes none of the queue the
// offered jobs are bound for.
func (s *Server) offers(c *gin.Context) {
	var req handoff.Request
	if !s.decodeChecked(c, &req, `{"room": {"<pool code>": n}, "queues": ["<queue name>"], "waitSeconds": n}`) {
		return
	}
	// The wait ends before the server's read deadline, which would cancel
	// the request.
	read := s.cfg.ReadTimeout
	if read <= 0 {
		read = DefaultReadTimeout
	}
	req.WaitSeconds = min(req.WaitSeconds, max(int((read-2*time.Second)/time.Second), 0))
	ctx := c.Request.Context()
	got, err := s.cfg.Offers.Take(ctx, req)
	if err != nil {
		s.writeError(c, dispatch.Errorf(dispatch.EConflict,
			"this API offers jobs bound for queue %s only, and the router consumes none of it; it takes its jobs from its own queues", s.cfg.Offers.Queue()))
		return
	}
	if ctx.Err() != nil {
		// The router has gone: nobody will read them.
		s.cfg.Offers.Return(got)
		return
	}
	if got == nil {
		got = []handoff.Offer{}
	}
	writeJSON(c, http.StatusOK, handoff.Answer{Offers: got})
}

// giveBack puts an offered job the router cannot finish on the queue.
func (s *Server) giveBack(c *gin.Context) {
	var g handoff.GiveBack
	if !s.decodeChecked(c, &g, `{"handle": {...}, "afterSeconds": n}`) {
		return
	}
	s.cfg.Offers.GiveBack(g.Handle, time.Duration(g.AfterSeconds)*time.Second)
	c.Status(http.StatusNoContent)
}

// decodeChecked decodes the request's body into v and checks it: a body
// that is not the JSON of want, or a value with problems, is answered 400
// naming every one, and decodeChecked reports false.
func (s *Server) decodeChecked(c *gin.Context, v interface{ Check() error }, want string) bool {
	if err := json.Unmarshal(body(c), v); err != nil {
		var p dispatch.Problems
		p.Add("body", "must be %s", want)
		s.writeError(c, p.Err())
		return false
	}
	if err := v.Check(); err != nil {
		s.writeError(c, err)
		return false
	}
	return true
}
