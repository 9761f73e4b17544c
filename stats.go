package dispatch

import "time"

// StatsBucket is one time bucket of delivery attempts: how many ended in
// each outcome and the latency percentiles of all of them (nil when the
// bucket is empty).
type StatsBucket struct {
	Start        time.Time
	Success      int64
	Failure      int64
	Timeout      int64
	NetworkError int64
	Blocked      int64
	P50Millis    *float64
	P99Millis    *float64
}

// Attempts is the number of attempts in the bucket.
func (b StatsBucket) Attempts() int64 {
	return b.Success + b.Failure + b.Timeout + b.NetworkError + b.Blocked
}

// Stats are delivery attempts over a window, per bucket and in total, and
// the jobs that finished in it.
type Stats struct {
	From, To time.Time
	Bucket   time.Duration
	Buckets  []StatsBucket // every bucket from From to To, empty ones included
	Total    StatsBucket   // the whole window (Start = From)
	// JobsFailed is the jobs that ended undelivered in the window (ERROR or
	// EXPIRED). The jobs delivered in it are Total.Success: a job completes
	// with its one successful attempt.
	JobsFailed int64
}

// JobsDelivered is the jobs that were delivered (COMPLETED) in the window.
func (s Stats) JobsDelivered() int64 { return s.Total.Success }

// HealthWindow is how many of a subscription's last finished jobs its
// health counts.
const HealthWindow = 100

// SubscriptionHealth is how a subscription's deliveries have gone lately:
// of its last finished jobs (at most HealthWindow, COMPLETED or ERROR),
// how many completed; when its last job completed, and when its last job
// failed (ended ERROR) and why.
type SubscriptionHealth struct {
	Finished, Completed int
	LastSuccess         *time.Time
	LastFailure         *time.Time
	LastError           string // of the last failure
}
