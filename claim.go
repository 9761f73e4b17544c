package dispatch

import (
	"strconv"
	"time"
)

// ClaimState says what an attempt to claim a job for delivery found.
type ClaimState int

// Claim outcomes.
const (
	// Claimed: the job is IN_PROGRESS under this caller's claim; deliver it.
	Claimed ClaimState = iota
	// ClaimMissing: no such job.
	ClaimMissing
	// ClaimTerminal: the job is finished; the pointer is a duplicate.
	ClaimTerminal
	// ClaimBusy: another processor holds a live claim; try again at Until.
	ClaimBusy
	// ClaimNotDue: the job is scheduled or backing off until Until.
	ClaimNotDue
	// ClaimBlocked: an earlier job of the same group is not finished yet.
	ClaimBlocked
)

// Claim is the result of claiming a job.
type Claim struct {
	State ClaimState
	Job   Job
	Until time.Time // for ClaimBusy, ClaimNotDue, ClaimBlocked
	// Deferred: the claim is not written yet. The job was created and
	// handed to the queue by this process a moment ago, so the store knows
	// its state without asking; the attempt's record writes the claim with
	// the outcome (Transition.ClaimDeferred), unless the caller writes it
	// first (RecordClaim) because the delivery runs long.
	Deferred bool
}

// Transition is the state an attempt leads its job to.
type Transition struct {
	Status        Status // COMPLETED, FAILED or ERROR
	LastError     string
	NextAttemptAt time.Time // for FAILED
	// ClaimDeferred: the attempt's claim was deferred (Claim.Deferred) and
	// may not be written: the job may still be PENDING at the attempt
	// before this one, and takes the claim and the outcome together.
	ClaimDeferred bool
	// Grouped: the job is in a group, whose next job waits for this
	// record; it is written at once, never held to share a transaction.
	Grouped bool
	// Handed: the attempt's pointer was handed over (in process, or offered
	// to a router), not received from a queue. A retry of such a job whose
	// send was never confirmed is on no queue: the record gives it back to
	// the outbox, which sends it when due.
	Handed bool
}

// Unsent is a job whose pointer must go onto the queue.
type Unsent struct {
	ID      int64
	GroupID string
	Seq     int64 // its place in its group (Job.Seq)
	Gen     int   // pointer generation: bumped by each deliberate re-send
	// Mark is the queued_at the job was marked with before its send (at
	// creation when handed to the publisher, or by the outbox pass): once
	// the send succeeded the publisher confirms exactly that mark, and
	// should it fail, clears it, so the outbox sends the job again.
	Mark time.Time
	// TraceContext is the job's (Job.TraceContext): the pointer carries
	// it as SQS message attributes.
	TraceContext string
	// QueueURL and PoolCode are the job's (Job.QueueURL, Job.PoolCode):
	// the queue its pointer goes to ("": the default) and the pool the
	// pointer names ("": DefaultPool).
	QueueURL string
	PoolCode string
}

// DeduplicationID is the pointer's SQS deduplication id: the job id, plus
// the generation once the pointer has been deliberately sent again.
func (u Unsent) DeduplicationID() string {
	if u.Gen == 0 {
		return FormatID(u.ID)
	}
	return FormatID(u.ID) + "-" + strconv.Itoa(u.Gen)
}

// MessageGroupID is the pointer's FIFO group.
func (u Unsent) MessageGroupID() string {
	if u.GroupID != "" {
		return u.GroupID
	}
	return FormatID(u.ID)
}

// JobFilter selects jobs for search and bulk replay. Zero fields match all.
type JobFilter struct {
	Statuses      []Status
	Source        string
	Type          string
	GroupID       string
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	Metadata      map[string]string
	Before        int64 // keyset paging: only jobs with smaller ids (0: none)
}

// CountLimit is how far a search counts its matches: past it the total is
// reported as at least CountLimit, not exactly, so that a count never reads
// millions of rows. Pages past it are read by keyset (Before), not offset.
const CountLimit = 10_000

// ReplayResult is what a bulk replay (dead-letter redrive) did: the new
// jobs, and the originals it could not replay, each with its reason.
type ReplayResult struct {
	Jobs   []Job
	Failed []ReplayFailure
	// More: the redrive stopped at its payload budget with more of the
	// jobs it took left for the next call.
	More bool
}

// ReplayFailure is one job a bulk replay could not replay.
type ReplayFailure struct {
	JobID int64
	Err   error // a *Error
}

// Decision is the processing endpoint's answer for one pointer: Done (the
// router deletes the message) or retry after RetryAfter.
type Decision struct {
	Done       bool
	RetryAfter time.Duration
	JobStatus  Status
	Reason     string
}
