package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Limits on a job's fields.
const (
	MaxSourceLen      = 128
	MaxTypeLen        = 128
	MaxGroupIDLen     = 128
	MaxExternalIDLen  = 32
	MaxIdempotencyLen = 128
	MaxURLLen         = 2048
	MaxHeaders        = 32
	MaxHeaderNameLen  = 128
	MaxHeaderValueLen = 4096
	MaxMetadataPairs  = 32
	MaxMetadataKeyLen = 64
	MaxMetadataValLen = 256
	MaxContentTypeLen = 128
	MinRetries        = 1
	MaxRetriesLimit   = 50
	DefaultMaxRetries = 5
	MaxScheduleAhead  = 365 * 24 * time.Hour
)

// JobRules are the deployment's choices that validation depends on.
type JobRules struct {
	// AllowHTTP accepts plain http:// targets (local use and tests).
	AllowHTTP bool
	// Routing holds the queues and pools a job may name (queueUrl,
	// poolCode); nil: none but DefaultPool.
	Routing *Routing
}

// reservedHeaders may not be set by a job: dispatch sets them, or they are
// hop-by-hop and meaningless to forward.
var reservedHeaders = map[string]string{
	"authorization":       "set from the job's credentials",
	"content-type":        "use payloadContentType",
	"content-length":      "set by dispatch",
	"host":                "taken from targetUrl",
	"connection":          "hop-by-hop",
	"keep-alive":          "hop-by-hop",
	"proxy-connection":    "hop-by-hop",
	"proxy-authorization": "hop-by-hop",
	"proxy-authenticate":  "hop-by-hop",
	"te":                  "hop-by-hop",
	"trailer":             "hop-by-hop",
	"transfer-encoding":   "hop-by-hop",
	"upgrade":             "hop-by-hop",
	"expect":              "not supported",
}

// reservedPrefixes are header name prefixes owned by dispatch's signatures.
var reservedPrefixes = []string{"x-flowcatalyst-", "webhook-", "x-dispatch-"}

var createJobFields = map[string]bool{
	"externalId": true, "source": true, "type": true, "groupId": true, "metadata": true,
	"targetUrl": true, "protocol": true, "headers": true, "payload": true,
	"payloadContentType": true, "credentialsId": true, "maxRetries": true,
	"retryStrategy": true, "scheduledFor": true, "expiresAt": true, "idempotencyKey": true,
	"queueUrl": true, "poolCode": true,
}

// ParseCreateJob decodes and validates a create-job request body. It reports
// every problem at once as an EInvalid *Error; on success it returns a job in
// PENDING state without an id. Unknown fields, duplicate keys, wrong types
// and invalid UTF-8 are all problems.
func ParseCreateJob(body []byte, rules JobRules, now time.Time) (*Job, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, p.Err()
	}
	return jobFromFields(fields, p, rules, now)
}

// ParseCreateJobs decodes a batch body {"jobs":[...]} into per-item results:
// jobs[i] is set when items[i] is valid, errs[i] otherwise.
func ParseCreateJobs(body []byte, rules JobRules, now time.Time, maxItems int) ([]*Job, []error, error) {
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
		if err := json.Unmarshal(v, &raw); err != nil {
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
	jobs := make([]*Job, len(raw))
	errs := make([]error, len(raw))
	for i, item := range raw {
		f, ip := decodeObject(item)
		if f == nil {
			errs[i] = ip.Err()
			continue
		}
		jobs[i], errs[i] = jobFromFields(f, ip, rules, now)
	}
	return jobs, errs, nil
}

// decodeObject splits a JSON object into its fields, refusing invalid UTF-8,
// duplicate keys and trailing data. A nil map means the body is unusable.
// The field values are slices of body.
//
// It reads with jsontext, the token reader of the JSON v2 work: its values
// come without encoding/json's Decoder allocating a syntax error per value
// to find the value's end, which made this a third of a create's parsing.
func decodeObject(body []byte) (map[string]json.RawMessage, Problems) {
	var p Problems
	if !utf8.Valid(body) {
		p.Add("body", "is not valid UTF-8")
		return nil, p
	}
	// Duplicate names are let through here to be named as problems below,
	// and escaped lone surrogates to be read as U+FFFD (unquote), as
	// encoding/json reads them; raw invalid UTF-8 was refused above.
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	tok, err := dec.ReadToken()
	if err != nil || tok.Kind() != '{' {
		p.Add("body", "must be a JSON object")
		return nil, p
	}
	fields := map[string]json.RawMessage{}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken() // a name, or the error that the object ends badly
		if err != nil {
			p.Add("body", "is not valid JSON: %s", jsonErrText(err))
			return nil, p
		}
		key := tok.String()
		v, err := dec.ReadValue()
		if err != nil {
			p.Add("body", "is not valid JSON: %s", jsonErrText(err))
			return nil, p
		}
		if _, dup := fields[key]; dup {
			p.Add(key, "appears more than once")
			continue
		}
		end := dec.InputOffset()
		fields[key] = json.RawMessage(body[end-int64(len(v)) : end : end])
	}
	if _, err := dec.ReadToken(); err != nil {
		p.Add("body", "is not valid JSON: %s", jsonErrText(err))
		return nil, p
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		p.Add("body", "has data after the JSON object")
		return nil, p
	}
	return fields, p
}

