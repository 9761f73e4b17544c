package mediator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/tracing"
	"github.com/dispatchhq/dispatch/webhook"
)

// maxResponseBody is how much of a response is kept on the attempt.
const maxResponseBody = 4 << 10

// maxResponseHeaders bounds the response headers kept on the attempt (their
// names and values); maxHeaderValue each value.
const (
	maxResponseHeaders = 4 << 10
	maxHeaderValue     = 512
)

// Redacted stands for a secret header value that is never stored.
const Redacted = "[redacted]"

// secretHeaders are the request headers whose values are secrets or are
// made with one: the receiver's bearer token and the signatures. Their
// values are never stored.
var secretHeaders = []string{"Authorization", webhook.HeaderSignature, webhook.HeaderSignaturePrevious, webhook.HeaderWebhookSignature}

// Delivery is the outcome of one webhook request.
type Delivery struct {
	Status      dispatch.AttemptStatus
	Code        int
	Body        string
	Err         string
	Retryable   bool
	RetryAfter  time.Duration // from a Retry-After header on 429/503
	StartedAt   time.Time
	CompletedAt time.Time
	// RequestHeaders are the headers sent, secrets redacted (nil: no
	// request was made); ResponseHeaders the response's, bounded (nil: no
	// response).
	RequestHeaders  map[string]string
	ResponseHeaders map[string]string
}

// Sender signs and POSTs webhooks.
type Sender struct {
	client    *http.Client
	userAgent string
	now       func() time.Time
	tracer    *tracing.Tracer
}

// SenderConfig configures a Sender.
type SenderConfig struct {
	Timeout   time.Duration
	Guard     Guard
	UserAgent string
	// Tracer records each request as an HTTP client span and sends its
	// traceparent to the receiver (nil: tracing off).
	Tracer *tracing.Tracer
}

// NewSender returns a Sender whose connections pass the SSRF guard and
// which never follows redirects.
func NewSender(cfg SenderConfig) *Sender {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us and bypass the guard
		DialContext:           cfg.Guard.DialContext(dialer),
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &Sender{
		client: &http.Client{
			Transport: transport,
			Timeout:   cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		userAgent: cfg.UserAgent,
		now:       time.Now,
		tracer:    cfg.Tracer,
	}
}

// Send delivers attempt n of job j, signed with creds (nil: unsigned).
func (s *Sender) Send(ctx context.Context, j *dispatch.Job, creds *dispatch.Credentials) Delivery {
	d := Delivery{StartedAt: s.now().UTC()}
	var span trace.Span
	if s.tracer.Enabled() {
		ctx, span = s.startSpan(ctx, j)
	}
	finish := func() Delivery {
		d.CompletedAt = s.now().UTC()
		if span != nil {
			endSpan(span, d)
		}
		return d
	}
	if creds != nil && !creds.Allows(j.TargetURL) {
		// The last line of defence: creating the job or subscription
		// checked this, and so did the processor or the handshake.
		d.Status, d.Err = dispatch.AttemptBlocked, notAllowed(*creds, j.TargetURL)
		return finish()
	}
	payload := []byte(j.Payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.TargetURL, bytes.NewReader(payload))
	if err != nil {
		d.Status, d.Err = dispatch.AttemptFailure, "invalid target URL"
		return finish()
	}
	for k, v := range j.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", j.PayloadContentType)
	req.Header.Set("User-Agent", s.userAgent)
	req.Header.Set(webhook.HeaderJobID, dispatch.FormatID(j.ID))
	req.Header.Set(webhook.HeaderAttempt, strconv.Itoa(j.AttemptCount))
	s.tracer.Inject(ctx, req.Header) // traceparent: the receiver joins the delivery's trace
	if j.EventID != 0 {
		req.Header.Set(webhook.HeaderEventID, dispatch.FormatID(j.EventID))
		req.Header.Set(webhook.HeaderEventType, j.Type)
	}
	if creds != nil {
		if creds.BearerToken != "" {
			req.Header.Set("Authorization", "Bearer "+creds.BearerToken)
		}
		err := webhook.Sign(req.Header, webhook.Signing{
			Scheme:    webhook.Scheme(creds.SignatureScheme),
			ID:        dispatch.FormatID(j.ID),
			Secret:    creds.SigningSecret,
			Previous:  creds.ActivePrevious(d.StartedAt),
			Timestamp: d.StartedAt,
		}, payload)
		if err != nil {
			d.Status, d.Err = dispatch.AttemptFailure, "cannot sign: "+err.Error()
			return finish()
		}
	}
	d.RequestHeaders = requestHeaders(req, len(payload))
	resp, err := s.client.Do(req)
	if err != nil {
		d.Status, d.Err, d.Retryable = classifyError(err)
		return finish()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	d.Code, d.Body = resp.StatusCode, cleanText(body)
	d.ResponseHeaders = responseHeaders(resp.Header)
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		d.Status = dispatch.AttemptSuccess
		return finish()
	case c >= 300 && c < 400:
		d.Err = fmt.Sprintf("HTTP %d: redirects are not followed (Location: %.200s)", c, cleanText([]byte(resp.Header.Get("Location"))))
	case c == 408 || c == 425 || c == 429 || c >= 500:
		d.Err, d.Retryable = fmt.Sprintf("HTTP %d", c), true
		if c == 429 || c == 503 {
			d.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), d.StartedAt)
		}
	default:
		d.Err = fmt.Sprintf("HTTP %d: not retryable", c)
	}
	d.Status = dispatch.AttemptFailure
	return finish()
}

