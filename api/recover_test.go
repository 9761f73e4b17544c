package api_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/tracing"
)

// A handler that panics is answered 500 in the API's error shape, and its
// request span ends marked as failed with that status.
func TestAPanicIsAnsweredAndTracedAs500(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := setup(t,
		withConfig(func(c *api.Config) { c.Tracer = tracing.New(tp, propagation.TraceContext{}) }),
		withProcessor(func(context.Context, dispatch.Pointer) (dispatch.Decision, error) { panic("a bug") }))

	f.do(t, "POST", "/api/dispatch/process", `{"id":"42"}`).errorCode(t, http.StatusInternalServerError, dispatch.EInternal)

	var found bool
	for _, s := range spans.GetSpans() { // ended spans only
		if s.Name != "POST /api/dispatch/process" {
			continue
		}
		found = true
		if s.Status.Code != codes.Error {
			t.Errorf("the span's status is %v, want Error", s.Status.Code)
		}
		if !hasAttr(s.Attributes, attribute.Int("http.response.status_code", 500)) {
			t.Errorf("the span's attributes %v lack http.response.status_code=500", s.Attributes)
		}
	}
	if !found {
		t.Fatalf("no ended span for the request among %d", len(spans.GetSpans()))
	}
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}
