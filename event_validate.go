package dispatch

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on subscriptions and events.
const (
	MaxNameLen          = 128
	MaxEventTypes       = 32
	MaxOrderingKeyLen   = 256
	MaxRateLimit        = 10000
	MaxEventMetadata    = MaxMetadataPairs - 2 // the jobs add eventId and subscriptionId
	subscriptionFieldOK = "name url eventTypes filter credentialsId headers maxRetries retryStrategy orderingKey rateLimitPerSecond queueUrl poolCode"
)

var publishEventFields = map[string]bool{"source": true, "type": true, "data": true, "metadata": true, "idempotencyKey": true}

// ParseSubscription decodes and validates a create-subscription body. It
// reports every problem at once. verify is the body's "verify" flag: the
// subscription starts PENDING_VERIFICATION, requires verification, and
// must pass the handshake on its url before it is ACTIVE.
func ParseSubscription(body []byte, rules JobRules) (*Subscription, bool, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, false, p.Err()
	}
	d := fieldDecoder{fields: fields, p: &p}
	sub := &Subscription{MaxRetries: DefaultMaxRetries, RetryStrategy: RetryExponential, Status: SubscriptionActive}
	for _, k := range []string{"name", "url", "eventTypes"} {
		if !d.present(k) {
			p.Add(k, "is required")
		}
	}
	verify := false
	if d.present("verify") {
		if err := json.Unmarshal(fields["verify"], &verify); err != nil {
			p.Add("verify", "must be true or false")
		}
	}
	if verify {
		sub.Status, sub.VerifyRequired = SubscriptionPendingVerification, true
	}
	applySubscriptionFields(d, sub, rules, "verify")
	if err := p.Err(); err != nil {
		return nil, false, err
	}
	return sub, verify, nil
}

// PatchSubscription applies a partial-update body to sub: fields present
// replace the current values; null clears an optional field (filter,
// credentialsId, headers, orderingKey, rateLimitPerSecond, queueUrl,
// poolCode). sub is left
// unchanged when the body has problems.
func PatchSubscription(body []byte, rules JobRules, sub *Subscription) error {
	fields, p := decodeObject(body)
	if fields == nil {
		return p.Err()
	}
	d := fieldDecoder{fields: fields, p: &p}
	next := *sub
	for name, raw := range fields {
		if string(raw) != "null" {
			continue
		}
		switch name {
		case "filter":
			next.Filter = nil
		case "credentialsId":
			next.CredentialsID = 0
		case "headers":
			next.Headers = nil
		case "orderingKey":
			next.OrderingKey = ""
		case "rateLimitPerSecond":
			next.RateLimitPerSecond = 0
		case "queueUrl":
			next.QueueURL = ""
		case "poolCode":
			next.PoolCode = ""
		case "name", "url", "eventTypes", "maxRetries", "retryStrategy":
			p.Add(name, "cannot be cleared")
		}
	}
	applySubscriptionFields(d, &next, rules)
	if err := p.Err(); err != nil {
		return err
	}
	*sub = next
	return nil
}

// applySubscriptionFields validates the present fields into sub and notes
// unknown ones (extra names fields the caller handles itself).
func applySubscriptionFields(d fieldDecoder, sub *Subscription, rules JobRules, extra ...string) {
	known := map[string]bool{}
	for _, k := range strings.Fields(subscriptionFieldOK) {
		known[k] = true
	}
	for _, k := range extra {
		known[k] = true
	}
	for _, k := range sortedKeys(d.fields) {
		if !known[k] {
			d.p.Add(k, "unknown field")
		}
	}
	if d.present("name") {
		sub.Name = d.str("name", MaxNameLen, true)
	}
	if d.present("url") {
		sub.URL = d.str("url", MaxURLLen, true)
		if sub.URL != "" {
			rules.CheckTarget(d.p, "url", sub.URL)
		}
	}
	if d.present("eventTypes") {
		sub.EventTypes = eventPatterns(d)
	}
	if d.present("filter") {
		sub.Filter = d.stringMap("filter")
		CheckMetadata(d.p, sub.Filter)
	}
	if d.present("headers") {
		sub.Headers = d.stringMap("headers")
		CheckHeaders(d.p, sub.Headers)
	}
	if d.present("credentialsId") {
		if id, ok := d.id("credentialsId"); ok {
			sub.CredentialsID = id
		} else {
			d.p.Add("credentialsId", "must be a credentials id")
		}
	}
	if d.present("maxRetries") {
		var n int64
		if err := json.Unmarshal(d.fields["maxRetries"], &n); err != nil || n < MinRetries || n > MaxRetriesLimit {
			d.p.Add("maxRetries", "must be a whole number from %d to %d (the total number of attempts)", MinRetries, MaxRetriesLimit)
		} else {
			sub.MaxRetries = int(n)
		}
	}
	if d.present("retryStrategy") {
		s := RetryStrategy(d.str("retryStrategy", 32, false))
		if !s.Valid() {
			d.p.Add("retryStrategy", "must be one of exponential, linear, fixed")
		} else {
			sub.RetryStrategy = s
		}
	}
	if d.present("orderingKey") {
		if k := d.str("orderingKey", MaxOrderingKeyLen, false); CheckOrderingKey(d.p, k) {
			sub.OrderingKey = k
		}
	}
	if d.present("rateLimitPerSecond") {
		var n int64
		if err := json.Unmarshal(d.fields["rateLimitPerSecond"], &n); err != nil || n < 1 || n > MaxRateLimit {
			d.p.Add("rateLimitPerSecond", "must be a whole number from 1 to %d", MaxRateLimit)
		} else {
			sub.RateLimitPerSecond = int(n)
		}
	}
	routeFields(d, rules, &sub.QueueURL, &sub.PoolCode)
}

