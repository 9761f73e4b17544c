package mediator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/tracing"
)

// ErrUnauthorized is returned by the HTTP mediator when the processing
// endpoint refuses the internal token.
var ErrUnauthorized = errors.New("processing endpoint refused the internal token")

// HTTP is the router's mediator: it hands a pointer to the processing
// endpoint and turns the answer into a typed outcome. It always calls its
// configured URL, never the pointer's mediationTarget, so a forged message
// cannot make the router send its internal token elsewhere.
type HTTP struct {
	url    string
	token  string
	client *http.Client
	// Tracer, when set, records each mediation as an HTTP client span
	// and sends its traceparent to the processing endpoint.
	Tracer *tracing.Tracer
}

// NewHTTP returns an HTTP mediator. timeout bounds one mediation and must
// exceed the delivery timeout plus the bookkeeping after it.
func NewHTTP(url, token string, timeout time.Duration) *HTTP {
	return &HTTP{url: url, token: token, client: &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		},
	}}
}

// Mediate returns nil when the job is done (delete the message), a
// *dispatch.RetryAfter when the endpoint asks for a retry, and any other
// error (connection failure, timeout, 5xx) for the router's own backoff.
func (h *HTTP) Mediate(ctx context.Context, ptr dispatch.Pointer) (err error) {
	req, err := h.newRequest(ctx, h.url, ptr)
	if err != nil {
		return err
	}
	if h.Tracer.Enabled() {
		var span trace.Span
		ctx, span = h.Tracer.Start(ctx, http.MethodPost, trace.SpanKindClient,
			attribute.String("http.request.method", http.MethodPost), attribute.String("url.full", h.url),
			attribute.String("dispatch.job.id", ptr.ID))
		req = req.WithContext(ctx)
		h.Tracer.Inject(ctx, req.Header)
		defer func() {
			if err != nil {
				var ra *dispatch.RetryAfter
				if !errors.As(err, &ra) {
					tracing.Fail(span, "mediation_failed", err)
				}
			}
			span.End()
		}()
	}
	if hd, ok := handoff.HandleFrom(ctx); ok {
		req.Header.Set(handoff.Header, hd.EncodeHeader())
	}
	if handoff.FirstReceive(ctx) {
		req.Header.Set(handoff.FirstReceiveHeader, "1")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("mediate job %s: %w", ptr.ID, err)
	}
	defer resp.Body.Close()
	var pr dispatch.ProcessAnswer
	_ = jsonv2.UnmarshalRead(io.LimitReader(resp.Body, 64<<10), &pr)
	switch {
	case resp.StatusCode == http.StatusOK && pr.Status == "done":
		return nil
	case resp.StatusCode == http.StatusOK:
		// Not the processing endpoint's answer (a proxy or an ingress
		// answering any POST): the outcome is not known to be recorded, so
		// the message must not be deleted.
		return fmt.Errorf("mediate job %s: the processing endpoint's URL answered 200 without a processing answer; check DISPATCH_PROCESS_URL", ptr.ID)
	case resp.StatusCode == http.StatusBadRequest && pr.RetryAfterSeconds != nil:
		return &dispatch.RetryAfter{Delay: time.Duration(*pr.RetryAfterSeconds) * time.Second, Reason: pr.Reason, GivenBack: pr.GivenBack}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("mediate job %s: %w", ptr.ID, ErrUnauthorized)
	default:
		return fmt.Errorf("mediate job %s: processing endpoint answered %d", ptr.ID, resp.StatusCode)
	}
}
