package api

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metricsRegisterer = prometheus.Registerer

type apiMetrics struct {
	requests    *prometheus.CounterVec
	jobsCreated prometheus.Counter
}

func newAPIMetrics(reg prometheus.Registerer) *apiMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	return &apiMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_http_requests_total", Help: "API requests by method, route and status.",
		}, []string{"method", "route", "status"}),
		jobsCreated: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_jobs_created_total", Help: "Jobs created (idempotent repeats not counted).",
		}),
	}
}