func jsonErrText(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of input"
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return strings.TrimPrefix(se.Error(), "jsontext: ")
	}
	return "malformed"
}

// unquote decodes a JSON string value; ok is false when raw is not one.
// raw is a value decodeObject checked, so a quoted run without escapes is
// the string itself.
func unquote(raw []byte) (s string, ok bool) {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	if b, err := jsontext.AppendUnquote(nil, raw); err == nil {
		return string(b), true
	}
	// What jsontext refuses but encoding/json takes (an escaped lone
	// surrogate, read as U+FFFD) is taken as before.
	return s, json.Unmarshal(raw, &s) == nil
}

// fieldDecoder decodes typed fields out of a raw object, noting problems.
type fieldDecoder struct {
	fields map[string]json.RawMessage
	p      *Problems
}

func (d fieldDecoder) present(name string) bool {
	v, ok := d.fields[name]
	return ok && string(v) != "null"
}

func (d fieldDecoder) str(name string, maxLen int, required bool) string {
	if !d.present(name) {
		if required {
			d.p.Add(name, "is required")
		}
		return ""
	}
	s, ok := unquote(d.fields[name])
	if !ok {
		d.p.Add(name, "must be a string")
		return ""
	}
	switch {
	case required && strings.TrimSpace(s) == "":
		d.p.Add(name, "must not be empty")
	case utf8.RuneCountInString(s) > maxLen:
		d.p.Add(name, "must be at most %d characters", maxLen)
	case strings.ContainsAny(s, "\x00"):
		d.p.Add(name, "must not contain NUL characters")
	}
	return s
}

func (d fieldDecoder) stringMap(name string) map[string]string {
	if !d.present(name) {
		return nil
	}
	inner, ip := decodeObject(d.fields[name])
	if inner == nil {
		d.p.Add(name, "must be an object of string values")
		return nil
	}
	for _, fe := range ip {
		d.p.Add(name+"."+fe.Field, "%s", fe.Message)
	}
	m := make(map[string]string, len(inner))
	for k, raw := range inner {
		s, ok := unquote(raw)
		if !ok {
			d.p.Add(name+"."+k, "must be a string")
			continue
		}
		m[k] = s
	}
	return m
}

func (d fieldDecoder) time(name string) *time.Time {
	s := d.str(name, 64, false)
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d.p.Add(name, "must be an RFC 3339 time such as 2025-10-04T15:00:00Z")
		return nil
	}
	t = t.UTC()
	return &t
}

