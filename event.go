package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// SubscriptionStatus is a subscription's state: ACTIVE, PENDING_VERIFICATION or DISABLED.
type SubscriptionStatus string

// Subscription states. Events fan out only to ACTIVE subscriptions.
const (
	SubscriptionActive              SubscriptionStatus = "ACTIVE"
	SubscriptionPendingVerification SubscriptionStatus = "PENDING_VERIFICATION"
	SubscriptionDisabled            SubscriptionStatus = "DISABLED"
)

// Valid reports whether s is a known subscription state.
func (s SubscriptionStatus) Valid() bool {
	return s == SubscriptionActive || s == SubscriptionPendingVerification || s == SubscriptionDisabled
}

// Subscription receives one job per published event that matches it.
type Subscription struct {
	ID   int64
	Name string
	URL  string
	// EventTypes are patterns: an exact type ("order.created"), a prefix
	// ("order.*", matching every type that starts with "order.") or "*".
	EventTypes    []string
	Filter        map[string]string // every pair must be in the event's metadata
	CredentialsID int64             // 0: unsigned
	Headers       map[string]string
	MaxRetries    int
	RetryStrategy RetryStrategy
	// OrderingKey is a JSON pointer into the event's data (e.g. /customerId);
	// events with the same value reach this subscription in publish order.
	OrderingKey        string
	RateLimitPerSecond int // 0: unlimited
	Status             SubscriptionStatus
	DisabledReason     string
	// VerifyRequired: created with "verify": true. Such a subscription is
	// ACTIVE only while its URL is VerifiedURL (see NeedsHandshake).
	VerifyRequired bool
	// VerifiedURL is the url that passed the latest handshake ("" when
	// none did, or the latest one failed).
	VerifiedURL string
	// EnabledAt is when it last became ACTIVE (created ACTIVE, enabled, or
	// activated by a handshake); the automatic disable counts failures
	// only from there.
	EnabledAt time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	// QueueURL and PoolCode are given to its jobs (Job.QueueURL,
	// Job.PoolCode): "" for the default queue and pool.
	QueueURL string
	PoolCode string
}

// NeedsHandshake reports whether the subscription must pass the
// verification handshake on its current url before it may be ACTIVE: it
// was created to be verified, and its url is not the one that passed.
func (s *Subscription) NeedsHandshake() bool {
	return s.VerifyRequired && s.VerifiedURL != s.URL
}

// ReasonURLChanged is the reason of a verify-required subscription whose
// url a change replaced: it waits, PENDING_VERIFICATION, for a handshake.
const ReasonURLChanged = "url changed; verify the new url"

// ErrUnverified refuses to make ACTIVE a subscription that NeedsHandshake.
var ErrUnverified = &Error{Code: EConflict, Message: "the subscription's url has not passed the verification handshake: run /verify"}

// ApplySubscriptionRules checks a change of a stored subscription (before)
// into after, and applies the lifecycle rules to after:
//   - whether it requires verification, and which url passed, are not
//     changed here (creation and the handshake set them);
//   - a new url of a subscription that requires verification has not
//     passed the handshake: an ACTIVE or PENDING_VERIFICATION one waits
//     PENDING_VERIFICATION with ReasonURLChanged (a DISABLED one stays
//     DISABLED, and enabling it runs the handshake);
//   - it cannot become or stay ACTIVE while it NeedsHandshake
//     (ErrUnverified).
func ApplySubscriptionRules(before Subscription, after *Subscription) error {
	after.VerifyRequired, after.VerifiedURL = before.VerifyRequired, before.VerifiedURL
	if after.URL != before.URL && after.VerifyRequired && after.Status != SubscriptionDisabled {
		after.Status, after.DisabledReason = SubscriptionPendingVerification, ReasonURLChanged
	}
	if after.Status == SubscriptionActive && after.NeedsHandshake() {
		return ErrUnverified
	}
	return nil
}

// Event is one published fact; dispatch makes a job of it for every ACTIVE
// subscription that matches.
type Event struct {
	ID             int64
	Source         string
	Type           string
	Data           string // JSON text, delivered as the jobs' payload
	Metadata       map[string]string
	IdempotencyKey string
	CreatedAt      time.Time
	Jobs           []EventJob
	// TraceContext is the publish span's W3C trace context, stored with
	// every job the event makes (Job.TraceContext).
	TraceContext string
}

// EventJob is the job an event made for one subscription, with its status.
type EventJob struct {
	ID             int64
	SubscriptionID int64
	Status         Status
}

// EventFilter selects events for search. Zero fields match all.
type EventFilter struct {
	Type          string
	Source        string
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	Before        int64 // keyset paging: only events with smaller ids (0: none)
}

// SubscriptionFilter selects subscriptions for listing.
type SubscriptionFilter struct {
	EventType string // subscriptions an event of this type would reach
	Status    SubscriptionStatus
	Before    int64 // keyset cursor: only subscriptions with smaller ids (older)
}

// MatchKeys are the patterns that match an event type: the type itself,
// each dotted prefix followed by ".*", and "*". "a.b.c" is matched by
// "a.b.c", "a.*", "a.b.*" and "*". The store matches subscriptions by
// intersecting these with their patterns (one indexed array overlap).
func MatchKeys(eventType string) []string {
	keys := []string{eventType, "*"}
	for i := 0; i < len(eventType); i++ {
		if eventType[i] == '.' {
			keys = append(keys, eventType[:i]+".*")
		}
	}
	return keys
}

// Matches reports whether the subscription's patterns match the type.
func (s *Subscription) Matches(eventType string) bool {
	for _, k := range MatchKeys(eventType) {
		for _, p := range s.EventTypes {
			if p == k {
				return true
			}
		}
	}
	return false
}

// EventJobKey is the idempotency key of the job an event makes for a
// subscription: publishing cannot make two jobs for the same pair.
func EventJobKey(eventID, subscriptionID int64) string {
	return FormatID(eventID) + ":" + FormatID(subscriptionID)
}

// maxGroupValue keeps "sub-<id>-<value>" within SQS's 128 characters.
const maxGroupValue = MaxGroupIDLen - len("sub-9223372036854775807-")

// OrderingGroup returns the groupId of the job an event makes for a
// subscription with an ordering key: "sub-<subscriptionId>-<value>", the
// value taken from the event's data at the JSON pointer. A value outside the
// SQS group alphabet, or too long, is replaced by "h" and its SHA-256 (so
// distinct values never share a group by sanitising). It returns "" when
// the pointer does not resolve to a value (then the job has no group).
// Numbers are grouped by value (orderingKeyText): 1, 1.0 and 1e0 are one key.
func OrderingGroup(subscriptionID int64, pointer string, data any) string {
	v, ok := ResolvePointer(data, pointer)
	if !ok || v == nil {
		return ""
	}
	s := orderingKeyText(v)
	if s == "" || len(s) > maxGroupValue || !validGroupID(s) || strings.HasPrefix(s, "h~") {
		sum := sha256.Sum256([]byte(s))
		s = "h~" + hex.EncodeToString(sum[:16])
	}
	return "sub-" + FormatID(subscriptionID) + "-" + s
}

// ResolvePointer follows an RFC 6901 JSON pointer into a value decoded with
// UseNumber. "" is the whole document.
func ResolvePointer(doc any, pointer string) (any, bool) {
	if pointer == "" {
		return doc, true
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || strconv.Itoa(i) != tok {
				return nil, false
			}
			cur = x[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// VerificationType is the "type" of the handshake request's body.
const VerificationType = "dispatch.verification"