// eventPatterns reads eventTypes: exact types, "prefix.*" or "*".
func eventPatterns(d fieldDecoder) []string {
	var raw []json.RawMessage
	if err := json.Unmarshal(d.fields["eventTypes"], &raw); err != nil {
		d.p.Add("eventTypes", "must be an array of event type patterns")
		return nil
	}
	if len(raw) == 0 || len(raw) > MaxEventTypes {
		d.p.Add("eventTypes", "must hold 1 to %d patterns", MaxEventTypes)
		return nil
	}
	out := make([]string, 0, len(raw))
	seen := map[string]bool{}
	for i, r := range raw {
		field := "eventTypes[" + strconv.Itoa(i) + "]"
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			d.p.Add(field, "must be a string")
			continue
		}
		if !CheckEventPattern(d.p, field, s) {
			continue
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// CheckEventPattern reports whether pattern is one a subscription's
// eventTypes may hold (an event type, "prefix.*" or "*"), noting a problem
// with field when not.
func CheckEventPattern(p *Problems, field, pattern string) bool {
	if pattern == "*" {
		return true
	}
	exact := strings.TrimSuffix(pattern, ".*")
	if exact == "" || utf8.RuneCountInString(pattern) > MaxTypeLen || strings.ContainsAny(exact, "* \t\r\n\x00") {
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

// CheckEventType notes a problem with type when t, set, is not a dotted
// event type a subscription's patterns can match.
func CheckEventType(p *Problems, t string) {
	if t != "" && (strings.ContainsAny(t, "* \t\r\n") || strings.HasSuffix(t, ".") || strings.HasPrefix(t, ".")) {
		p.Add("type", "must be a dotted event type such as order.created (no *, spaces, or leading/trailing dot)")
	}
}

// CheckEventMetadata notes every problem with an event's metadata: at most
// MaxEventMetadata pairs (its jobs add two), each as CheckMetadata wants,
// and neither of the keys dispatch sets on the jobs (eventId,
// subscriptionId).
func CheckEventMetadata(p *Problems, m map[string]string) {
	if len(m) > MaxEventMetadata {
		p.Add("metadata", "holds %d pairs; at most %d are allowed on an event", len(m), MaxEventMetadata)
	} else {
		CheckMetadata(p, m)
	}
	for _, k := range []string{"eventId", "subscriptionId"} {
		if _, ok := m[k]; ok {
			p.Add("metadata."+k, "is reserved: dispatch sets it on the jobs")
		}
	}
}

// id reads a positive id given as a number or a string.
func (d fieldDecoder) id(name string) (int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(d.fields[name]))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, false
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	default:
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

// ParseEvent decodes and validates a publish-event body. data may be any
// JSON value; it is kept as the exact text given (the jobs' payload) and is
// returned decoded too, for the subscriptions' ordering keys.
func ParseEvent(body []byte) (*Event, any, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, nil, p.Err()
	}
	d := fieldDecoder{fields: fields, p: &p}
	for _, k := range sortedKeys(fields) {
		if !publishEventFields[k] {
			p.Add(k, "unknown field")
		}
	}
	e := &Event{}
	e.Source = d.str("source", MaxSourceLen, true)
	e.Type = d.str("type", MaxTypeLen, true)
	CheckEventType(&p, e.Type)
	e.IdempotencyKey = d.str("idempotencyKey", MaxIdempotencyLen, false)
	e.Metadata = d.stringMap("metadata")
	CheckEventMetadata(&p, e.Metadata)
	var data any
	if !d.present("data") {
		p.Add("data", "is required (any JSON value)")
	} else {
		e.Data = string(bytes.TrimSpace(fields["data"]))
		dec := json.NewDecoder(strings.NewReader(e.Data))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			p.Add("data", "is not valid JSON")
		}
	}
	if err := p.Err(); err != nil {
		return nil, nil, err
	}
	return e, data, nil
}
