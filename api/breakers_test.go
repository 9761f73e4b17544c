package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
)

// The processing endpoint's circuit breakers are listed and reset with the
// internal token (a router running apart shows them on its listener), in
// the documented shapes.
func TestProcessCircuitBreakers(t *testing.T) {
	t.Parallel()
	until := time.Now().Add(time.Minute)
	var reset []string
	f := setup(t, withConfig(func(c *api.Config) {
		c.BreakerStates = func() []dispatch.BreakerState {
			return []dispatch.BreakerState{{Host: "down.example:443", State: dispatch.BreakerOpen, ConsecutiveFailures: 5, OpenUntil: &until}}
		}
		c.ResetBreaker = func(host string) bool { reset = append(reset, host); return host == "down.example:443" }
	}))
	var got []map[string]any
	if err := json.Unmarshal(f.do(t, "GET", "/api/dispatch/process/circuit-breakers", "").want(t, http.StatusOK).body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0]["state"] != "OPEN" || got[0]["openUntil"] == nil || got[0]["consecutiveFailures"] != 5.0 {
		t.Errorf("breakers = %v", got)
	}
	f.do(t, "GET", "/api/dispatch/process/circuit-breakers", "", bearer(apiToken)).want(t, http.StatusUnauthorized)
	f.do(t, "POST", "/api/dispatch/process/circuit-breakers/down.example:443/reset", "").want(t, http.StatusOK)
	f.do(t, "POST", "/api/dispatch/process/circuit-breakers/none.example:443/reset", "").want(t, http.StatusNotFound)
	f.do(t, "POST", "/api/dispatch/process/circuit-breakers/down.example:443/reset", "", bearer(adminToken)).want(t, http.StatusUnauthorized)
	if len(reset) != 2 {
		t.Errorf("resets %v", reset)
	}
}
