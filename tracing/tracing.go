// Package tracing carries dispatch's OpenTelemetry traces through the
// service: from a caller's traceparent, through the job's stored trace
// context and the SQS message's attributes, to the webhook's traceparent.
//
// A nil *Tracer is tracing turned off (no OTEL_* exporter configured):
// every method is then a no-op that allocates nothing, so the delivery
// path pays nothing for it. Nothing here is global: each process (and each
// test instance) passes its own Tracer to the components it wires.
package tracing

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of dispatch's spans.
const Scope = "github.com/dispatchhq/dispatch"

// Tracer starts dispatch's spans and moves their context across HTTP
// headers, SQS message attributes and the job's stored form.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracer over tp that reads and writes headers with prop
// (nil: W3C trace context). A nil tp returns nil: tracing off.
func New(tp trace.TracerProvider, prop propagation.TextMapPropagator) *Tracer {
	if tp == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{tracer: tp.Tracer(Scope), prop: prop}
}

// Enabled reports whether spans are recorded at all.
func (t *Tracer) Enabled() bool { return t != nil }

var noSpan = trace.SpanFromContext(context.Background())

// Start starts a span of kind under ctx's span. Off, it returns ctx and a
// span that does nothing.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// StartLinked is Start with links to other spans (a retry's delivery to
// the job's create); invalid span contexts are left out.
func (t *Tracer) StartLinked(ctx context.Context, name string, kind trace.SpanKind, links []trace.SpanContext, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attrs...)}
	for _, l := range links {
		if l.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: l}))
		}
	}
	return t.tracer.Start(ctx, name, opts...)
}

// Inject writes ctx's span context into HTTP headers (traceparent, …).
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// Extract returns ctx with the remote span context of HTTP headers, as
// the parent of the spans started under it.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// The stored form is always W3C trace context, whatever the propagators
// for headers: "traceparent", or "traceparent\ntracestate".
var w3c = propagation.TraceContext{}

// Encode returns ctx's span context in its stored form ("" when ctx has
// none, or tracing is off): the job's trace_context column, and the SQS
// message's attributes.
func (t *Tracer) Encode(ctx context.Context) string {
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	if ts := c["tracestate"]; ts != "" {
		return c["traceparent"] + "\n" + ts
	}
	return c["traceparent"]
}

// Decode returns ctx with the span context of a stored form as its remote
// parent (ctx itself when s is empty or not a trace context).
func (t *Tracer) Decode(ctx context.Context, s string) context.Context {
	if t == nil || s == "" {
		return ctx
	}
	return w3c.Extract(ctx, Carrier(s))
}

// SpanContext returns the span context of a stored form (invalid when s
// holds none).
func SpanContext(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), Carrier(s)))
}

// Carrier turns a stored form into the W3C fields it holds, keyed as the
// propagator names them (traceparent, tracestate): the SQS message's
// attributes.
func Carrier(s string) propagation.MapCarrier {
	parent, state, _ := strings.Cut(s, "\n")
	c := propagation.MapCarrier{"traceparent": parent}
	if state != "" {
		c["tracestate"] = state
	}
	return c
}

// FromCarrier is the stored form of W3C fields (the SQS message's
// attributes): the inverse of Carrier.
func FromCarrier(fields map[string]string) string {
	parent := fields["traceparent"]
	if parent == "" {
		return ""
	}
	if state := fields["tracestate"]; state != "" {
		return parent + "\n" + state
	}
	return parent
}

// Fail marks span as failed with err's message and error.type kind.
func Fail(span trace.Span, kind string, err error) {
	span.SetAttributes(attribute.String("error.type", kind))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetStatus(codes.Error, kind)
	}
}
