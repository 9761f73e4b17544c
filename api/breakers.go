package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

// breakerStateView is a target host's circuit breaker in this process.
type breakerStateView struct {
	Host                string  `json:"host"`
	State               string  `json:"state"`
	ConsecutiveFailures int     `json:"consecutiveFailures"`
	OpenUntil           *string `json:"openUntil,omitempty"`
}

// circuitBreakers lists the circuit breakers of this process's deliveries,
// one per target host (internal: the router's /monitoring/circuit-breakers
// reads them when it runs apart).
func (s *Server) circuitBreakers(c *gin.Context) {
	out := []breakerStateView{}
	if s.cfg.BreakerStates != nil {
		for _, b := range s.cfg.BreakerStates() {
			out = append(out, breakerStateView{Host: b.Host, State: b.State, ConsecutiveFailures: b.ConsecutiveFailures, OpenUntil: fmtTimePtr(b.OpenUntil)})
		}
	}
	writeJSON(c, http.StatusOK, out)
}

// resetCircuitBreaker closes a target host's breaker in this process.
func (s *Server) resetCircuitBreaker(c *gin.Context) {
	host := c.Param("host")
	if s.cfg.ResetBreaker == nil || !s.cfg.ResetBreaker(host) {
		s.writeError(c, dispatch.Errorf(dispatch.ENotFound, "no circuit breaker for %s", host))
		return
	}
	s.log.Info("circuit breaker reset", "host", host)
	writeJSON(c, http.StatusOK, gin.H{"host": host, "state": dispatch.BreakerClosed})
}