// notAllowed says why creds may not be sent to target, and what to do.
func notAllowed(creds dispatch.Credentials, target string) string {
	if err := creds.CheckTarget(target); err != nil {
		var de *dispatch.Error
		if errors.As(err, &de) {
			return "not sent: " + de.Message
		}
		return "not sent: " + err.Error()
	}
	return ""
}

func classifyError(err error) (dispatch.AttemptStatus, string, bool) {
	if errors.Is(err, ErrBlockedTarget) {
		var sb strings.Builder
		sb.WriteString("blocked: ")
		if _, after, ok := strings.Cut(err.Error(), ErrBlockedTarget.Error()+": "); ok {
			sb.WriteString(after)
		} else {
			sb.WriteString(ErrBlockedTarget.Error())
		}
		sb.WriteString(" (set DISPATCH_ALLOW_PRIVATE_TARGETS or DISPATCH_ALLOWED_TARGET_CIDRS to allow it)")
		return dispatch.AttemptBlocked, sb.String(), false
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return dispatch.AttemptTimeout, "timeout: no response within the delivery timeout", true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dispatch.AttemptNetworkError, "DNS: " + dnsErr.Err + " for " + dnsErr.Name, true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return dispatch.AttemptNetworkError, "network: " + opErr.Op + ": " + errText(opErr.Err), true
	}
	return dispatch.AttemptNetworkError, "network: " + errText(err), true
}

// errText is err without the "Post <url>: " that url.Error puts in front,
// so that a target's URL (a query string may hold a token; a Slack
// destination's URL is its secret) is not copied into lastError.
func errText(err error) string {
	var ue *url.Error
	for errors.As(err, &ue) {
		if ue.Err == nil {
			return "the request failed"
		}
		err = ue.Err
	}
	return err.Error()
}

// MaxRetryAfter is the longest Retry-After read: a longer one (up to any
// number of digits) is read as this, and the retry policy caps it again
// at DISPATCH_RETRY_MAX.
const MaxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	v = strings.TrimSpace(v)
	if v != "" && strings.Trim(v, "0123456789") == "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n <= int64(MaxRetryAfter/time.Second) {
			return time.Duration(n) * time.Second
		}
		return MaxRetryAfter // more digits than any sane delay: the most
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}

