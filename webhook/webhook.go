// Package webhook signs dispatch's webhook requests and verifies them for receivers.
//
// Two schemes are supported. FLOWCATALYST (the default) sends
//
//	X-FLOWCATALYST-TIMESTAMP: 2025-10-04T14:30:45.123Z
//	X-FLOWCATALYST-SIGNATURE: hex(HMAC-SHA256(secret, timestamp + payload))
//
// and STANDARD_WEBHOOKS follows https://www.standardwebhooks.com/:
//
//	webhook-id:        <message id>
//	webhook-timestamp: <unix seconds>
//	webhook-signature: v1,base64(HMAC-SHA256(key, id + "." + timestamp + "." + payload))
//
// During a secret rotation's grace period the sender also signs with each
// previous secret still valid (X-FLOWCATALYST-SIGNATURE-PREVIOUS, one
// signature per secret, space-separated; or more entries in
// webhook-signature), so a receiver holding any of them verifies.
//
// Receivers use a [Verifier]; the sender uses [Sign], [NewSecret] and
// [ValidateSecret]. The package needs only the standard library, so a
// receiver written in Go can import it without the rest of dispatch.
//
// # Receiving
//
// Verify every request before acting on it, with each secret the receiver
// holds (two during a rotation). Delivery is at least once: a job keeps its
// id in [HeaderJobID] (and, with STANDARD_WEBHOOKS, in webhook-id) across
// retries and redeliveries, so deduplicate on it, and answer 2xx once the
// delivery is stored. With FLOWCATALYST that id is not signed: refuse a
// request whose [ReplayKey] you accepted within the tolerance, too. A timeout, a connection error, 408, 425, 429 or 5xx
// is retried with backoff (Retry-After is honoured); a redirect or another
// 4xx ends the job as failed. docs/receivers.md has the whole contract.
package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scheme names a signature scheme. The zero value means [SchemeFlowCatalyst]
// for [Sign], [NewSecret] and [ValidateSecret], and "detect from the headers"
// for a [Verifier].
type Scheme string

// The supported signature schemes.
const (
	// SchemeFlowCatalyst signs timestamp+payload with the raw secret and
	// sends hex signatures in X-FLOWCATALYST-* headers.
	SchemeFlowCatalyst Scheme = "FLOWCATALYST"
	// SchemeStandardWebhooks follows the Standard Webhooks specification.
	SchemeStandardWebhooks Scheme = "STANDARD_WEBHOOKS"
)

// Valid reports whether s is one of the named schemes. The empty scheme is
// not valid.
func (s Scheme) Valid() bool {
	return s == SchemeFlowCatalyst || s == SchemeStandardWebhooks
}

// orDefault maps the empty scheme to the default, SchemeFlowCatalyst.
func (s Scheme) orDefault() Scheme {
	if s == "" {
		return SchemeFlowCatalyst
	}
	return s
}

// Header names set by [Sign] and read by [Verifier.Verify]. http.Header
// canonicalizes them ("webhook-id" is stored as "Webhook-Id"); header names
// are case-insensitive on the wire.
const (
	// HeaderSignature carries the FLOWCATALYST signature made with the current secret.
	HeaderSignature = "X-FLOWCATALYST-SIGNATURE"
	// HeaderSignaturePrevious carries the FLOWCATALYST signatures made with
	// the previous secrets still in a rotation's grace period, newest first,
	// space-separated (usually just one).
	HeaderSignaturePrevious = "X-FLOWCATALYST-SIGNATURE-PREVIOUS"
	// HeaderTimestamp carries the FLOWCATALYST timestamp, see [TimestampLayout].
	HeaderTimestamp = "X-FLOWCATALYST-TIMESTAMP"
	// HeaderWebhookID carries the STANDARD_WEBHOOKS message id.
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp carries the STANDARD_WEBHOOKS timestamp in unix seconds.
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature carries the space-separated STANDARD_WEBHOOKS
	// signatures ("v1,<base64>"), current secret first.
	HeaderWebhookSignature = "webhook-signature"
)

