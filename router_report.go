package dispatch

import (
	"encoding/json"
	"time"
)

// RouterReport is what a router process last reported about itself: its
// pools, written to the database every few seconds and read by the API,
// so the console shows every router's pools whatever host it runs on.
type RouterReport struct {
	ID      string // host:pid:random, new at each start
	Host    string
	Version string
	Pools   json.RawMessage // its pools, as its /monitoring/pools answers
	// StartedAt is when the process started; ReportedAt when it last
	// reported (the database's clock); StoppedAt when it stopped (nil:
	// running, or gone without a word).
	StartedAt  time.Time
	ReportedAt time.Time
	StoppedAt  *time.Time
	// Silence is how long ago it last reported, by the database's clock
	// (set on reads).
	Silence time.Duration
}

// RouterGoneAfter is how long a router may stay silent before it is shown
// as gone; routers report every RouterReportEvery.
const (
	RouterGoneAfter   = time.Minute
	RouterReportEvery = 5 * time.Second
)

// Router states, as the console shows them.
const (
	RouterUp      = "UP"      // reported within RouterGoneAfter
	RouterStopped = "STOPPED" // said it stopped
	RouterGone    = "GONE"    // silent for longer than RouterGoneAfter
)

// State says whether the router is up, stopped or gone.
func (r RouterReport) State() string {
	switch {
	case r.StoppedAt != nil:
		return RouterStopped
	case r.Silence > RouterGoneAfter:
		return RouterGone
	}
	return RouterUp
}
