package decode

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/dispatchhq/dispatch"
)

// createJobFields are the fields a create-job body (or a batch item) may
// hold.
var createJobFields = map[string]bool{
	"externalId": true, "source": true, "type": true, "groupId": true, "metadata": true,
	"targetUrl": true, "protocol": true, "headers": true, "payload": true,
	"payloadContentType": true, "credentialsId": true, "maxRetries": true,
	"retryStrategy": true, "scheduledFor": true, "expiresAt": true, "idempotencyKey": true,
	"queueUrl": true, "poolCode": true,
}

// CreateJob decodes and validates a create-job request body. It reports
// every problem at once as a dispatch.EInvalid *dispatch.Error; on success it returns a job in
// PENDING state without an id. Unknown fields, duplicate keys, wrong types
// and invalid UTF-8 are all problems.
func CreateJob(body []byte, rules dispatch.JobRules, now time.Time) (*dispatch.Job, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, p.Err()
	}
	return jobFromFields(fields, p, rules, now)
}

// IdempotencyKey is the idempotencyKey of a create's body, or "" when the
// body is not an object or holds no key as a string: what a create refused
// looks up, since a retry of a create that was stored may no longer pass
// (its expiresAt has passed, its credentials were deleted).
func IdempotencyKey(body []byte) string {
	fields, _ := decodeObject(body)
	if fields == nil {
		return ""
	}
	k, ok := unquote(fields["idempotencyKey"])
	if !ok {
		return ""
	}
	return k
}

// CredentialsID is the credentialsId of a create's body (a job's, a
// subscription's, an alert destination's, or a subscription's patch), or 0
// when the body is not an object or holds no credentials id: what a body
// refused for its other fields looks up, so that its answer names
// credentials that do not exist as well (the store checks them only of a
// body that passes).
func CredentialsID(body []byte) int64 {
	fields, _ := decodeObject(body)
	id, _ := credentialsID(fields)
	return id
}

// ItemCredentialsIDs is CredentialsID of each item of a batch body
// {"jobs":[...]}, in order, or nil when the body is not one.
func ItemCredentialsIDs(body []byte) []int64 {
	fields, _ := decodeObject(body)
	if fields["jobs"] == nil {
		return nil
	}
	items, ok := splitArray(fields["jobs"])
	if !ok {
		return nil
	}
	ids := make([]int64, len(items))
	f := make(map[string]json.RawMessage, objectHint) // each item's fields in turn
	for i, item := range items {
		if _, ok := decodeInto(f, item); ok {
			ids[i], _ = credentialsID(f)
		}
	}
	return ids
}

