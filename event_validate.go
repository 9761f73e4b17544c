package dispatch

import (
	"strings"
	"unicode/utf8"
)

// Limits on subscriptions and events.
const (
	MaxNameLen        = 128
	MaxEventTypes     = 32
	MaxOrderingKeyLen = 256
	MaxRateLimit      = 10000
	MaxEventMetadata  = MaxMetadataPairs - 2 // the jobs add eventId and subscriptionId
)

// CheckEventPattern reports whether pattern is one a subscription's
// eventTypes may hold (an event type, "prefix.*" or "*"), noting a problem
// with field when not. A pattern no event type could match (".order",
// "order.": CheckEventType refuses a leading or trailing dot) is refused:
// it would leave its subscription ACTIVE and silent.
func CheckEventPattern(p *Problems, field, pattern string) bool {
	if pattern == "*" {
		return true
	}
	exact, prefix := strings.CutSuffix(pattern, ".*")
	if exact == "" || utf8.RuneCountInString(pattern) > MaxTypeLen || strings.ContainsAny(exact, "* \t") || hasControl(exact) ||
		strings.HasPrefix(exact, ".") || (!prefix && strings.HasSuffix(exact, ".")) {
		p.Add(field, "must be an event type (order.created), a prefix (order.*) or *")
		return false
	}
	return true
}

// CheckOrderingKey reports whether key may be a subscription's
// orderingKey (a JSON pointer into the event's data), noting a problem
// with orderingKey when not.
func CheckOrderingKey(p *Problems, key string) bool {
	if !strings.HasPrefix(key, "/") || hasControl(key) {
		p.Add("orderingKey", "must be a JSON pointer into the event's data, such as /customerId")
		return false
	}
	return true
}

// CheckEventType notes a problem with field when t, set, is not a dotted
// event type a subscription's patterns can match.
func CheckEventType(p *Problems, field, t string) {
	// A type is sent as the X-Dispatch-Event-Type header of its jobs: with a
	// control character net/http would refuse every attempt.
	if t != "" && (strings.ContainsAny(t, "* \t") || hasControl(t) || strings.HasSuffix(t, ".") || strings.HasPrefix(t, ".")) {
		p.Add(field, "must be a dotted event type such as order.created (no *, spaces, control characters, or leading/trailing dot)")
	}
}

// CheckFilter notes every problem with a subscription's filter (fields
// filter and filter.<key>): the pairs an event's metadata must hold for the
// subscription to match it, so no more than an event may carry, and none
// of the keys an event may not (eventId, subscriptionId). A filter that
// could match no event would leave its subscription ACTIVE and silent.
func CheckFilter(p *Problems, m map[string]string) {
	if len(m) > MaxEventMetadata {
		p.Add("filter", "holds %d pairs; an event carries at most %d, so it could match none", len(m), MaxEventMetadata)
	}
	checkPairs(p, "filter", m)
	for _, k := range reservedEventKeys {
		if _, ok := m[k]; ok {
			p.Add("filter."+k, "could match no event: dispatch sets %s on the jobs, and an event may not carry it", k)
		}
	}
}

// reservedEventKeys are the metadata keys dispatch sets on an event's jobs.
var reservedEventKeys = []string{"eventId", "subscriptionId"}

// CheckEventMetadata notes every problem with an event's metadata: at most
// MaxEventMetadata pairs (its jobs add two), each as CheckMetadata wants,
// and neither of the keys dispatch sets on the jobs (eventId,
// subscriptionId).
func CheckEventMetadata(p *Problems, m map[string]string) {
	if len(m) > MaxEventMetadata {
		p.Add("metadata", "holds %d pairs; at most %d are allowed on an event", len(m), MaxEventMetadata)
	}
	checkPairs(p, "metadata", m)
	for _, k := range reservedEventKeys {
		if _, ok := m[k]; ok {
			p.Add("metadata."+k, "is reserved: dispatch sets it on the jobs")
		}
	}
}
