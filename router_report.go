package dispatch

import (
	"encoding/json"
	"time"
)

// RouterReport is what a router process last reported about itself: its
// pools, queues, in-flight messages and warnings, written to the database
// every few seconds and read by the API, so the console shows every
// router whatever host it runs on.
type RouterReport struct {
	ID      string // host:pid:random, new at each start
	Host    string
	Version string
	Pools   json.RawMessage // its pools, as its /monitoring/pools answers
	// Queues are its queues, as its /monitoring/queues answers (depths
	// read at most RouterReportEvery before); InFlight sums up the
	// messages it holds (count, mediating, buffered, the oldest); Warnings
	// are its latest warnings, as /monitoring/warnings answers, the latest
	// first. Each is nil when the router did not report it (a version from
	// before they were reported).
	Queues   json.RawMessage
	InFlight json.RawMessage
	Warnings json.RawMessage
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