// Headers dispatch sends with every delivery, whatever the scheme.
const (
	// HeaderJobID carries the job's id: the same on every attempt and
	// redelivery of a job (a replay is a new job), so receivers deduplicate
	// on it.
	HeaderJobID = "X-Dispatch-Job-Id"
	// HeaderAttempt carries the attempt's number, from 1.
	HeaderAttempt = "X-Dispatch-Attempt"
	// HeaderEventID and HeaderEventType are set when the job was made by
	// an event's fan-out to a subscription.
	HeaderEventID   = "X-Dispatch-Event-Id"
	HeaderEventType = "X-Dispatch-Event-Type"
)

// TimestampLayout is the FLOWCATALYST timestamp format: UTC, always three
// millisecond digits, e.g. 2025-10-04T14:30:45.123Z.
const TimestampLayout = "2006-01-02T15:04:05.000Z"

// DefaultTolerance is the allowed clock skew, past or future, between a
// request's timestamp and the receiver's clock when [Verifier.Tolerance] is zero.
const DefaultTolerance = 5 * time.Minute

// MaxPayloadBytes is the largest body [Verifier.VerifyRequest] reads (10 MiB).
const MaxPayloadBytes = 10 << 20

// secretPrefix starts every secret made by NewSecret and every
// STANDARD_WEBHOOKS secret in its string form.
const secretPrefix = "whsec_"

// Limits checked by ValidateSecret.
const (
	maxSecretLen = 256
	minKeyBytes  = 24
	maxKeyBytes  = 64
	newKeyBytes  = 32
)

// Errors returned by [Verifier.Verify] and [Verifier.VerifyRequest], wrapped
// with detail; test for them with errors.Is.
var (
	// ErrMissingHeaders means a header the scheme needs is absent or empty.
	ErrMissingHeaders = errors.New("webhook: missing signature headers")
	// ErrBadTimestamp means the timestamp header does not parse.
	ErrBadTimestamp = errors.New("webhook: bad timestamp")
	// ErrTimestampOutOfRange means the timestamp is further from now than the tolerance.
	ErrTimestampOutOfRange = errors.New("webhook: timestamp out of tolerance")
	// ErrNoMatch means no signature matches any of the verifier's secrets.
	ErrNoMatch = errors.New("webhook: no matching signature")
	// ErrPayloadTooLarge means the request body exceeds [MaxPayloadBytes].
	ErrPayloadTooLarge = errors.New("webhook: payload too large")
	// ErrInvalidSecret means a secret is unusable for the scheme. Errors
	// wrapping it never contain the secret.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
)

// Signing describes one request to sign.
type Signing struct {
	// Scheme selects the headers; "" means SchemeFlowCatalyst.
	Scheme Scheme
	// ID is the message id (the job id, stable across retries); required by
	// STANDARD_WEBHOOKS and ignored by FLOWCATALYST.
	ID string
	// Secret is the current secret.
	Secret string
	// Previous are the previous secrets still in a rotation's grace period,
	// newest first (none outside one).
	Previous []string
	// Timestamp is the signing time; the zero value means time.Now().
	Timestamp time.Time
}

