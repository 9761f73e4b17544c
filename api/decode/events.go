package decode

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/dispatchhq/dispatch"
)

// subscriptionFields are the fields a subscription's create and patch
// bodies may hold (a create may also hold verify).
const subscriptionFields = "name url eventTypes filter credentialsId headers maxRetries retryStrategy orderingKey rateLimitPerSecond queueUrl poolCode"

// publishEventFields are the fields a publish-event body may hold.
var publishEventFields = map[string]bool{"source": true, "type": true, "data": true, "metadata": true, "idempotencyKey": true}

// Subscription decodes and validates a create-subscription body. It
// reports every problem at once. verify is the body's "verify" flag: the
// subscription starts PENDING_VERIFICATION, requires verification, and
// must pass the handshake on its url before it is ACTIVE.
func Subscription(body []byte, rules dispatch.JobRules) (*dispatch.Subscription, bool, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, false, p.Err()
	}
	d := fieldDecoder{fields: fields, p: &p}
	sub := &dispatch.Subscription{MaxRetries: dispatch.DefaultMaxRetries, RetryStrategy: dispatch.RetryExponential, Status: dispatch.SubscriptionActive}
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
		sub.Status, sub.VerifyRequired = dispatch.SubscriptionPendingVerification, true
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
// poolCode). sub is left unchanged when the body has problems.
func PatchSubscription(body []byte, rules dispatch.JobRules, sub *dispatch.Subscription) error {
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
func applySubscriptionFields(d fieldDecoder, sub *dispatch.Subscription, rules dispatch.JobRules, extra ...string) {
	known := map[string]bool{}
	for _, k := range strings.Fields(subscriptionFields) {
		known[k] = true
	}
	for _, k := range extra {
		known[k] = true
	}
	addUnknown(d.p, d.fields, known)
	if d.present("name") {
		sub.Name = d.str("name", dispatch.MaxNameLen, true)
	}
	if d.present("url") {
		sub.URL = d.str("url", dispatch.MaxURLLen, true)
		if sub.URL != "" {
			rules.CheckTarget(d.p, "url", sub.URL)
		}
	}
	if d.present("eventTypes") {
		sub.EventTypes = eventPatterns(d)
	}
	if d.present("filter") {
		sub.Filter = d.stringMap("filter")
		dispatch.CheckFilter(d.p, sub.Filter)
	}
	if d.present("headers") {
		sub.Headers = d.stringMap("headers")
		dispatch.CheckHeaders(d.p, sub.Headers)
	}
	if d.present("credentialsId") {
		if id, ok := credentialsID(d.fields); ok {
			sub.CredentialsID = id
		} else {
			d.p.Add("credentialsId", "must be a credentials id")
		}
	}
	if d.present("maxRetries") {
		var n int64
		if err := json.Unmarshal(d.fields["maxRetries"], &n); err != nil || n < dispatch.MinRetries || n > dispatch.MaxRetriesLimit {
			d.p.Add("maxRetries", "must be a whole number from %d to %d (the total number of attempts)", dispatch.MinRetries, dispatch.MaxRetriesLimit)
		} else {
			sub.MaxRetries = int(n)
		}
	}
	if d.present("retryStrategy") {
		s := dispatch.RetryStrategy(d.str("retryStrategy", 32, false))
		if !s.Valid() {
			d.p.Add("retryStrategy", "must be one of exponential, linear, fixed")
		} else {
			sub.RetryStrategy = s
		}
	}
	if d.present("orderingKey") {
		if k := d.str("orderingKey", dispatch.MaxOrderingKeyLen, false); dispatch.CheckOrderingKey(d.p, k) {
			sub.OrderingKey = k
		}
	}
	if d.present("rateLimitPerSecond") {
		var n int64
		if err := json.Unmarshal(d.fields["rateLimitPerSecond"], &n); err != nil || n < 1 || n > dispatch.MaxRateLimit {
			d.p.Add("rateLimitPerSecond", "must be a whole number from 1 to %d", dispatch.MaxRateLimit)
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
	if len(raw) == 0 || len(raw) > dispatch.MaxEventTypes {
		d.p.Add("eventTypes", "must hold 1 to %d patterns", dispatch.MaxEventTypes)
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
		if !dispatch.CheckEventPattern(d.p, field, s) {
			continue
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Event decodes and validates a publish-event body. data may be any
// JSON value; it is kept as the exact text given (the jobs' payload) and is
// returned decoded too, for the subscriptions' ordering keys.
func Event(body []byte) (*dispatch.Event, any, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, nil, p.Err()
	}
	d := fieldDecoder{fields: fields, p: &p}
	addUnknown(&p, fields, publishEventFields)
	e := &dispatch.Event{}
	e.Source = d.str("source", dispatch.MaxSourceLen, true)
	e.Type = d.str("type", dispatch.MaxTypeLen, true)
	dispatch.CheckEventType(&p, "type", e.Type)
	e.IdempotencyKey = d.str("idempotencyKey", dispatch.MaxIdempotencyLen, false)
	e.Metadata = d.stringMap("metadata")
	dispatch.CheckEventMetadata(&p, e.Metadata)
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
