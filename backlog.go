package dispatch

import "time"

// Backlog is how far delivery is behind, read for the metrics at each
// scrape: the live jobs by state, the due jobs whose pointer is not on the
// queue, and how long the longest-waiting due job has waited.
type Backlog struct {
	Pending    int64 // PENDING: never attempted (scheduled ones included)
	InProgress int64 // IN_PROGRESS: being delivered
	Failed     int64 // FAILED: waiting for a retry
	// Unsent is the due live jobs whose pointer is not on the queue: the
	// outbox the publisher has still to send.
	Unsent int64
	// OldestDue is when the longest-waiting job became due: the earliest
	// due time of the PENDING and FAILED jobs due by now (nil: none waits).
	OldestDue *time.Time
}
