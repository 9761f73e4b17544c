package dispatch

import "time"

// Backlog is how far delivery is behind, read for the metrics at each
// scrape: the live jobs by state, the due jobs whose pointer is not on the
// queue, and how long the longest-waiting due job has waited.
type Backlog struct {
	Pending    int64 // PENDING: never attempted (scheduled ones included)
	InProgress int64 // IN_PROGRESS: being delivered
	Failed     int64 // FAILED: waiting for a retry
	// Unsent is the due live jobs whose pointer is not on the queue and
	// that the publisher will send: the outbox it has still to send (a
	// pointer that stepped aside for its group waits there on purpose,
	// until the group's earlier job finishes, and is not counted).
	Unsent int64
	// OldestDue is when the longest-waiting job became due: the earliest
	// due time of the PENDING and FAILED jobs due by now that could be
	// delivered now, none of their group's earlier jobs live (nil: none
	// waits).
	OldestDue *time.Time
}