func jobFromFields(fields map[string]json.RawMessage, p Problems, rules JobRules, now time.Time) (*Job, error) {
	d := fieldDecoder{fields: fields, p: &p}
	for _, k := range sortedKeys(fields) {
		if !createJobFields[k] {
			p.Add(k, "unknown field")
		}
	}
	j := &Job{
		Status:             StatusPending,
		Protocol:           ProtocolHTTPWebhook,
		PayloadContentType: "application/json",
		MaxRetries:         DefaultMaxRetries,
		RetryStrategy:      RetryExponential,
	}
	j.ExternalID = d.str("externalId", MaxExternalIDLen, false)
	j.Source = d.str("source", MaxSourceLen, true)
	j.Type = d.str("type", MaxTypeLen, true)
	j.GroupID = d.str("groupId", MaxGroupIDLen, false)
	CheckGroupID(&p, j.GroupID)
	j.IdempotencyKey = d.str("idempotencyKey", MaxIdempotencyLen, false)
	j.TargetURL = d.str("targetUrl", MaxURLLen, true)
	if j.TargetURL != "" {
		rules.CheckTarget(&p, "targetUrl", j.TargetURL)
	}
	if d.present("protocol") {
		if proto := d.str("protocol", 32, false); proto != ProtocolHTTPWebhook {
			p.Add("protocol", "must be %s", ProtocolHTTPWebhook)
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
		if ct := d.str("payloadContentType", MaxContentTypeLen, false); CheckContentType(&p, ct) {
			j.PayloadContentType = ct
		}
	}
	j.Headers = d.stringMap("headers")
	CheckHeaders(&p, j.Headers)
	j.Metadata = d.stringMap("metadata")
	CheckMetadata(&p, j.Metadata)
	if d.present("credentialsId") {
		// A string or a number: a number is parsed as written.
		n, ok := unquote(fields["credentialsId"])
		if !ok {
			n = string(fields["credentialsId"])
		}
		id, err := strconv.ParseInt(n, 10, 64)
		if err != nil || id <= 0 {
			p.Add("credentialsId", "must be a credentials id")
		} else {
			j.CredentialsID = id
		}
	}
	if d.present("maxRetries") {
		var n int64
		if err := json.Unmarshal(fields["maxRetries"], &n); err != nil {
			p.Add("maxRetries", "must be a whole number from %d to %d", MinRetries, MaxRetriesLimit)
		} else if n < MinRetries || n > MaxRetriesLimit {
			p.Add("maxRetries", "must be from %d to %d (the total number of attempts)", MinRetries, MaxRetriesLimit)
		} else {
			j.MaxRetries = int(n)
		}
	}
	if d.present("retryStrategy") {
		s := RetryStrategy(d.str("retryStrategy", 32, false))
		if !s.Valid() {
			p.Add("retryStrategy", "must be one of exponential, linear, fixed")
		} else {
			j.RetryStrategy = s
		}
	}
	routeFields(d, rules, &j.QueueURL, &j.PoolCode)
	j.ScheduledFor = d.time("scheduledFor")
	j.ExpiresAt = d.time("expiresAt")
	CheckSchedule(&p, j.ScheduledFor, j.ExpiresAt, now)
	if err := p.Err(); err != nil {
		return nil, err
	}
	return j, nil
}

// CheckGroupID notes a problem with groupId when id is set and outside
// SQS's MessageGroupId alphabet: a job whose group SQS refuses could never
// be published.
func CheckGroupID(p *Problems, id string) {
	if id != "" && !validGroupID(id) {
		p.Add("groupId", "may hold only ASCII letters, digits and punctuation (the SQS MessageGroupId alphabet; no spaces)")
	}
}

// validGroupID reports whether s fits SQS's MessageGroupId alphabet.
func validGroupID(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// CheckTarget notes a problem with field (targetUrl, a subscription's or
// an alert destination's url) when target is not a URL the deployment
// sends to: absolute, https (or http where AllowHTTP), without user
// information or fragment, its port (if any) from 1 to 65535.
func (rules JobRules) CheckTarget(p *Problems, field, target string) {
	u, err := url.Parse(target)
	switch {
	case err != nil || !u.IsAbs() || u.Host == "" || u.Hostname() == "":
		p.Add(field, "must be an absolute http(s) URL")
	case u.Scheme != "https" && u.Scheme != "http":
		p.Add(field, "must use https (or http where allowed)")
	case u.Scheme == "http" && !rules.AllowHTTP:
		p.Add(field, "must use https")
	case u.User != nil:
		p.Add(field, "must not carry credentials; use credentialsId or headers")
	case u.Fragment != "":
		p.Add(field, "must not have a fragment")
	case !validPort(u.Port()):
		p.Add(field, "must have a port from 1 to 65535")
	}
}

// validPort accepts an absent port (the scheme's default) or 1–65535;
// url.Parse checks only that a port is digits.
func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// CheckContentType reports whether ct may be a payload's media type (not
// empty, no line breaks or other control characters), noting a problem
// with payloadContentType when not.
func CheckContentType(p *Problems, ct string) bool {
	if ct == "" || hasControl(ct) {
		p.Add("payloadContentType", "must be a non-empty media type without line breaks")
		return false
	}
	return true
}

// CheckSchedule notes the problems of a job's scheduledFor and expiresAt
// (either may be nil) at now: scheduledFor at most MaxScheduleAhead from
// now; expiresAt in the future, at most a day past that, and after
// scheduledFor.
func CheckSchedule(p *Problems, scheduledFor, expiresAt *time.Time, now time.Time) {
	if s := scheduledFor; s != nil && s.After(now.Add(MaxScheduleAhead)) {
		p.Add("scheduledFor", "must be within %d days from now", int(MaxScheduleAhead.Hours()/24))
	}
	if e := expiresAt; e != nil {
		switch {
		case !e.After(now):
			p.Add("expiresAt", "must be in the future")
		case e.After(now.Add(MaxScheduleAhead + 24*time.Hour)):
			p.Add("expiresAt", "must be within %d days from now", int(MaxScheduleAhead.Hours()/24)+1)
		case scheduledFor != nil && !e.After(*scheduledFor):
			p.Add("expiresAt", "must be after scheduledFor")
		}
	}
}

// CheckHeaders notes every problem with a job's or subscription's custom
// headers (fields headers and headers.<name>): at most MaxHeaders, each an
// RFC 9110 token of at most MaxHeaderNameLen, none that dispatch sets or
// that are hop-by-hop, no signature-header prefixes, values without
// control characters (net/http would refuse to send them) of at most
// MaxHeaderValueLen bytes.
func CheckHeaders(p *Problems, h map[string]string) {
	if len(h) > MaxHeaders {
		p.Add("headers", "holds %d headers; at most %d are allowed", len(h), MaxHeaders)
	}
	for _, name := range sortedKeys(h) {
		field := "headers." + name
		lower := strings.ToLower(name)
		switch {
		case !validHeaderName(name) || len(name) > MaxHeaderNameLen:
			p.Add(field, "is not a valid header name")
		case reservedHeaders[lower] != "":
			p.Add(field, "is reserved (%s)", reservedHeaders[lower])
		case hasAnyPrefix(lower, reservedPrefixes):
			p.Add(field, "is reserved for dispatch's signature headers")
		case hasControl(h[name]):
			p.Add(field, "must not contain line breaks or other control characters")
		case len(h[name]) > MaxHeaderValueLen:
			p.Add(field, "must be at most %d bytes", MaxHeaderValueLen)
		}
	}
}

// CheckMetadata notes every problem with metadata pairs (a job's or an
// event's metadata, a subscription's filter; fields metadata and
// metadata.<key>): at most MaxMetadataPairs, keys of 1 to MaxMetadataKeyLen
// characters, values of at most MaxMetadataValLen, no NUL characters.
func CheckMetadata(p *Problems, m map[string]string) {
	if len(m) > MaxMetadataPairs {
		p.Add("metadata", "holds %d pairs; at most %d are allowed", len(m), MaxMetadataPairs)
		return
	}
	for _, k := range sortedKeys(m) {
		switch {
		case k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen:
			p.Add("metadata", "keys must be 1 to %d characters", MaxMetadataKeyLen)
		case utf8.RuneCountInString(m[k]) > MaxMetadataValLen:
			p.Add("metadata."+k, "must be at most %d characters", MaxMetadataValLen)
		case strings.ContainsRune(k, 0) || strings.ContainsRune(m[k], 0):
			p.Add("metadata."+k, "must not contain NUL characters")
		}
	}
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// hasControl reports whether s holds a control character other than a tab:
// net/http refuses to send such a header value, so every attempt would fail.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return true
		}
	}
	return false
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, pre := range prefixes {
		if strings.HasPrefix(s, pre) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Fields reads typed fields out of a JSON object body, collecting every
// problem (unknown fields, wrong types, bad lengths) for one answer.
type Fields struct {
	d fieldDecoder
	p Problems
}

// ParseObject decodes body as a JSON object whose fields must be among
// known. The error is set only when the body is unusable as a whole; an
// empty body is an empty object.
func ParseObject(body []byte, known ...string) (*Fields, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, p.Err()
	}
	f := &Fields{p: p}
	f.d = fieldDecoder{fields: fields, p: &f.p}
	allowed := map[string]bool{}
	for _, k := range known {
		allowed[k] = true
	}
	for _, k := range sortedKeys(fields) {
		if !allowed[k] {
			f.p.Add(k, "unknown field")
		}
	}
	return f, nil
}

// String returns a string field ("" when absent), noting problems.
func (f *Fields) String(name string, maxLen int, required bool) string {
	return f.d.str(name, maxLen, required)
}

// Has reports whether a field is present and not null.
func (f *Fields) Has(name string) bool { return f.d.present(name) }

// Add notes a problem with a field.
func (f *Fields) Add(field, format string, args ...any) { f.p.Add(field, format, args...) }

// Err returns every problem noted, or nil.
func (f *Fields) Err() error { return f.p.Err() }
