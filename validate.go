package dispatch

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The rules a job's, a subscription's and an event's values must meet. The
// api package decodes request bodies into these values and applies the
// rules field by field; each Check function notes its problems under the
// request's field names, so that one answer lists them all.

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
// event's metadata; fields metadata and metadata.<key>): at most
// MaxMetadataPairs, keys of 1 to MaxMetadataKeyLen characters, values of at
// most MaxMetadataValLen, no NUL characters.
func CheckMetadata(p *Problems, m map[string]string) {
	if len(m) > MaxMetadataPairs {
		p.Add("metadata", "holds %d pairs; at most %d are allowed", len(m), MaxMetadataPairs)
	}
	checkPairs(p, "metadata", m)
}

// checkPairs notes every bad key and value of m, as field and field.<key>.
func checkPairs(p *Problems, field string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		switch {
		case k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen:
			p.Add(field, "keys must be 1 to %d characters", MaxMetadataKeyLen)
		case utf8.RuneCountInString(m[k]) > MaxMetadataValLen:
			p.Add(field+"."+k, "must be at most %d characters", MaxMetadataValLen)
		case strings.ContainsRune(k, 0) || strings.ContainsRune(m[k], 0):
			p.Add(field+"."+k, "must not contain NUL characters")
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
