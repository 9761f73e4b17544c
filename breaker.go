package dispatch

import "time"

// Breaker states.
const (
	BreakerClosed   = "CLOSED"    // deliveries go
	BreakerOpen     = "OPEN"      // deliveries wait until OpenUntil
	BreakerHalfOpen = "HALF_OPEN" // one trial delivery decides
)

// BreakerState is a target host's circuit breaker, as the monitoring shows
// it.
type BreakerState struct {
	Host                string
	State               string // BreakerClosed, BreakerOpen or BreakerHalfOpen
	ConsecutiveFailures int
	OpenUntil           *time.Time // when an open breaker lets a trial through
}