// Sign sets the scheme's signature headers on h for payload, replacing any
// earlier values (so a retried request can be signed again), and removes the
// previous-secret signature when s.Previous is empty.
func Sign(h http.Header, s Signing, payload []byte) error {
	if h == nil {
		return errors.New("webhook: sign: nil header")
	}
	if s.Secret == "" {
		return fmt.Errorf("webhook: sign: %w: empty", ErrInvalidSecret)
	}
	ts := s.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	switch scheme := s.Scheme.orDefault(); scheme {
	case SchemeFlowCatalyst:
		stamp := ts.UTC().Format(TimestampLayout)
		h.Set(HeaderTimestamp, stamp)
		h.Set(HeaderSignature, flowCatalystSignature([]byte(s.Secret), stamp, payload))
		if len(s.Previous) > 0 {
			// One signature per previous secret, space-separated (one
			// value, as before, when a single rotation is in its grace).
			prev := make([]string, len(s.Previous))
			for i, p := range s.Previous {
				if p == "" {
					return fmt.Errorf("webhook: sign: previous secret %d: %w: empty", i, ErrInvalidSecret)
				}
				prev[i] = flowCatalystSignature([]byte(p), stamp, payload)
			}
			h.Set(HeaderSignaturePrevious, strings.Join(prev, " "))
		} else {
			h.Del(HeaderSignaturePrevious)
		}
		return nil
	case SchemeStandardWebhooks:
		if s.ID == "" {
			return errors.New("webhook: sign: STANDARD_WEBHOOKS needs a message id")
		}
		key, err := decodeKey(s.Secret)
		if err != nil {
			return fmt.Errorf("webhook: sign: current secret: %w", err)
		}
		stamp := strconv.FormatInt(ts.Unix(), 10)
		sigs := "v1," + standardSignature(key, s.ID, stamp, payload)
		for _, p := range s.Previous {
			prev, err := decodeKey(p)
			if err != nil {
				return fmt.Errorf("webhook: sign: previous secret: %w", err)
			}
			sigs += " v1," + standardSignature(prev, s.ID, stamp, payload)
		}
		h.Set(HeaderWebhookID, s.ID)
		h.Set(HeaderWebhookTimestamp, stamp)
		h.Set(HeaderWebhookSignature, sigs)
		return nil
	default:
		return fmt.Errorf("webhook: sign: unknown scheme %q", scheme)
	}
}

