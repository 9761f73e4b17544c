// Package dispatch holds the domain of the dispatch webhook delivery service:
// jobs, attempts, credentials, their states, the message pointer that travels
// on the queue, and the error type every adapter speaks. The adapters (api,
// store, router, mediator) import this package and never each other; only
// cmd/dispatch wires them together.
package dispatch

import (
	"errors"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Status is a job's place in its state machine.
type Status string

// Job states. COMPLETED, ERROR, CANCELLED and EXPIRED are terminal.
const (
	StatusPending    Status = "PENDING"
	StatusInProgress Status = "IN_PROGRESS"
	StatusCompleted  Status = "COMPLETED"
	StatusFailed     Status = "FAILED"
	StatusError      Status = "ERROR"
	StatusCancelled  Status = "CANCELLED"
	StatusExpired    Status = "EXPIRED"
)

// Statuses lists every job state.
var Statuses = []Status{StatusPending, StatusInProgress, StatusCompleted, StatusFailed, StatusError, StatusCancelled, StatusExpired}

// Terminal reports whether nothing may change a job in this state again.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusError, StatusCancelled, StatusExpired:
		return true
	}
	return false
}

// Valid reports whether s is a known state.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// AttemptStatus is the outcome of one delivery attempt.
type AttemptStatus string

// Attempt outcomes.
const (
	AttemptSuccess      AttemptStatus = "SUCCESS"
	AttemptFailure      AttemptStatus = "FAILURE"
	AttemptTimeout      AttemptStatus = "TIMEOUT"
	AttemptNetworkError AttemptStatus = "NETWORK_ERROR"
	AttemptBlocked      AttemptStatus = "BLOCKED"
)

// ProtocolHTTPWebhook is the only delivery protocol.
const ProtocolHTTPWebhook = "HTTP_WEBHOOK"

// Job is a dispatch job: one payload to deliver to one target.
type Job struct {
	ID                 int64
	ExternalID         string
	CreatedAt          time.Time
	UpdatedAt          time.Time
	Source             string
	Type               string
	GroupID            string
	TargetURL          string
	Protocol           string
	Headers            map[string]string
	Payload            string
	PayloadContentType string
	CredentialsID      int64 // 0: unsigned
	Status             Status
	MaxRetries         int
	RetryStrategy      RetryStrategy
	ScheduledFor       *time.Time
	ExpiresAt          *time.Time
	AttemptCount       int
	LastAttemptAt      *time.Time
	CompletedAt        *time.Time
	DurationMillis     *int64
	LastError          string
	IdempotencyKey     string
	Metadata           map[string]string
	ReplayOf           int64 // 0: not a replay
	EventID            int64 // the event that made this job (0: created directly)
	SubscriptionID     int64 // the subscription it was made for (0: none)
	QueuedAt           *time.Time
	NextAttemptAt      *time.Time
	ClaimedUntil       *time.Time
	PointerGen         int // bumped by each deliberate re-send of its pointer
	// Seq is the job's place in its group: the order in which creates
	// committed, from a PostgreSQL sequence (not the TSID, whose order is
	// the API replicas' clocks'). 0 for a finished job stored before it
	// existed.
	Seq int64
	// TraceContext is the W3C trace context of the span that created the
	// job ("traceparent", or "traceparent\ntracestate"; empty with tracing
	// off): its pointer carries it on the queue, and every delivery
	// attempt joins that trace.
	TraceContext string
	// QueueURL is the key of the configured queue the job's pointer goes
	// to (RouteQueue.Key); "": the default queue.
	QueueURL string
	// PoolCode is the processing pool its pointer names; "": DefaultPool.
	PoolCode string
}

// MessageGroupID is the FIFO group of the job's pointer: its groupId, or its
// own id so that unrelated jobs never wait for each other.
func (j *Job) MessageGroupID() string {
	if j.GroupID != "" {
		return j.GroupID
	}
	return FormatID(j.ID)
}

// Attempt is one recorded delivery attempt of a job.
type Attempt struct {
	ID             int64
	JobID          int64
	AttemptNumber  int
	AttemptedAt    time.Time
	CompletedAt    time.Time
	DurationMillis int64
	Status         AttemptStatus
	ResponseCode   int // 0: no response
	ResponseBody   string
	ErrorMessage   string
	// RequestHeaders are the request's headers as sent, with the values
	// of Authorization and the signature headers redacted; ResponseHeaders
	// the response's, bounded. Nil when no request was made, or no
	// response came. Several values of one header are joined with ", ".
	RequestHeaders  map[string]string
	ResponseHeaders map[string]string
}