// credentialsID reads fields' credentialsId, a string or a number (parsed
// as written); ok is false when it is absent or not a positive id.
func credentialsID(fields map[string]json.RawMessage) (id int64, ok bool) {
	raw := fields["credentialsId"]
	if raw == nil {
		return 0, false
	}
	n, ok := unquote(raw)
	if !ok {
		n = string(raw)
	}
	id, err := strconv.ParseInt(n, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

// CreateJobs decodes a batch body {"jobs":[...]} into per-item results:
// jobs[i] is set when items[i] is valid, errs[i] otherwise.
func CreateJobs(body []byte, rules dispatch.JobRules, now time.Time, maxItems int) ([]*dispatch.Job, []error, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, nil, p.Err()
	}
	var raw []json.RawMessage
	for k, v := range fields {
		if k != "jobs" {
			p.Add(k, "unknown field")
			continue
		}
		var ok bool
		if raw, ok = splitArray(v); !ok {
			p.Add("jobs", "must be an array of job objects")
		}
	}
	switch {
	case fields["jobs"] == nil:
		p.Add("jobs", "is required")
	case len(raw) == 0 && len(p) == 0:
		p.Add("jobs", "must hold at least one job")
	case len(raw) > maxItems:
		p.Add("jobs", "holds %d jobs; at most %d are allowed", len(raw), maxItems)
	}
	if err := p.Err(); err != nil {
		return nil, nil, err
	}
	jobs := make([]*dispatch.Job, len(raw))
	errs := make([]error, len(raw))
	f := make(map[string]json.RawMessage, objectHint) // each item's fields in turn
	for i, item := range raw {
		ip, ok := decodeInto(f, item)
		if !ok {
			errs[i] = ip.Err()
			continue
		}
		jobs[i], errs[i] = jobFromFields(f, ip, rules, now)
	}
	return jobs, errs, nil
}

func jobFromFields(fields map[string]json.RawMessage, p dispatch.Problems, rules dispatch.JobRules, now time.Time) (*dispatch.Job, error) {
	d := fieldDecoder{fields: fields, p: &p}
	addUnknown(&p, fields, createJobFields)
	j := &dispatch.Job{
		Status:             dispatch.StatusPending,
		Protocol:           dispatch.ProtocolHTTPWebhook,
		PayloadContentType: "application/json",
		MaxRetries:         dispatch.DefaultMaxRetries,
		RetryStrategy:      dispatch.RetryExponential,
	}
	j.ExternalID = d.str("externalId", dispatch.MaxExternalIDLen, false)
	j.Source = d.str("source", dispatch.MaxSourceLen, true)
	j.Type = d.str("type", dispatch.MaxTypeLen, true)
	j.GroupID = d.str("groupId", dispatch.MaxGroupIDLen, false)
	dispatch.CheckGroupID(&p, j.GroupID)
	j.IdempotencyKey = d.str("idempotencyKey", dispatch.MaxIdempotencyLen, false)
	j.TargetURL = d.str("targetUrl", dispatch.MaxURLLen, true)
	if j.TargetURL != "" {
		rules.CheckTarget(&p, "targetUrl", j.TargetURL)
	}
	if d.present("protocol") {
		if proto := d.str("protocol", 32, false); proto != dispatch.ProtocolHTTPWebhook {
			p.Add("protocol", "must be %s", dispatch.ProtocolHTTPWebhook)
		}
	}
	if d.present("payload") {
		var ok bool
		if j.Payload, ok = unquote(fields["payload"]); !ok {
			p.Add("payload", "must be a string (serialize JSON payloads into a string)")
		} else if strings.ContainsRune(j.Payload, 0) {
			p.Add("payload", "must not contain NUL characters")
		}
	} else {
		p.Add("payload", "is required")
	}
	if d.present("payloadContentType") {
		if ct := d.str("payloadContentType", dispatch.MaxContentTypeLen, false); dispatch.CheckContentType(&p, ct) {
			j.PayloadContentType = ct
		}
	}
	j.Headers = d.stringMap("headers")
	dispatch.CheckHeaders(&p, j.Headers)
	j.Metadata = d.stringMap("metadata")
	dispatch.CheckMetadata(&p, j.Metadata)
	if d.present("credentialsId") {
		if id, ok := credentialsID(fields); ok {
			j.CredentialsID = id
		} else {
			p.Add("credentialsId", "must be a credentials id")
		}
	}
	if d.present("maxRetries") {
		var n int64
		if err := json.Unmarshal(fields["maxRetries"], &n); err != nil {
			p.Add("maxRetries", "must be a whole number from %d to %d", dispatch.MinRetries, dispatch.MaxRetriesLimit)
		} else if n < dispatch.MinRetries || n > dispatch.MaxRetriesLimit {
			p.Add("maxRetries", "must be from %d to %d (the total number of attempts)", dispatch.MinRetries, dispatch.MaxRetriesLimit)
		} else {
			j.MaxRetries = int(n)
		}
	}
	if d.present("retryStrategy") {
		s := dispatch.RetryStrategy(d.str("retryStrategy", 32, false))
		if !s.Valid() {
			p.Add("retryStrategy", "must be one of exponential, linear, fixed")
		} else {
			j.RetryStrategy = s
		}
	}
	routeFields(d, rules, &j.QueueURL, &j.PoolCode)
	j.ScheduledFor = d.time("scheduledFor")
	j.ExpiresAt = d.time("expiresAt")
	dispatch.CheckSchedule(&p, j.ScheduledFor, j.ExpiresAt, now)
	if err := p.Err(); err != nil {
		return nil, err
	}
	return j, nil
}

// routeFields validates a job's or subscription's queueUrl and poolCode
// into queue (the queue's key) and pool, noting problems.
func routeFields(d fieldDecoder, rules dispatch.JobRules, queue, pool *string) {
	if d.present("queueUrl") {
		before := len(*d.p)
		named := d.str("queueUrl", dispatch.MaxURLLen, false)
		if len(*d.p) == before { // else not a string, or too long: said
			if key, ok := rules.CheckQueue(d.p, named); ok {
				*queue = key
			}
		}
	}
	if d.present("poolCode") {
		before := len(*d.p)
		code := d.str("poolCode", dispatch.MaxPoolCodeLen, false)
		if len(*d.p) == before && rules.CheckPool(d.p, code) {
			*pool = code
		}
	}
}
