package api

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metricsRegisterer = prometheus.Registerer

type apiMetrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	jobsCreated prometheus.Counter
}

func newAPIMetrics(reg prometheus.Registerer) *apiMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	return &apiMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_http_requests_total", Help: "API requests by method, route and status code (code=\"404\").",
		}, []string{"method", "route", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "dispatch_http_request_duration_seconds", Help: "API request duration by method and route, from the first byte of the request being handled to the handler's return.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12), // 1 ms to about 60 s
		}, []string{"method", "route"}),
		jobsCreated: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_jobs_created_total", Help: "Jobs created (idempotent repeats not counted).",
		}),
	}
}
