package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/dispatchhq/dispatch/tracing"
)

// newTracer configures tracing from the standard OpenTelemetry variables
// only. With no OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none, it returns nil: tracing is off, no exporter
// runs, and the code paths that would record spans are skipped.
//
// On, spans go to the endpoint over OTLP/HTTP (protobuf), batched; the
// service is OTEL_SERVICE_NAME (default "dispatch") with
// OTEL_RESOURCE_ATTRIBUTES; OTEL_TRACES_SAMPLER and its _ARG choose the
// sampler (default parentbased_always_on); OTEL_PROPAGATORS the header
// formats (default tracecontext,baggage). The exporter's own variables
// (headers, timeout, compression, OTEL_BSP_*) are read by the SDK.
// The returned function flushes and stops the exporter.
func newTracer(ctx context.Context, getenv func(string) string, version string) (*tracing.Tracer, func(context.Context) error, error) {
	off := func(context.Context) error { return nil }
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	perSignal := endpoint != ""
	if !perSignal {
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return nil, off, nil
	}
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return nil, off, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: dispatch exports traces over OTLP only (otlp or none)", e)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, off, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: dispatch exports OTLP over HTTP (http/protobuf); point it at the collector's OTLP/HTTP port (4318)", proto)
	}
	if !perSignal { // the general endpoint is a base URL; traces go to /v1/traces under it
		endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
	}
	sampler, err := samplerFrom(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, off, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, off, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	name := getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "dispatch"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceVersion(version)))
	if err == nil {
		// The run's own environment wins over the process's (tests run
		// several services in one process).
		res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
	}
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, off, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	return tracing.New(tp, autoprop.NewTextMapPropagator()), tp.Shutdown, nil
}

// samplerFrom reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as the
// specification names them.
func samplerFrom(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%s: want a ratio from 0 to 1", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%s: want always_on, always_off, traceidratio or parentbased_ one of them", name)
}