// requestHeaders are the headers of req as it is sent, with Host and
// Content-Length, and the values of the secret ones redacted.
func requestHeaders(req *http.Request, length int) map[string]string {
	out := make(map[string]string, len(req.Header)+2)
	for k, v := range req.Header {
		out[k] = cleanHeader(strings.Join(v, ", "))
	}
	for _, k := range secretHeaders {
		if _, ok := out[http.CanonicalHeaderKey(k)]; ok {
			out[http.CanonicalHeaderKey(k)] = Redacted
		}
	}
	out["Host"] = cleanHeader(req.URL.Host)
	out["Content-Length"] = strconv.Itoa(length)
	return out
}

// responseHeaders keeps a response's headers, by name, as long as their
// names and values fit in maxResponseHeaders (one that does not is left
// out, and counted under "…"); each value is cut at maxHeaderValue, and
// Set-Cookie (a receiver's session) is redacted.
func responseHeaders(h http.Header) map[string]string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make(map[string]string, len(names))
	size, left := 0, 0
	for _, k := range names {
		v := cleanHeader(strings.Join(h[k], ", "))
		if len(v) > maxHeaderValue {
			v = truncate(v, maxHeaderValue) + "…"
		}
		if strings.EqualFold(k, "Set-Cookie") {
			v = Redacted
		}
		k = cleanHeader(k)
		if size+len(k)+len(v) > maxResponseHeaders {
			left++
			continue
		}
		size += len(k) + len(v)
		out[k] = v
	}
	if left > 0 {
		out["…"] = strconv.Itoa(left) + " more not kept"
	}
	return out
}

// cleanHeader makes a header name or value safe to store as JSON text:
// valid UTF-8, no NUL.
func cleanHeader(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cleanText makes a response body safe for a TEXT column: valid UTF-8, no NUL.
func cleanText(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	// Replacement characters can make s longer than b: cut it back to the
	// limit, at a rune boundary so the result stays valid UTF-8.
	if len(s) > maxResponseBody {
		cut := maxResponseBody
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// startSpan starts one attempt's HTTP client span (OpenTelemetry's HTTP
// client conventions), linked to the span that created the job: each
// attempt of a retried job is its own span of the job's trace. url.full
// leaves out the query, which may hold a token, and the path of a target
// that is a secret (Job.TargetIsSecret).
func (s *Sender) startSpan(ctx context.Context, j *dispatch.Job) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", http.MethodPost),
		attribute.String("dispatch.job.id", dispatch.FormatID(j.ID)),
		attribute.Int("http.request.resend_count", max(j.AttemptCount-1, 0)),
		attribute.Int("dispatch.attempt", j.AttemptCount),
	}
	if u, err := url.Parse(j.TargetURL); err == nil {
		full := u.Scheme + "://" + u.Host + u.EscapedPath()
		if j.TargetIsSecret() {
			full = dispatch.ShowHost(j.TargetURL) // the path is the secret
		}
		attrs = append(attrs, attribute.String("url.full", full),
			attribute.String("server.address", u.Hostname()))
		if port, err := strconv.Atoi(u.Port()); err == nil {
			attrs = append(attrs, attribute.Int("server.port", port))
		}
	}
	return s.tracer.StartLinked(ctx, http.MethodPost, trace.SpanKindClient,
		[]trace.SpanContext{tracing.SpanContext(j.TraceContext)}, attrs...)
}

func endSpan(span trace.Span, d Delivery) {
	if d.Code != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", d.Code))
	}
	span.SetAttributes(attribute.String("dispatch.attempt.status", string(d.Status)))
	switch {
	case d.Code >= 400:
		tracing.Fail(span, strconv.Itoa(d.Code), nil)
	case d.Status != dispatch.AttemptSuccess:
		tracing.Fail(span, strings.ToLower(string(d.Status)), errors.New(d.Err))
	}
	span.End()
}