// Credentials sign and authenticate deliveries. Secrets are plain here; the
// store encrypts them at rest.
type Credentials struct {
	ID int64
	// Name is what people know them by ("Billing partner"); "" for none.
	Name            string
	BearerToken     string
	SigningSecret   string
	Algorithm       string
	SignatureScheme string
	// AllowedTargets are the origins, each optionally with a path prefix,
	// that these credentials may be sent to (credentials.go); none: nowhere.
	AllowedTargets []string
	// Previous are the secrets rotations replaced, newest first, each valid
	// until its own ExpiresAt (its rotation's grace period).
	Previous  []PreviousSecret
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CredentialsInfo is what may be shown of credentials: all but their
// secrets. The store reads it without opening them, so a list or a change
// of name or targets needs no encryption key, and credentials sealed under
// a key this process lacks break nothing else.
type CredentialsInfo struct {
	ID              int64
	Name            string
	Algorithm       string
	SignatureScheme string
	HasBearerToken  bool
	AllowedTargets  []string
	// PreviousExpires are the ends of the grace periods of the secrets
	// rotations replaced, newest first (Credentials.Previous).
	PreviousExpires []time.Time
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Info returns what may be shown of c.
func (c Credentials) Info() CredentialsInfo {
	i := CredentialsInfo{ID: c.ID, Name: c.Name, Algorithm: c.Algorithm, SignatureScheme: c.SignatureScheme,
		HasBearerToken: c.BearerToken != "", AllowedTargets: c.AllowedTargets, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
	for _, p := range c.Previous {
		i.PreviousExpires = append(i.PreviousExpires, p.ExpiresAt)
	}
	return i
}

// PreviousSecret is a secret a rotation replaced, valid until ExpiresAt.
type PreviousSecret struct {
	Secret    string
	ExpiresAt time.Time
}

// ActivePrevious returns the previous secrets still in their grace period,
// newest first; deliveries are signed with each of them too.
func (c Credentials) ActivePrevious(now time.Time) []string {
	var out []string
	for _, p := range c.Previous {
		if p.Secret != "" && now.Before(p.ExpiresAt) {
			out = append(out, p.Secret)
		}
	}
	return out
}

// GraceEnds returns when the last previous secret stops being valid, or
// nil when none is valid at now.
func (c Credentials) GraceEnds(now time.Time) *time.Time {
	var end *time.Time
	for _, p := range c.Previous {
		if p.Secret != "" && now.Before(p.ExpiresAt) && (end == nil || p.ExpiresAt.After(*end)) {
			t := p.ExpiresAt
			end = &t
		}
	}
	return end
}

// AlgorithmHMACSHA256 is the only signing algorithm.
const AlgorithmHMACSHA256 = "HMAC_SHA256"

// DefaultPool is the processing pool jobs are routed to.
const DefaultPool = "DISPATCH-POOL"

// Pointer is the small message that travels on the queue in place of a job.
type Pointer struct {
	ID              string `json:"id"`
	PoolCode        string `json:"poolCode"`
	AuthToken       string `json:"authToken,omitempty"`
	MediationType   string `json:"mediationType"`
	MediationTarget string `json:"mediationTarget"`
	MessageGroupID  string `json:"messageGroupId"`
	// Sequence is the job's place in its group (Job.Seq): the router orders
	// a group's buffered messages by it. Absent in pointers sent before it
	// existed, whose jobs keep their id as their place.
	Sequence int64 `json:"sequence,omitempty"`
	// SentMark is the job's queued mark when the pointer was sent, in
	// microseconds since the Unix epoch: with the message's first receive,
	// the proof that no one has claimed the job through it yet (see
	// store.ClaimJob). Absent in pointers from elsewhere.
	SentMark int64 `json:"sentMark,omitempty"`
}

// pointerOptions read a pointer as encoding/json reads it (member names in
// any case, the last of a name given twice, invalid UTF-8 replaced), so a
// message from any producer reads as it always has, at less of the cost.
var pointerOptions = jsonv1.DefaultOptionsV1()

// ParsePointer reads a pointer from the JSON the queue and the processing
// endpoint carry. A pointer without an id is an error.
func ParsePointer(b []byte) (Pointer, error) {
	var p Pointer
	if err := json.Unmarshal(b, &p, pointerOptions); err != nil {
		return Pointer{}, err
	}
	if p.ID == "" {
		return Pointer{}, errors.New("a pointer needs an id")
	}
	return p, nil
}

// FormatID renders an id the way the API shows it.
func FormatID(id int64) string { return strconv.FormatInt(id, 10) }

// ParseID parses an id as the API shows it.
func ParseID(s string) (int64, bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	// Canonical form only ("01" and "+1" are not ids).
	return id, err == nil && id > 0 && strconv.FormatInt(id, 10) == s
}
