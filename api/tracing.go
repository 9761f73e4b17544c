package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/tracing"
)

// traceRequests records each request as an HTTP server span (OpenTelemetry's
// HTTP server conventions), the child of the caller's traceparent when it
// sends one. It is installed only with tracing on.
func (s *Server) traceRequests(c *gin.Context) {
	r := c.Request
	route := c.FullPath()
	name := metricMethod(r.Method)
	if route != "" {
		name += " " + route
	}
	ctx := s.cfg.Tracer.Extract(r.Context(), r.Header)
	ctx, span := s.cfg.Tracer.Start(ctx, name, trace.SpanKindServer,
		attribute.String("http.request.method", metricMethod(r.Method)),
		attribute.String("url.path", r.URL.Path),
		attribute.String("url.scheme", scheme(r)),
		attribute.String("server.address", r.Host),
		attribute.String("user_agent.original", r.UserAgent()))
	if route != "" {
		span.SetAttributes(attribute.String("http.route", route))
	}
	c.Request = r.WithContext(ctx)
	c.Next()
	code := c.Writer.Status()
	span.SetAttributes(attribute.Int("http.response.status_code", code))
	if code >= 500 {
		tracing.Fail(span, strconv.Itoa(code), nil)
	}
	span.End()
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// startProducer starts the producer span of a request that stores
// something for delivery (a job, an event), under the request's span, and
// writes its context to traceContext, which is stored with it: the pointer
// carries it, and every delivery attempt joins its trace. Callers check
// that tracing is on first, so that a request pays nothing when it is off.
func (s *Server) startProducer(ctx context.Context, traceContext *string, name string, attrs ...attribute.KeyValue) trace.Span {
	ctx, span := s.cfg.Tracer.Start(ctx, name, trace.SpanKindProducer,
		append([]attribute.KeyValue{attribute.String("messaging.operation.type", "create")}, attrs...)...)
	*traceContext = s.cfg.Tracer.Encode(ctx)
	return span
}

// endProducer ends a producer span: failed with code when err is set,
// otherwise with attrs, which describe what it stored.
func endProducer(span trace.Span, code string, err error, attrs ...attribute.KeyValue) {
	if err != nil {
		tracing.Fail(span, code, err)
	} else {
		span.SetAttributes(attrs...)
	}
	span.End()
}

// startCreate starts the span that creates job j. Off, it does nothing.
func (s *Server) startCreate(ctx context.Context, j *dispatch.Job) trace.Span {
	if !s.cfg.Tracer.Enabled() || j == nil {
		return nil
	}
	return s.startProducer(ctx, &j.TraceContext, "create job",
		attribute.String("dispatch.job.source", j.Source), attribute.String("dispatch.job.type", j.Type))
}

// endCreate ends a create span with the job it made (created: false for
// an idempotent repeat, which keeps the first create's trace).
func endCreate(span trace.Span, j dispatch.Job, created bool, err error) {
	if span != nil {
		endProducer(span, "create_failed", err,
			attribute.String("dispatch.job.id", dispatch.FormatID(j.ID)), attribute.Bool("dispatch.job.created", created))
	}
}

// startPublish starts the span that publishes event e; its context is
// stored with each job the event makes. Off, it does nothing.
func (s *Server) startPublish(ctx context.Context, e *dispatch.Event) trace.Span {
	if !s.cfg.Tracer.Enabled() {
		return nil
	}
	return s.startProducer(ctx, &e.TraceContext, "publish event",
		attribute.String("dispatch.event.source", e.Source), attribute.String("dispatch.event.type", e.Type))
}

// endPublish ends a publish span with the event and the number of jobs it made.
func endPublish(span trace.Span, e dispatch.Event, created bool, err error) {
	if span != nil {
		endProducer(span, "publish_failed", err, attribute.String("dispatch.event.id", dispatch.FormatID(e.ID)),
			attribute.Bool("dispatch.event.created", created), attribute.Int("messaging.batch.message_count", len(e.Jobs)))
	}
}