// NewSecret returns a new random secret (32 bytes from crypto/rand) in the
// scheme's form, "whsec_" + standard base64. STANDARD_WEBHOOKS uses the
// decoded bytes as the key; FLOWCATALYST uses the whole string as given.
func NewSecret(scheme Scheme) (string, error) {
	if scheme = scheme.orDefault(); !scheme.Valid() {
		return "", fmt.Errorf("webhook: new secret: unknown scheme %q", scheme)
	}
	key := make([]byte, newKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("webhook: new secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// ValidateSecret reports whether a user-given secret is usable for the
// scheme: non-empty, at most 256 bytes, and for STANDARD_WEBHOOKS standard
// base64 (after an optional "whsec_" prefix) of 24 to 64 bytes. Errors wrap
// [ErrInvalidSecret] and never contain the secret.
func ValidateSecret(scheme Scheme, secret string) error {
	if scheme = scheme.orDefault(); !scheme.Valid() {
		return fmt.Errorf("webhook: unknown scheme %q", scheme)
	}
	switch {
	case secret == "":
		return fmt.Errorf("%w: empty", ErrInvalidSecret)
	case len(secret) > maxSecretLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidSecret, maxSecretLen)
	}
	if scheme == SchemeStandardWebhooks {
		key, err := decodeKey(secret)
		if err != nil {
			return err
		}
		if len(key) < minKeyBytes || len(key) > maxKeyBytes {
			return fmt.Errorf("%w: key is %d bytes, want %d to %d", ErrInvalidSecret, len(key), minKeyBytes, maxKeyBytes)
		}
	}
	return nil
}

// Verifier checks a received request. Any one matching signature accepts it,
// so a receiver holding either the old or the new secret during a rotation
// verifies. A Verifier is safe for concurrent use.
type Verifier struct {
	// Scheme is the expected scheme; "" means detect from the headers
	// (webhook-signature present: STANDARD_WEBHOOKS, else FLOWCATALYST).
	Scheme Scheme
	// Secrets are the secrets to try, in the scheme's string form.
	Secrets []string
	// Tolerance is the allowed skew between the request's timestamp and Now,
	// both past and future; zero or negative means DefaultTolerance.
	Tolerance time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Verify checks the headers and payload. Request errors wrap
// [ErrMissingHeaders], [ErrBadTimestamp], [ErrTimestampOutOfRange] or
// [ErrNoMatch]; a misconfigured Verifier (no secrets, an empty secret, an
// undecodable STANDARD_WEBHOOKS secret, an unknown scheme) gets an error
// wrapping none of them.
func (v Verifier) Verify(h http.Header, payload []byte) error {
	if len(v.Secrets) == 0 {
		return errors.New("webhook: verifier has no secrets")
	}
	scheme := v.Scheme
	if scheme == "" {
		scheme = SchemeFlowCatalyst
		if h.Get(HeaderWebhookSignature) != "" {
			scheme = SchemeStandardWebhooks
		}
	}
	switch scheme {
	case SchemeFlowCatalyst:
		return v.verifyFlowCatalyst(h, payload)
	case SchemeStandardWebhooks:
		return v.verifyStandard(h, payload)
	default:
		return fmt.Errorf("webhook: verifier: unknown scheme %q", scheme)
	}
}

// VerifyRequest reads r.Body (at most [MaxPayloadBytes]), puts the bytes
// back so r.Body can be read again, and verifies them with the request's
// headers. It returns the payload only when it verifies.
func (v Verifier) VerifyRequest(r *http.Request) ([]byte, error) {
	var payload []byte
	if r.Body != nil && r.Body != http.NoBody {
		orig := r.Body
		var err error
		payload, err = io.ReadAll(io.LimitReader(orig, MaxPayloadBytes+1))
		if err != nil {
			return nil, fmt.Errorf("webhook: read body: %w", err)
		}
		if len(payload) > MaxPayloadBytes {
			// Leave the body whole for the caller, unread part included.
			r.Body = readCloser{io.MultiReader(bytes.NewReader(payload), orig), orig}
			return nil, fmt.Errorf("%w: more than %d bytes", ErrPayloadTooLarge, MaxPayloadBytes)
		}
		_ = orig.Close() // Fully read; closing only releases it.
		r.Body = io.NopCloser(bytes.NewReader(payload))
	}
	if err := v.Verify(r.Header, payload); err != nil {
		return nil, err
	}
	return payload, nil
}

// ReplayKey identifies a signed request by what its signature covers, for
// a receiver to refuse the same request sent again within the tolerance.
// Call it on a request that verified, with its payload.
//
// With FLOWCATALYST the signature covers the timestamp and the body only:
// [HeaderJobID] is not signed, so a captured request re-sent with another
// job id passes both the signature and deduplication by job id. Its key is
// the timestamp and the body's SHA-256: keep the keys of the requests
// accepted in the last twice [Verifier.Tolerance] and answer one seen
// again with 425 Too Early. Two different jobs signed in the same
// millisecond with identical bodies share a key too; 425 is retried, and
// the retry carries a new timestamp, so the second is delivered a moment
// later (unless that was its last attempt). With STANDARD_WEBHOOKS the id is signed (the key
// is the id and the timestamp), and deduplicating on the id is enough.
func ReplayKey(h http.Header, payload []byte) string {
	if id := h.Get(HeaderWebhookID); h.Get(HeaderWebhookSignature) != "" {
		return "v1:" + id + ":" + h.Get(HeaderWebhookTimestamp)
	}
	sum := sha256.Sum256(payload)
	return "fc:" + h.Get(HeaderTimestamp) + ":" + hex.EncodeToString(sum[:])
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (v Verifier) verifyFlowCatalyst(h http.Header, payload []byte) error {
	for i, secret := range v.Secrets {
		if secret == "" {
			// An empty HMAC key is one anybody can sign with.
			return fmt.Errorf("webhook: verifier secret %d: %w: empty", i, ErrInvalidSecret)
		}
	}
	stamp, sig, prev := h.Get(HeaderTimestamp), h.Get(HeaderSignature), h.Get(HeaderSignaturePrevious)
	if err := missing(HeaderTimestamp, stamp, HeaderSignature, sig); err != nil {
		return err
	}
	// RFC 3339 parsing accepts the sender's TimestampLayout and other
	// precisions; the signature covers the header exactly as received.
	t, err := time.Parse(time.RFC3339, stamp)
	if err != nil {
		return fmt.Errorf("%w: %s is not an RFC 3339 time", ErrBadTimestamp, HeaderTimestamp)
	}
	if err := v.checkTime(t); err != nil {
		return err
	}
	var got [][]byte
	// The previous-secret header holds one signature per secret still in
	// its grace period, space-separated.
	for _, s := range append([]string{sig}, strings.Fields(prev)...) {
		if b, err := hex.DecodeString(strings.TrimSpace(s)); err == nil && len(b) == sha256.Size {
			got = append(got, b)
		}
	}
	for _, secret := range v.Secrets {
		want := flowCatalystMAC([]byte(secret), stamp, payload)
		for _, g := range got {
			if hmac.Equal(g, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s", ErrNoMatch, HeaderSignature)
}

func (v Verifier) verifyStandard(h http.Header, payload []byte) error {
	keys := make([][]byte, 0, len(v.Secrets))
	for i, secret := range v.Secrets {
		key, err := decodeKey(secret)
		if err != nil {
			return fmt.Errorf("webhook: verifier secret %d: %w", i, err)
		}
		keys = append(keys, key)
	}
	id, stamp := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp)
	sigHeader := strings.Join(h.Values(HeaderWebhookSignature), " ")
	if err := missing(HeaderWebhookID, id, HeaderWebhookTimestamp, stamp, HeaderWebhookSignature, sigHeader); err != nil {
		return err
	}
	sec, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is not unix seconds", ErrBadTimestamp, HeaderWebhookTimestamp)
	}
	if err := v.checkTime(time.Unix(sec, 0)); err != nil {
		return err
	}
	var got [][]byte
	for _, entry := range strings.Fields(sigHeader) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(sig); err == nil && len(b) == sha256.Size {
			got = append(got, b)
		}
	}
	if len(got) == 0 {
		return fmt.Errorf("%w: no v1 signature in %s", ErrNoMatch, HeaderWebhookSignature)
	}
	for _, key := range keys {
		want := standardMAC(key, id, stamp, payload)
		for _, g := range got {
			if hmac.Equal(g, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s", ErrNoMatch, HeaderWebhookSignature)
}

// checkTime rejects t when it is further than the tolerance from now.
func (v Verifier) checkTime(t time.Time) error {
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	// Sub saturates, so huge timestamps cannot overflow here.
	if skew := now().Sub(t); skew > tol || skew < -tol {
		return fmt.Errorf("%w: %s from now, tolerance %s", ErrTimestampOutOfRange, skew.Round(time.Second), tol)
	}
	return nil
}

// missing takes header name/value pairs and reports the names with empty values.
func missing(pairs ...string) error {
	var names []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			names = append(names, pairs[i])
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrMissingHeaders, strings.Join(names, ", "))
}

// decodeKey returns the STANDARD_WEBHOOKS key of secret: the standard
// base64 after the "whsec_" prefix, or the whole string without it.
func decodeKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil {
		// The base64 error names only an offset, but say nothing of the secret at all.
		return nil, fmt.Errorf("%w: not base64 (optionally prefixed %q)", ErrInvalidSecret, secretPrefix)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: empty key", ErrInvalidSecret)
	}
	return key, nil
}

func flowCatalystMAC(key []byte, stamp string, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(stamp))
	m.Write(payload)
	return m.Sum(nil)
}

func flowCatalystSignature(key []byte, stamp string, payload []byte) string {
	return hex.EncodeToString(flowCatalystMAC(key, stamp, payload))
}

func standardMAC(key []byte, id, stamp string, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(stamp))
	m.Write([]byte{'.'})
	m.Write(payload)
	return m.Sum(nil)
}

func standardSignature(key []byte, id, stamp string, payload []byte) string {
	return base64.StdEncoding.EncodeToString(standardMAC(key, id, stamp, payload))
}
